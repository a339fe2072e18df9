"""The command line's grammar: every command and its arguments (argparse), with their help,
and the nccl-tests flags the sweep takes but labkit cannot honour."""

from __future__ import annotations

import argparse
from pathlib import Path

from labkit.analysis.calibration import TRIAL_SECONDS
from labkit.model.traffic import schedules

DESCRIPTION = """labkit: emulate, measure and relieve the network bottleneck of AI training.

Commands: doctor, validate, inspect, schema, run, shell, sweep, tune, calibrate, batch,
report, figures, runs, samples, clean, lab, labs, serve.
Exit codes: 0 success; 1 a run or check failed; 2 bad input (scenario file, arguments);
130 interrupted."""


SET_HELP = ("change one key of the scenario (repeatable): a key path as in a grid's axes "
            "and a YAML value, e.g. --set fabric.lossless=true --set "
            "defaults.link.buffer_kb=2048")


def _size_arguments(parser, maxbytes: str, factor: int, iters: int, what: str) -> None:
    """The message sizes (-b, -e, -f), iterations (-n) and --set of a sweep-like command."""
    parser.add_argument("-b", "--minbytes", default="64K",
                        help="smallest message size, e.g. 64K (default 64K)")
    parser.add_argument("-e", "--maxbytes", default=maxbytes,
                        help=f"largest message size, e.g. 8M (default {maxbytes})")
    parser.add_argument("-f", "--stepfactor", type=int, default=factor,
                        help=f"multiply the size by this between steps (default {factor}), "
                             f"e.g. -f {2 if factor != 2 else 4}")
    parser.add_argument("-n", "--iters", type=int, default=iters,
                        help=f"{what} (default {iters}), e.g. -n {2 * iters}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=SET_HELP)


WARMUP_OPS = 1  # a sweep's untimed ops per size (labkit.runs.experiment.run_sweep)
DATATYPES = ("float", "float32")  # what a chunk's values are (nccltests.WORD_BYTES)
REDOPS = ("sum",)  # how a reduction combines them (labkit.model.traffic.schedules)


def _nccl_arguments(parser) -> None:
    """nccl-tests' -w, -c, -d and -o, as far as labkit's sweep has them
    (:func:`nccl_refusal` refuses the rest)."""
    parser.add_argument("-w", "--warmup_iters", type=int, default=WARMUP_OPS, metavar="N",
                        help=f"untimed warm-up ops per size: labkit runs {WARMUP_OPS} "
                             f"(the default; nccl-tests' is 5), other counts are refused")
    parser.add_argument("-c", "--check", type=int, choices=(0, 1), default=1, metavar="0|1",
                        help="check the results: labkit always checks every op's data "
                             "(#wrong), so -c 0 changes nothing")
    parser.add_argument("-d", "--datatype", default=DATATYPES[0], metavar="TYPE",
                        help="the element type: float (float32, the default) is the one "
                             "labkit's messages carry; others are refused")
    parser.add_argument("-o", "--redop", default=REDOPS[0], metavar="OP",
                        help="the reduction: sum (the default) is the one labkit's "
                             "reductions do; others are refused (the collective is --op)")


def nccl_refusal(args) -> str | None:
    """Why the sweep cannot honour nccl-tests' -w, -d or -o as given (None: it can)."""
    if args.warmup_iters != WARMUP_OPS:
        return (f"-w {args.warmup_iters}: labkit sweep runs {WARMUP_OPS} untimed warm-up op "
                f"per size; give -w {WARMUP_OPS} or leave -w out")
    if args.datatype not in DATATYPES:
        return (f"-d {args.datatype}: labkit's collectives carry float (float32) elements "
                "only; give -d float or leave -d out")
    if args.redop not in REDOPS:
        return (f"-o {args.redop}: labkit's reductions add (sum) only; give -o sum or leave "
                "-o out")
    return None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("labkit")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """labkit's command line: every command and its arguments."""
    parser = argparse.ArgumentParser(
        prog="labkit", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION,
        epilog="example: labkit run topologies/bottleneck.yaml --policy fifo --policy priority")
    parser.add_argument("--version", action="version", version=f"labkit {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = sub.add_parser("doctor", help="check that this machine can run labkit")
    doctor.add_argument("--json", action="store_true",
                        help="print the checks as JSON (schema labkit.doctor)")
    validate = sub.add_parser(
        "validate", help="check a scenario or grid file as a run would, without root and "
                         "without running any code of yours")
    validate.add_argument("file", type=Path,
                          help="a scenario file, or a grid file (it has a `scenario:` key), "
                               "e.g. topologies/bottleneck.yaml")
    validate.add_argument("--json", action="store_true",
                          help="print the verdict as JSON (schema labkit.validate): ok, file, "
                               "key, reason")
    inspect = sub.add_parser(
        "inspect", help="print the fabric a scenario describes: nodes, ports, addresses, "
                        "routes, lanes, the bottleneck (no root, none of your code)")
    inspect.add_argument("scenario", type=Path,
                         help="a scenario file, e.g. topologies/bottleneck.yaml")
    inspect.add_argument("--json", action="store_true",
                         help="print the fabric as JSON (schema labkit.inspect)")
    inspect.add_argument("--html", type=Path, metavar="FILE",
                         help="also draw the fabric into this HTML page (plotly.js is "
                              "written beside it), e.g. --html data/figures/fabric.html")
    sub.add_parser("schema", help="print the JSON Schema of scenario files, for editors "
                                  "(docs/scenarios.md)")
    run = sub.add_parser("run", help="run a scenario under one or more policies")
    run.add_argument("scenario", type=Path,
                     help="a scenario file, e.g. topologies/bottleneck.yaml")
    run.add_argument("--policy", action="append", default=[],
                     help="isolated, fifo, priority, reactive, proactive, state-aware, or "
                          "<fifo|priority>+<controller> (repeatable; default: the scenario's), "
                          "e.g. --policy fifo --policy priority")
    run.add_argument("--controller", action="append", default=[], metavar="NAME=FILE:CLASS",
                     help="your own controller, for a policy to name like a built-in one "
                          "(repeatable), e.g. --controller calm=docs/examples/controller.py:"
                          "Calm --policy calm")
    run.add_argument("--out", type=Path,
                     help="run directory (default: data/runs/<run-id>), e.g. --out data/runs/mine")
    run.add_argument("--seed", type=int, help="override the scenario's seed, e.g. --seed 7")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help=SET_HELP)
    run.add_argument("--duration", type=float, metavar="S",
                     help="cap each policy's traffic at S seconds, e.g. --duration 10")
    run.add_argument("--pcap", action="append", default=[], metavar="LINK",
                     help="capture LINK (e.g. leaf1-spine1) to <out>/<policy>/LINK.pcap "
                          "(repeatable)")
    run.add_argument("--no-telemetry", action="store_true",
                     help="leave out the queue and latency probes and the queue poller: only "
                          "to measure what they cost (the run has no queue or latency data)")
    run.add_argument("--json", action="store_true",
                     help="print the final summary as JSON on stdout (schema labkit.report); "
                          "progress goes to stderr")
    run.add_argument("--pcap-snaplen", type=int, default=0, metavar="BYTES",
                     help="bytes kept per captured packet (default: whole packets), "
                          "e.g. --pcap-snaplen 128")
    shell = sub.add_parser(
        "shell", help="bring a scenario's fabric up and open Mininet's command line in it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="inside: `g1 ping -c 3 g5`, `st1 iperf3 -s &`, `g1 iperf3 -c st1 -t 5`,\n"
               "`leaf1 tc -s qdisc show dev leaf1-eth0`, `nodes`, `help`; `exit` or Ctrl-D\n"
               "tears everything down, as after a run")
    shell.add_argument("scenario", type=Path,
                       help="a scenario file, e.g. topologies/bottleneck.yaml")
    shell.add_argument("--policy", default="fifo",
                       help="the policy whose queues, lanes and valves to build (default "
                            "fifo), e.g. --policy priority")
    shell.add_argument("--controller", action="append", default=[], metavar="NAME=FILE:CLASS",
                       help="your own controller, for --policy to name")
    sweep = sub.add_parser("sweep", help="a collective's bandwidth across sizes (nccl-tests)")
    sweep.add_argument("scenario", type=Path,
                       help="a scenario file whose fabric and ranks to use, e.g. "
                            "topologies/leaf-spine.yaml")
    sweep.add_argument("--op", default="all_reduce", choices=schedules.OPS,
                       metavar="COLLECTIVE",
                       help=f"{', '.join(schedules.OPS)}: as nccl-tests' <name>_perf "
                            "(all_to_all: alltoall_perf); default all_reduce, e.g. --op "
                            "gather")
    sweep.add_argument("--algo",
                       help="by op: " + "; ".join(f"{op} {', '.join(algos)}"
                                                  for op, algos in schedules.ALGOS.items())
                            + "; or auto (All-Reduce: the algorithm `labkit tune`'s model "
                              "of this fabric chooses at each size). Default: the op's "
                              "first, e.g. --algo tree")
    _size_arguments(sweep, "8M", 2, 10, "timed iterations per size")
    _nccl_arguments(sweep)
    sweep.add_argument("--units", choices=("emulated", "real"), default="emulated",
                       help="real: also print algbw and busbw in GB/s of the fabric the "
                            "scenario's scale factor says the links stand for")
    sweep.add_argument("--out", type=Path,
                       help="record the sweep in this new directory (default: "
                            "data/runs/<run-id>): manifest, sweep.parquet, .csv and .json")
    sweep.add_argument("--json", action="store_true",
                       help="print the recorded sweep as JSON on stdout (schema labkit.report, "
                            "as `labkit report --json` gives it); nccl-tests' lines go to "
                            "stderr")
    tune = sub.add_parser(
        "tune", help="sweep every All-Reduce algorithm on a scenario's fabric and fit the "
                     "model that `algo: auto` chooses by")
    tune.add_argument("scenario", type=Path,
                      help="a scenario file whose fabric and ranks to use, e.g. "
                           "topologies/leaf-spine.yaml")
    _size_arguments(tune, "4M", 4, 5, "timed iterations per size and algorithm")
    tune.add_argument("--out", type=Path,
                      help="record the tuning in this new directory (default: "
                           "data/runs/<run-id>); the model is kept in data/models/<fabric>/")
    tune.add_argument("--json", action="store_true",
                      help="print the recorded tuning as JSON on stdout (schema "
                           "labkit.report, as `labkit report --json` gives it); its lines "
                           "go to stderr")
    calibrate = sub.add_parser(
        "calibrate", help="the highest link rate this machine emulates a scenario at faithfully")
    calibrate.add_argument("scenario", type=Path,
                           help="a scenario file, e.g. topologies/bottleneck.yaml")
    calibrate.add_argument("--policy", action="append", default=[],
                           help="run only this policy in each trial (repeatable; default: "
                                "the scenario's own), e.g. --policy fifo")
    calibrate.add_argument("--duration", "--seconds", dest="duration", type=float,
                           default=TRIAL_SECONDS, metavar="S",
                           help=f"seconds of traffic per policy in each trial (default "
                                f"{TRIAL_SECONDS:g}), e.g. --duration 15 (--seconds: its "
                                "old name)")
    calibrate.add_argument("--out", type=Path,
                           help="record the calibration in this new directory (default: "
                                "data/runs/<id>); each trial is a run of its own")
    calibrate.add_argument("--json", action="store_true",
                           help="print the trials and the advice as JSON on stdout (schema "
                                "labkit.calibrate); progress goes to stderr")
    batch = sub.add_parser(
        "batch", help="run a grid of scenario variants x policies x seeds, here or on Slurm",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="a grid file names a scenario and the values of its keys to combine "
               "(docs/batches.md):\n"
               "  scenario: ../bottleneck.yaml\n"
               "  axes:\n"
               "    traffic[0].size_bytes: [1MiB, 4MiB]\n"
               "    defaults.link.rate_mbps: [50, 100]\n"
               "  policies: [[isolated, fifo], [isolated, priority]]\n"
               "  seeds: [1, 2]\n"
               "  duration: 10")
    batch.add_argument("grid", type=Path,
                       help="a grid file, e.g. topologies/grids/bottleneck-sizes.yaml")
    batch.add_argument("--executor", choices=("local", "slurm"), default="local",
                       help="local: one run after another on this machine (default); slurm: "
                            "each run an exclusive Slurm job, submitted with submitit")
    batch.add_argument("--out", type=Path,
                       help="the batch directory (default: data/runs/<batch-id>); with "
                            "--executor slurm it must be on a filesystem the nodes share")
    batch.add_argument("--dry-run", action="store_true",
                       help="list the points the grid expands into, run nothing")
    batch.add_argument("--json", action="store_true",
                       help="print the batch's record as JSON on stdout (schema labkit.batch; "
                            "with --dry-run: the points it would run); progress goes to "
                            "stderr")
    report = sub.add_parser("report", help="print the summary of a recorded run (a sweep: "
                            "its rows again, as nccl-tests prints them; a tuning: its rows "
                            "and its model)")
    report.add_argument("run_dir", type=Path, help="a run, sweep or tuning directory, e.g. "
                        "data/sample/bottleneck, data/sample/sweeps/ring, "
                        "data/sample/tune/leaf-spine")
    report.add_argument("--json", action="store_true",
                        help="print the summary as JSON (schema labkit.report)")
    figures = sub.add_parser("figures", help="write a run's, sweep's or tuning's figures as "
                             "HTML, SVG and PNG")
    figures.add_argument("run_dir", type=Path, help="a run, sweep or tuning directory, e.g. "
                         "data/sample/bottleneck, data/sample/sweeps/ring")
    figures.add_argument("--out", type=Path,
                         help="a new or empty directory for the figures (default: "
                              "data/figures/<run-id>), e.g. --out /tmp/figures")
    figures.add_argument("--json", action="store_true",
                         help="print the files written as JSON on stdout (schema "
                              "labkit.figures); progress goes to stderr")
    runs = sub.add_parser("runs", help="list recorded runs with their status and size")
    runs.add_argument("--json", action="store_true",
                      help="print the list as JSON (schema labkit.runs)")
    samples = sub.add_parser("samples", help="record the shipped samples in data/sample/ "
                             "again, the figures in docs/figures/ and the numbers the docs "
                             "quote from them (make samples)")
    samples.add_argument("--only", action="append", default=[], metavar="PATH",
                         help="only this sample, or the samples in this folder "
                              "(repeatable), e.g. --only sweeps --only bottleneck")
    samples.add_argument("--list", action="store_true",
                         help="print each sample's command and estimate; record nothing")
    samples.add_argument("--quotes", action="store_true",
                         help="only write the numbers README.md, docs/ and the notebooks "
                              "quote (their <!-- sample key --> markers) from the samples "
                              "as they are; record nothing")
    samples.add_argument("--allow-dirty", action="store_true",
                         help="record with uncommitted changes (the manifests then say "
                              "-dirty)")
    lab = sub.add_parser("lab", help="open JupyterLab on the notebooks and labs, with the "
                         "labkit kernel (make lab)")
    lab.add_argument("--port", type=int, help="the server's port (default: Jupyter's, 8888 "
                     "or the next free one)")
    lab.add_argument("--ip", default="127.0.0.1", help="the address to listen on (default "
                     "127.0.0.1; in a container 0.0.0.0, its port published on the host's "
                     "loopback: docs/classroom.md)")
    lab.add_argument("--no-browser", action="store_true", help="print the address, open no "
                     "browser (a remote machine: forward the port with ssh -L)")
    lab.add_argument("--kernel-only", action="store_true", help="install the labkit kernel "
                     "and start nothing (for a JupyterLab or JupyterHub of your own)")
    lab.add_argument("--user", action="store_true", help="install the kernel for your user "
                     "(~/.local/share/jupyter), not into labkit's environment")
    labs = sub.add_parser("labs", help="hand the labs out without their solutions, and "
                          "grade what students hand back")
    labs_sub = labs.add_subparsers(dest="labs_command", required=True, metavar="ACTION",
                                   help="release or grade")
    release = labs_sub.add_parser("release", help="write the labs as students start them "
                                  "(blank answers, no solutions) into a new folder")
    release.add_argument("out", type=Path, help="a new or empty folder, e.g. ~/handout")
    grade = labs_sub.add_parser("grade", help="run each student's answers in the labs as "
                                "labkit ships them; write a row per student and check")
    grade.add_argument("submissions", type=Path, help="a folder of <student>/<lab>.ipynb "
                       "(or nbgrader's <student>/<assignment>/<lab>.ipynb)")
    grade.add_argument("--out", type=Path, help="a new or empty folder for checks.csv, "
                       "scores.csv and feedback/ (default data/grades/<date>-<time>)")
    grade.add_argument("--live", action="store_true", help="run the labs' real runs too "
                       "(root; it runs the students' code as root: a machine of the class's "
                       "own); without it, a check that needs a run is not counted")
    serve = sub.add_parser("serve", help="(root) run scenarios for a group's users without "
                           "root, one at a time, through a Unix socket (labs 2's live runs)")
    serve.add_argument("--group", default="labkit", help="the group whose members may ask "
                       "for runs (default labkit)")
    serve.add_argument("--socket", type=Path, help="where to listen (default "
                       "/run/labkit/serve.sock, or $LABKIT_SERVE)")
    clean = sub.add_parser("clean", help="remove what killed runs left behind (by registry)")
    clean.add_argument("--dry-run", action="store_true",
                       help="say what each leftover run recorded, remove nothing")
    return parser
