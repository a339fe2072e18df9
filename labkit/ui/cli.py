"""labkit: emulate, measure and relieve the network bottleneck of AI training.

Commands: doctor, validate, inspect, schema, run, shell, sweep, tune, calibrate, batch,
report, figures, runs, samples, clean, lab, labs, serve.
Exit codes: 0 success; 1 a run or check failed; 2 bad input (scenario file, arguments);
130 interrupted.
``--json`` (doctor, validate, inspect, run, sweep, tune, calibrate, batch, report, figures,
runs) prints one JSON document on stdout whose ``"schema"`` names its shape and version
(docs/data-model.md); progress goes to stderr.
Without ``--out``, what a command writes goes under data/: runs, sweeps, tunings and
batches to data/runs/<id>/, figures to data/figures/<run-id>/.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from labkit.analysis.calibration import TRIAL_SECONDS
from labkit.model import scenario as scenario_mod
from labkit.model.manifest import BatchPoint, Rates
from labkit.model.summary import Program, Summary

console = Console(width=max(120, Console().width))
err = Console(stderr=True, soft_wrap=True)


JSON_SCHEMA = 1  # the version of every --json document's shape; bumped when one changes


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
    (:func:`_nccl_refusal` refuses the rest)."""
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


def _nccl_refusal(args) -> str | None:
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
        description=__doc__.split("``--json``")[0].strip(),
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
    sweep.add_argument("--op", default="all_reduce", choices=("all_reduce", "all_gather",
                                                              "reduce_scatter", "all_to_all",
                                                              "broadcast"),
                       help="the collective, e.g. --op all_gather (default all_reduce; "
                            "nccl-tests' reduce, gather, scatter and sendrecv are not here "
                            "yet)")
    sweep.add_argument("--algo", default="ring",
                       help="ring, tree, halving_doubling, hierarchical, pairwise (by op), or "
                            "auto (All-Reduce: the algorithm `labkit tune`'s model of this "
                            "fabric chooses at each size), e.g. --algo tree")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    began_ns = time.time_ns() - 1_000_000_000  # file systems' clocks are coarser than ours
    try:
        return {"doctor": cmd_doctor, "validate": cmd_validate, "inspect": cmd_inspect,
                "schema": cmd_schema, "run": cmd_run, "shell": cmd_shell, "sweep": cmd_sweep,
                "tune": cmd_tune, "calibrate": cmd_calibrate, "batch": cmd_batch,
                "report": cmd_report, "figures": cmd_figures, "runs": cmd_runs,
                "samples": cmd_samples, "clean": cmd_clean, "lab": cmd_lab,
                "labs": cmd_labs, "serve": cmd_serve}[args.command](args)
    except scenario_mod.ScenarioError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        from labkit.kernel.interrupts import ENDING

        for sig in ENDING:  # more Ctrl-C as we leave
            signal.signal(sig, signal.SIG_IGN)
        err.print("[yellow]interrupted[/]: everything labkit created was torn down")
        return 130
    finally:
        _hand_back(args, began_ns)


def _hand_back(args, since_ns: int) -> None:
    """Under sudo, what this command wrote in the checkout or its ``--out`` is the user's."""
    from labkit.kernel.bpf import REPO_ROOT
    from labkit.runs.owner import hand_back, invoking_user

    owner = invoking_user()
    if owner is None:
        return
    out, page = getattr(args, "out", None), getattr(args, "html", None)
    written = [Path(out)] if out else []
    if page:
        from labkit.ui.figures import PLOTLY_JS

        written += [Path(page), Path(page).with_name(PLOTLY_JS)]
    hand_back([REPO_ROOT, *written], owner, since_ns)


def _print_json(kind: str, body: dict) -> None:
    """One JSON document on stdout: {"schema": "labkit.<kind>", "version": N, ...}."""
    print(json.dumps({"schema": f"labkit.{kind}", "version": JSON_SCHEMA, **body}, indent=2))


def cmd_validate(args) -> int:
    """Parse a scenario or grid file as a run would (every point of a grid), with none of
    the checks that need root or the machine, and without importing the user's files."""
    from labkit.model import grid

    file = str(args.file)
    try:
        text, doc = scenario_mod.read_yaml(file)
        is_grid = scenario_mod.is_grid(doc)
        found = grid.parse(doc, file, text) if is_grid else scenario_mod.parse(doc, file)
    except scenario_mod.ScenarioError as exc:
        if not args.json:
            raise  # main() prints it, one line, and exits 2
        _print_json("validate", {"ok": False, "file": exc.file, "key": exc.key,
                                 "reason": exc.reason})
        return 2
    if args.json:
        _print_json("validate", {"ok": True, "file": file, "key": None, "reason": None,
                                 "kind": "grid" if is_grid else "scenario"})
        return 0
    if isinstance(found, grid.Grid):
        sc = found.base
        what = (f"grid {found.name}: {found.size} runs of {escape(found.scenario_path)}, "
                "each a valid scenario")
    else:
        sc, fabric = found, found.fabric
        what = (f"scenario {sc.name}: {len(fabric.routers)} routers, {len(fabric.hosts)} "
                f"hosts, {len(fabric.links) + len(fabric.nvlinks)} links; policies "
                f"{', '.join(sc.policies)}")
    console.print(f"{escape(file)}: ok, {what}", highlight=False, soft_wrap=True)
    if sc.kinds:
        console.print(f"note: entries of your own traffic kinds "
                      f"({', '.join(name for name, _ in sc.kinds)}) are checked by their "
                      "classes when a run starts", highlight=False)
    return 0


def cmd_inspect(args) -> int:
    """The fabric of a scenario, read without root and without importing the user's files."""
    from labkit.analysis import describe

    desc = describe.fabric(scenario_mod.load(args.scenario))
    if args.html:
        from labkit.ui import figures, plots

        try:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            figures.write_page(plots.fabric_map(desc), args.html, "fabric")
        except OSError as exc:
            err.print(f"[red]error:[/] cannot write {escape(str(args.html))}: {exc.strerror}",
                      highlight=False)
            return 2
    if args.json:
        _print_json("inspect", desc)
    else:
        _print_fabric(desc)
    if args.html:
        (err if args.json else console).print(f"drew the fabric into {escape(str(args.html))}",
                                              highlight=False)
    return 0


def _print_fabric(desc: dict) -> None:
    from labkit.analysis.describe import KIND_NAMES, kind_text, rate_text

    scale, nodes, links = desc["scale_factor"], desc["nodes"], desc["links"]
    factor, mtus = desc["rate_factor"], {k["mtu"] for k in links}
    count = Counter(n["role"] or n["kind"] for n in nodes)
    console.print(f"[bold]{desc['scenario']}[/] ({escape(desc['file'])})"
                  + (f": {escape(desc['description'])}" if desc["description"] else ""),
                  highlight=False, soft_wrap=True)
    console.print(", ".join(_plural(k, KIND_NAMES[name]) for name, k in count.items())
                  + f", {_plural(len(links), 'link')}; 1 emulated Mbit/s stands for {scale:g} "
                  "real Mbit/s" + ("" if factor == 1 else f"; links run at their rate × "
                                   f"{factor} (emulation.rate_factor)"), highlight=False)
    t = Table(title="nodes and their ports", title_justify="left")
    for col in ("node", "kind", "port", "address", "to", "link: rate, egress buffer"):
        t.add_column(col, no_wrap=col != "kind")
    by_name = {k["name"]: k for k in links}
    for n, after in zip(nodes, [*nodes[1:], None], strict=True):
        last = len(n["ports"]) > 1 or after is None or after["kind"] != n["kind"]
        for i, p in enumerate(n["ports"]):
            k = by_name[p["link"]]
            link = f"{k['rate_mbps']:g} Mbit/s, {k['buffer_kb']} KiB" + (
                "" if len(mtus) == 1 else f", MTU {k['mtu']}")
            t.add_row(n["name"] if i == 0 else "", kind_text(n) if i == 0 else "", p["ifname"],
                      p["address"], p["peer_port"],
                      f"[red]{link} · bottleneck[/]" if k["bottleneck"] else link,
                      end_section=last and i == len(n["ports"]) - 1)
    console.print(t)
    if len(mtus) == 1:
        console.print(f"every link's MTU: {mtus.pop()}", highlight=False)
    r = Table(title="routes", title_justify="left")
    for col in ("node", "to", "next hops"):
        r.add_column(col)
    for node, routes in desc["routes"].items():
        groups: dict[tuple, list[str]] = {}
        for route in routes:
            if route["dst"] != "default":
                groups.setdefault(tuple(zip(route["via"], route["nexthops"], strict=True)),
                                  []).extend(route["hosts"])
        for i, (via, to) in enumerate(groups.items()):
            r.add_row(node if i == 0 else "", " ".join(to), ", ".join(
                f"{v} {ip}" for v, ip in via) + (" (ECMP)" if len(via) > 1 else ""))
    console.print(r)
    ways = max((p["ways"] for p in desc["paths"]), default=1)
    console.print("every host: default via its router, which reaches its own hosts directly; "
                  "ECMP: a next hop per equal-cost path; "
                  f"{len(desc['paths'])} host pairs, " + (
                      "one shortest path each" if ways == 1 else
                      f"up to {ways} equal-cost paths each"), highlight=False, soft_wrap=True)
    lanes = desc["lanes"]
    ll = Table(title="lanes (the first rule that matches decides)", title_justify="left")
    for col in ("#", "lane", "matches", "added by"):
        ll.add_column(col, justify="right" if col == "#" else "left")
    for i, rule in enumerate(lanes["rules"], 1):
        ll.add_row(str(i), rule["lane"], rule["text"], escape(rule["added_by"] or "the scenario"))
    ll.add_row("", lanes["default"], "everything else", "labkit")
    console.print(ll)
    classifier = lanes["classifier"] or "labkit's own (bpf/classifier.bpf.c)"
    console.print(f"classifier: {escape(classifier)}; under priority vip goes first, then "
                  "normal, then low; under isolated and fifo a port has one queue" + (
                      f"; lossless (paused, not dropped): {', '.join(lanes['lossless'])}"
                      if lanes["lossless"] else ""), highlight=False, soft_wrap=True)
    for b in desc["bottlenecks"]:
        ports = ", ".join(f"{p['ifname']} → {p['towards']}" for p in b["ports"])
        console.print(f"[red bold]bottleneck[/] {b['link']}: "
                      f"{rate_text(b['rate_mbps'], scale)}, MTU {b['mtu']}, buffer "
                      f"{b['buffer_kb']} KiB per egress port ({ports})"
                      + (f", loses {b['loss_percent']:g} %" if b["loss_percent"] else "")
                      + f"; on the shortest paths of {b['host_pairs']} of "
                      f"{len(desc['paths'])} host pairs", highlight=False, soft_wrap=True)


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "es" if what.endswith("ch") else "s")


def cmd_schema(_args) -> int:
    from labkit.model.schema import scenario_schema

    print(json.dumps(scenario_schema(), indent=2))
    return 0


def cmd_doctor(args) -> int:
    from labkit.ui import doctor, serve

    found = doctor.checks()
    failed = sum(1 for c in found if c.required and not c.ok)
    if args.json:
        _print_json("doctor", {"ready": not failed, "root": os.geteuid() == 0,
                               "checks": [asdict(c) for c in found]})
        return 1 if failed else 0
    serving = serve.SOCKET if serve.available() else None
    for i, line in enumerate(doctor.report(found, os.geteuid() == 0, serving)):
        console.print(line, highlight=False, soft_wrap=i > len(found))
    return 1 if failed else 0


def _before_building() -> None:
    """Before a command builds fabrics: SIGINT, SIGTERM and SIGHUP (a closed terminal)
    stop it, and a note if a killed run left objects behind."""
    from labkit.kernel import interrupts

    for sig in interrupts.ENDING:
        signal.signal(sig, _raise_interrupt)
    _note_leftovers()


def _note_user_code(sc: scenario_mod.Scenario, controllers: Sequence[str] = (),
                    kinds: bool = True) -> None:
    """Say which of the user's own files a run is about to load (they run as root);
    ``kinds=False``: not its traffic kinds (a shell starts no traffic)."""
    lines = scenario_mod.user_files(sc, kinds) + [f"controller {c.replace('=', ': ', 1)}"
                                                  for c in controllers]
    for line in lines:
        err.print(f"loading your {line} (it runs as root)", highlight=False, soft_wrap=True)


def _note_leftovers() -> None:
    """A line on stderr if a killed run left objects behind (labkit run, shell)."""
    from labkit.kernel import registry

    if note := registry.leftovers_line():
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def _failed(exc: Exception) -> int:
    """Exit code and message for a run that could not start or did not finish."""
    from labkit.kernel.registry import RunLockedError
    from labkit.runs.runner import NotReady, RunFailed

    if isinstance(exc, FileExistsError):
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    if isinstance(exc, NotReady | RunLockedError):
        err.print(f"[red]error:[/] {escape(str(exc))}")
    else:  # RunFailed, or a kernel-side failure while `labkit shell` built its fabric
        err.print(f"[red]{'run' if isinstance(exc, RunFailed) else 'shell'} failed:[/] {exc}")
    return 1


def _refused(exc: Exception) -> int:
    """Say what is wrong with the command's input, in one line; exit code 2."""
    err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
    return 2


def _sizes(args) -> list[int] | None:
    """The message sizes of -b, -e and -f (None, said on stderr, when they do not fit)."""
    from labkit.analysis import nccltests

    try:
        return nccltests.sizes(scenario_mod.parse_size(args.minbytes, "-b"),
                               scenario_mod.parse_size(args.maxbytes, "-e"), args.stepfactor)
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return None


def cmd_tune(args) -> int:
    from labkit.analysis import nccltests
    from labkit.runs import runner

    sc, rates = runner.resolve_rates(_scenario(args), str(args.scenario))
    size_list = _sizes(args)
    if size_list is None:
        return 2
    _before_building()
    lines = sys.stderr if args.json else sys.stdout  # stdout carries the JSON document
    print(f"# labkit tune: every All-Reduce algorithm over {len(sc.ranks)} ranks of {sc.name}, "
          f"{args.iters} timed ops per size", *([f"# {_rates_line(rates)}"] if rates else []),
          "#", *nccltests.header(), sep="\n", flush=True, file=lines)
    try:
        done = runner.tune(sc, size_list, args.iters, out=args.out, argv=sys.argv,
                           on_row=lambda algo, row: print(f"{row.line()}  {algo}", flush=True,
                                                          file=lines))
    except (FileExistsError, RuntimeError) as exc:
        return _failed(exc)
    said = err if args.json else console
    for size in size_list:
        said.print(f"auto at {size} B: {done.model.choose(size).reason}", highlight=False)
    said.print(f"model kept in {done.model_path}; tuning recorded in {done.path}")
    if args.json:
        return _report_tuning(argparse.Namespace(run_dir=done.path, json=True))
    return 0


def _scenario(args):
    """The scenario file named on the command line, with its ``--set`` changes written in."""
    from labkit.model import grid

    return grid.scenario_with(args.scenario, args.set) if args.set else (
        scenario_mod.load(args.scenario))


def cmd_run(args) -> int:
    from labkit.runs import runner

    _before_building()
    sc = _scenario(args)
    _note_user_code(sc, args.controller)
    with _progress(to_stderr=args.json) as progress:
        tasks: dict[str, TaskID] = {}

        def show(p: runner.Progress) -> None:
            if p.policy not in tasks:
                tasks[p.policy] = progress.add_task("", total=p.total)
            what = {"building": "building fabric", "running": "running"}.get(p.stage, p.stage)
            progress.update(tasks[p.policy], completed=p.done,
                            description=f"{p.policy:<11} {what}")

        try:
            # the file itself when nothing is changed: the run's errors then name it
            run = runner.run(sc if args.set else args.scenario,
                             args.policy or None, out=args.out, seed=args.seed,
                             duration=args.duration, on_progress=show,
                             controllers=_named_controllers(args.controller), pcap=args.pcap,
                             pcap_snaplen=args.pcap_snaplen, telemetry=not args.no_telemetry,
                             argv=sys.argv)
        except (FileExistsError, RuntimeError) as exc:
            return _failed(exc)
    if args.json:
        _print_json("report", {"run_dir": str(run.path), "status": "complete",
                               "summary": run.summary.to_json()})
        return 0
    if rates := run.manifest.rates:
        console.print(_rates_line(rates), highlight=False)
    if auto := run.manifest.auto:
        console.print(f"algo auto: {auto.reason}", highlight=False)
    _print_summary(run.summary)
    console.print(f"\nrun recorded in [bold]{run.path}[/]")
    return 0


def _rates_line(rates: Rates) -> str:
    """What ``emulation.rate_factor`` did to a run, in a sentence."""
    where = (f"the newest calibration, {rates.calibration}" if rates.calibration
             else "emulation.rate_factor")
    return (f"rates x{rates.factor:g} ({where}): the bottleneck at "
            f"{rates.bottleneck_rate_mbps:g} Mbit/s, 1 emulated Mbit/s stands for "
            f"{rates.scale_factor:g} real")


def cmd_calibrate(args) -> int:
    from labkit.runs import runner

    _before_building()
    _note_user_code(scenario_mod.load(args.scenario))
    with _progress("ops", to_stderr=args.json) as progress:
        tasks: dict[tuple[float, str], TaskID] = {}
        current = [1.0]

        def on_trial(factor: float, what: str) -> None:
            current[0] = factor
            if what != "running":
                style = "green" if what == "held" else "yellow"
                progress.console.print(f"x{factor:g}: [{style}]{what}[/]", highlight=False)

        def show(p: runner.Progress) -> None:
            key = (current[0], p.policy)
            if key not in tasks:
                tasks[key] = progress.add_task("", total=p.total)
            progress.update(tasks[key], completed=p.done,
                            description=f"x{current[0]:<5g} {p.policy:<11} {p.stage}")

        try:
            result = runner.calibrate(args.scenario, args.policy or None, seconds=args.duration,
                                      out=args.out, on_trial=on_trial, on_progress=show,
                                      argv=sys.argv)
        except (FileExistsError, RuntimeError) as exc:
            return _failed(exc)
    if args.json:
        _print_json("calibrate", {**asdict(result),
                                  "trials": [{**asdict(t), "held": t.held}
                                             for t in result.trials],
                                  "best": result.best.factor if result.best else None,
                                  "advice": result.advice})
        return 0 if result.best else 1
    t = Table(title=f"calibration of {result.scenario} on this machine",
              caption=f"rates in emulated Mbit/s; the scenario's bottleneck: "
                      f"{result.bottleneck_rate_mbps:g} Mbit/s, scale factor "
                      f"{result.scale_factor:g}; each trial is a run in "
                      f"{Path(result.trials[0].run).parent if result.trials else 'data/runs'}",
              caption_justify="left")
    for col in ("factor", "bottleneck rate", "CPU busy", "held", "why not", "run"):
        t.add_column(col)
    for trial in result.trials:
        t.add_row(f"x{trial.factor:g}", f"{trial.rate_mbps:g}", f"{trial.cpu_busy:.0%}",
                  "yes" if trial.held else "[yellow]no[/]", "; ".join(trial.faults) or "—",
                  Path(trial.run).name)
    console.print(t)
    console.print(result.advice, highlight=False)
    return 0 if result.best else 1


def cmd_batch(args) -> int:
    from labkit.model import grid as grid_mod
    from labkit.runs import batch as batch_mod
    from labkit.runs import runner

    g = grid_mod.load(args.grid)
    if args.dry_run:
        if args.json:
            _print_json("batch", {"dry_run": True, **_points_document(g)})
        else:
            _print_points(g)
        return 0
    _before_building()
    _note_user_code(g.base)
    ended = {"complete": "green", "failed": "red", "interrupted": "yellow",
             "cancelled": "yellow"}
    with _progress("", to_stderr=args.json) as progress:
        overall = progress.add_task(f"{g.name}: runs ({args.executor})", total=g.size)
        current = progress.add_task("", total=None, visible=False)

        def on_point(point, entry: BatchPoint) -> None:
            status = entry.status
            if status in ended:
                progress.update(overall, advance=1)
                progress.update(current, visible=False)
                where = entry.error if status != "complete" else entry.run
                progress.console.print(f"{point.name} [{ended[status]}]{status}[/] "
                                       f"{escape(point.label)} [dim]{escape(str(where))}[/]",
                                       highlight=False)
            elif status == "running" and args.executor == "slurm":
                progress.console.print(f"{point.name} running on {entry.host} (job "
                                       f"{entry.job_id})", highlight=False)

        def on_progress(point, p: runner.Progress) -> None:
            what = {"building": "building fabric", "running": "ops"}.get(p.stage, p.stage)
            progress.update(current, visible=True, total=p.total, completed=p.done,
                            description=f"{point.name} {p.policy} {what}")

        try:
            done = batch_mod.run_batch(g, args.executor, out=args.out, on_point=on_point,
                                       on_progress=on_progress, argv=sys.argv)
        except (FileExistsError, RuntimeError) as exc:
            return _failed(exc)
    if args.json:
        _print_json("batch", {"dry_run": False, "batch_dir": str(done.path),
                              "complete": done.complete, "manifest": done.manifest.to_json()})
        return 0 if done.complete else 1
    _print_batch(done)
    console.print(f"batch recorded in [bold]{done.path}[/] (labkit.load_runs reads it)")
    return 0 if done.complete else 1


def _points_document(g) -> dict:
    """What a grid expands into, as data: its name, scenario, keys and points."""
    return {"grid": g.name, "scenario": g.scenario_path, "runs": g.size,
            "axes": [a.key for a in g.axes],
            "points": [{"point": p.index, "name": p.name, "parameters": p.parameters,
                        "policies": list(p.policies), "seed": p.seed} for p in g.points]}


def _print_points(g) -> None:
    t = Table(title=escape(f"{g.name}: {g.size} runs of {g.scenario_path}"),
              title_justify="left")
    for col in ("point", *[a.key for a in g.axes], "policies", "seed"):
        t.add_column(escape(col), no_wrap=True)  # key paths hold [...]: not markup
    for p in g.points:
        t.add_row(p.name, *[escape(str(v)) for v in p.parameters.values()],
                  ", ".join(p.policies), str(p.seed))
    console.print(t)


def _print_batch(done) -> None:
    from labkit.runs.rundir import RunDataError

    try:
        frame = done.frame()
    except RunDataError as exc:  # a run damaged since: the batch's record still stands
        console.print(f"[yellow]cannot tabulate the batch:[/] {escape(str(exc))}; its record "
                      f"is in {done.path}", highlight=False)
        return
    params = [c for c in frame.columns if c not in ("run_id", "scenario", "batch", "point",
                                                    "seed", "path")
              and c not in _summary_columns()]
    t = Table(title=f"batch {done.manifest.run_id}", caption="times in ms; rates in "
              "emulated Mbit/s", caption_justify="left")
    for col in ("point", *params, "seed", "policy", "p99", "slowdown p99", "busbw",
                "storage", "CPU-bound"):
        t.add_column(escape(col), justify="left" if col in ("point", "policy") else "right",
                     no_wrap=True)
    for r in frame.iter_rows(named=True):
        t.add_row(f"p{r['point']:03d}", *[escape(str(r[c])) for c in params], str(r["seed"]),
                  r["policy"], _fmt(r["p99_ms"], ".0f"), _fmt(r["slowdown_p99"]),
                  _fmt(r["busbw_mbps"], ".1f"), _fmt(r["storage_mbps"], ".1f"),
                  "yes" if r["cpu_bound"] else "no")
    console.print(t)
    for p in done.points:
        if p.status != "complete":
            console.print(f"[yellow]{p.name} {p.status}:[/] {escape(str(p.error))}",
                          highlight=False)


def _summary_columns() -> set[str]:
    from labkit.analysis import metrics

    return set(metrics.SUMMARY_COLUMNS)


def _named_controllers(given: list[str]) -> dict[str, str]:
    named = {}
    for item in given:
        name, eq, spec = item.partition("=")
        if not eq or ":" not in spec:
            raise scenario_mod.ScenarioError("command line", "--controller",
                                             f"must be NAME=FILE.py:CLASS, got {item!r}")
        named[name] = spec
    return named


def cmd_shell(args) -> int:
    from labkit.kernel import interrupts
    from labkit.runs import runner

    # Ctrl-C stays Mininet's (it stops the command running in a node); SIGTERM and SIGHUP
    # (the terminal closed) end the shell, which Mininet's command line would take for a
    # Ctrl-C and ignore
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    _note_leftovers()
    _note_user_code(scenario_mod.load(args.scenario), args.controller, kinds=False)
    # a plain line, not a rich spinner: rich replaces stdout while one spins, and Mininet,
    # imported meanwhile, would keep writing to the replacement
    err.print(f"building {args.scenario} under {args.policy}, no traffic (a few seconds) ...")

    def interact(pf) -> None:
        roles = pf.topo.roles
        hosts = " ".join(n for n, role in roles.items() if role not in ("router", "nvswitch"))
        routers = " ".join(n for n, role in roles.items() if role in ("router", "nvswitch"))
        err.print(f"hosts: {hosts}\nrouters (and NVLink switches): {routers}\n"
                  "try: g1 ping -c 3 g5 · leaf1 tc -s qdisc · exit (or Ctrl-D) to tear down")
        pf.fabric.interact()

    try:
        with interrupts.reaching_the_main_thread((signal.SIGTERM, signal.SIGHUP)):
            runner.shell(args.scenario, args.policy, _named_controllers(args.controller),
                         interact)
    except (FileExistsError, RuntimeError) as exc:
        return _failed(exc)
    err.print("fabric torn down")
    return 0


def cmd_sweep(args) -> int:
    from labkit.analysis import nccltests
    from labkit.runs import runner

    if problem := _nccl_refusal(args):
        return _refused(ValueError(problem))
    if not args.check:
        err.print("note: -c 0 changes nothing: labkit checks every op's data (#wrong)")
    sc, rates = runner.resolve_rates(_scenario(args), str(args.scenario))
    size_list = _sizes(args)
    if size_list is None:
        return 2
    runner.check_sweep(sc, args.op, args.algo, size_list, args.iters)
    if problem := runner.not_ready():
        return _failed(runner.NotReady(problem))
    _before_building()
    scale = sc.scale_factor if args.units == "real" else None
    lines = sys.stderr if args.json else sys.stdout  # stdout carries the JSON document
    # nccl-tests' format is plain text, one record per line: printed as is, never wrapped
    print(f"# labkit sweep: {args.op} ({args.algo}) over {len(sc.ranks)} ranks of "
          f"{sc.name}, {args.iters} timed ops per size; " +
          (f"time and rates of the fabric the links stand for (scale factor "
           f"{sc.scale_factor:g}), emulated Mbit/s after #wrong" if scale
           else "rates in Mbit/s of the emulated links"),
          *([f"# {_rates_line(rates)}"] if rates else []), "#", *nccltests.header(scale),
          sep="\n", flush=True, file=lines)
    def show(row) -> None:
        print(row.line(scale), flush=True, file=lines)
        if args.algo == runner.AUTO:
            print(f"#   auto: {row.algo}", flush=True, file=lines)

    try:
        done = runner.sweep(sc, args.op, args.algo, size_list, args.iters, out=args.out,
                            on_row=show, argv=sys.argv)
    except (FileExistsError, RuntimeError) as exc:
        return _failed(exc)
    print(*nccltests.footer(done.rows, scale), sep="\n", flush=True, file=lines)
    (err if args.json else console).print(f"sweep recorded in {done.path}")
    if args.json:
        _report_sweep(argparse.Namespace(run_dir=done.path, json=True))
    return 0 if not sum(r.wrong for r in done.rows) else 1


_stopping: list[int] = []  # the signals that stopped the run


def _raise_interrupt(signum, _frame):
    """First SIGINT, SIGTERM or SIGHUP: stop the run (teardown runs in ``finally``, with
    signals held, :mod:`labkit.kernel.interrupts`). Later ones only say so."""
    if _stopping:
        err.print("[yellow]still tearing down; one moment[/]")
        return
    _stopping.append(signum)
    raise KeyboardInterrupt



def _exit_on_signal(signum, _frame):
    """SIGTERM or SIGHUP in `labkit shell`: leave (teardown runs on the way out), once."""
    signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _progress(unit: str = "ops", to_stderr: bool = False) -> Progress:
    """Progress bars, on stderr when stdout carries a JSON document."""
    return Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn(unit), TimeElapsedColumn(), console=err if to_stderr else console,
                    transient=False)


def _fmt(value, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def _print_queues(summary: Summary) -> None:
    """The bottleneck ports' queues in packets and their CE marks (``transport``)."""
    queues = {k: p.queues for k, p in summary.policies.items() if p.queues}
    if not queues:
        return
    tcp = next((p.tcp.control for p in summary.policies.values() if p.tcp), "default")
    k = next(iter(queues.values())).k_packets
    q = Table(title=f"transport: TCP {tcp}, "
                    f"{'marking past K = ' + str(k) + ' packets' if k else 'no marking'}: "
                    "the bottleneck ports' queues in full frames", title_justify="left")
    for col in ("policy", "port", "queue p50", "p99", "CE marked", "ECN-capable"):
        q.add_column(col, justify="left" if col in ("policy", "port") else "right",
                     no_wrap=True)
    for policy, ports in queues.items():
        for label, port in ports.ports.items():
            q.add_row(policy, label.rpartition("/")[2], _fmt(port.queue_p50_packets, ".1f"),
                      _fmt(port.queue_p99_packets, ".1f"), _fmt(port.ce, "d"),
                      _fmt(port.ect, "d"))
    console.print(q)


FLOWS_SHOWN = 10  # a policy's fastest lk_dctcp flows in the report


def _print_flows(summary: Summary) -> None:
    """Each policy's lk_dctcp flows that carried data, fastest first: the traffic that
    fills a transport run's port (``transport.tcp: dctcp``)."""
    flows = {k: sorted((f for f in p.tcp.flows.items() if f[1].mbps >= 0.05),
                       key=lambda f: -f[1].mbps)
             for k, p in summary.policies.items() if p.tcp and p.tcp.flows}
    if not any(flows.values()):
        return
    f = Table(title="TCP flows (lk_dctcp) that carried data, goodput over the measured "
                    "window, fastest first", title_justify="left")
    for col in ("policy", "host", "flow", "Mbit/s", "windows", "marked", "alpha",
                "cwnd p50"):
        f.add_column(col, justify="left" if col in ("policy", "host", "flow") else "right",
                     no_wrap=True)
    for policy, shown in flows.items():
        for name, flow in shown[:FLOWS_SHOWN]:
            f.add_row(policy, flow.host, name, f"{flow.mbps:.1f}", str(flow.windows),
                      f"{flow.marked_share:.0%}", f"{flow.alpha_mean:.2f}",
                      f"{flow.cwnd_p50:.0f}")
        if len(shown) > FLOWS_SHOWN:
            f.add_row(policy, "", f"and {len(shown) - FLOWS_SHOWN} more", "", "", "", "", "")
    console.print(f)


def _print_summary(summary: Summary) -> None:
    from labkit.analysis import metrics

    # fidelity first: a figure the emulation did not hold is read with that in mind
    for policy, p in summary.policies.items():
        for note in p.fidelity.notes:
            console.print(f"[yellow]fidelity ({policy}):[/] {note}", highlight=False)
    flows = any(p.tcp and p.tcp.flows for p in summary.policies.values())
    t = Table(title=f"{summary.scenario} · run {summary.run_id}",
              caption=f"times in ms; rates in emulated Mbit/s (1 emulated Mbit/s stands for "
                      f"{summary.scale_factor:g} real Mbit/s); bneck: the bottleneck port"
                      + ("; storage: the scenario's storage entries (its TCP flows: the "
                         "flows table below)" if flows else ""),
              caption_justify="left")
    frame = metrics.summary_frame(summary)
    jobs = frame.height > 0 and frame["busbw_mbps"].is_null().all()
    middle = (("iters", "p50", "p99", "slowdown\np50 / p99", "exposed", "bubbles",
               "MB/iter\nat bneck") if jobs else
              ("ops", "p50", "p99", "slowdown\np50 / p99", "busbw"))
    for col in ("policy", *middle, "storage", "bneck\nutil.", "drops\nvip / low",
                "CPU-\nbound"):
        t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in frame.iter_rows(named=True):
        times = (_fmt(r["p50_ms"], ".0f"), _fmt(r["p99_ms"], ".0f"),
                 f"{_fmt(r['slowdown_p50'])} / {_fmt(r['slowdown_p99'])}")
        cells: tuple[str, ...]
        if jobs:
            cells = (str(r["ops"]), *times, _fmt(r["exposed_comm"], ".0%"),
                     _fmt(r["bubbles"], ".0%"), _fmt(r["bottleneck_mb_per_iter"], ".2f"))
        else:
            cells = (str(r["ops"]), *times, _fmt(r["busbw_mbps"], ".1f"))
        t.add_row(r["policy"], *cells, _fmt(r["storage_mbps"], ".1f"),
                  _fmt(r["bottleneck_used"], ".0%"), f"{r['vip_drops']} / {r['low_drops']}",
                  "yes" if r["cpu_bound"] else "no")
    console.print(t)
    _print_program(summary)
    named = {p.bottleneck.port for p in summary.policies.values()}
    d = Table(title="at the bottleneck port, p99 in microseconds", title_justify="left",
              caption="the port differs between rows: this run was recorded before labkit "
                      "named one bottleneck port per run (each policy's busiest)"
              if len(named) > 1 else None, caption_justify="left")
    for col in ("policy", "port", "vip sojourn", "low sojourn", "vip one-way latency",
                "max backlog KiB"):
        d.add_column(col, justify="left" if col in ("policy", "port") else "right", no_wrap=True)
    for policy, p in summary.policies.items():
        lanes = p.bottleneck.lanes
        d.add_row(policy, p.bottleneck.port, _fmt(lanes.vip.sojourn_p99_us, ".0f"),
                  _fmt(lanes.low.sojourn_p99_us, ".0f"), _fmt(lanes.vip.latency_p99_us, ".0f"),
                  _fmt(max(v.max_backlog_bytes for v in lanes.values()) / 1024, ".0f"))
    console.print(d)
    controlled = {k: (p.controller, p.bottleneck.lanes) for k, p in summary.policies.items()
                  if p.controller}
    if controlled:
        c = Table(title="valves: storage through the hosts' valves, marks and drops (low lane)",
                  title_justify="left")
        for col in ("policy", "decisions", "low Mbit/s", "CE marked", "dropped",
                    "ECN marks at bneck", "prediction error ms"):
            c.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for policy, (ctl, lanes) in controlled.items():
            c.add_row(policy, str(ctl.decisions), _fmt(ctl.mean_rate_mbps.low, ".1f"),
                      str(ctl.ce_marked.low), str(ctl.dropped.low),
                      str(sum(v.ecn_marks for v in lanes.values())),
                      _fmt(ctl.prediction_error_ms, ".1f"))
        console.print(c)
    _print_queues(summary)
    _print_flows(summary)
    paused = {k: (p.lossless, p.transport) for k, p in summary.policies.items() if p.lossless}
    if paused:
        lossless_lanes = ", ".join(next(iter(paused.values()))[0].lanes)
        x = Table(title=f"lossless ({lossless_lanes}; one queue per port under fifo): pauses, "
                        "and how fast they acted, in microseconds", title_justify="left")
        for col in ("policy", "pauses", "paused ms", "reaction p50", "p99", "max",
                    "one frame", "go-back-N resends"):
            x.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for policy, (ll, transport) in paused.items():
            reaction = ll.reaction_us
            x.add_row(policy, str(ll.pauses),
                      _fmt(sum(v.ms for v in ll.paused_ms.values()), ".0f"),
                      _fmt(reaction.p50, ".0f"), _fmt(reaction.p99, ".0f"),
                      _fmt(reaction.max, ".0f"), _fmt(ll.packet_us, ".0f"),
                      str(transport.retransmits) if transport else "—")
        console.print(x)


def _print_program(summary: Summary) -> None:
    """A user's program: where its times came from, its collectives per policy, its CPU."""
    from labkit.analysis import metrics

    programs = {k: p.workload for k, p in summary.policies.items()
                if isinstance(p.workload, Program)}
    if not programs:
        return
    first = next(iter(programs.values()))
    source = {"lines": "as it reported them (labkit's line protocol)",
              "hook": "timed by labkit from outside its code (it reported none)",
              "traffic": "from its traffic as the kernel saw it (it reported none)"}
    said = " / ".join(source.get(s, s) for s in dict.fromkeys(p.source for p in programs.values()))
    t = Table(title=f"your program {first.name}: its collectives, {said}"
                    f"; the first {first.warmup} iteration(s) left out",
              title_justify="left", caption="compute and exposed: mean per iteration and "
              "rank; CPU: what its ranks' cgroups used", caption_justify="left")
    for col in ("policy", "op", "count", "p50", "p99", "slowdown\np50 / p99", "busbw",
                "compute", "exposed", "CPU s"):
        t.add_column(col, justify="left" if col in ("policy", "op") else "right", no_wrap=True)
    for r in metrics.program_ops_frame(summary).iter_rows(named=True):
        p = programs[r["policy"]]
        t.add_row(r["policy"], r["op"], str(r["count"]), _fmt(r["p50_ms"], ".0f"),
                  _fmt(r["p99_ms"], ".0f"),
                  f"{_fmt(r['slowdown_p50'])} / {_fmt(r['slowdown_p99'])}",
                  _fmt(r["busbw_mbps"], ".1f"), _fmt(p.compute_ms, ".0f"),
                  _fmt(p.exposed_comm_ms, ".0f"), _fmt(p.cpu_s, ".1f"))
    for policy, p in programs.items():  # no times: say so, in the table
        if p.unmeasured:
            t.add_row(policy, "not measurable from its traffic", "—", "—", "—", "— / —", "—",
                      "—", "—", _fmt(p.cpu_s, ".1f"))
    console.print(t)


def _load(path: Path):
    """The recorded run at ``path``, or None after saying what is wrong with it."""
    from labkit.runs.rundir import RunDataError, load_run

    try:
        return load_run(path)
    except RunDataError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return None


def cmd_report(args) -> int:
    if (args.run_dir / "sweep.json").exists():
        return _report_sweep(args)
    if (args.run_dir / "tune.parquet").exists():
        return _report_tuning(args)
    run = _load(args.run_dir)
    if run is None:
        return 2
    if args.json:
        _print_json("report", {"run_dir": str(args.run_dir), "status": run.manifest.status,
                               "summary": run.summary.to_json()})
    else:
        _print_summary(run.summary)
    return 0


def _report_sweep(args) -> int:
    """A recorded sweep, printed again as nccl-tests prints it (the emulated links' units,
    as it was recorded); ``--json``: its manifest and rows."""
    from labkit.analysis import nccltests
    from labkit.runs.rundir import RunDataError, load_sweep

    try:
        sweep = load_sweep(args.run_dir)
        rows = [nccltests.Row(**r) for r in sweep.rows]
    except RunDataError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    except TypeError as exc:  # a row with keys a Row does not have, or without one
        err.print(f"[red]error:[/] {args.run_dir / 'sweep.json'}: a row does not fit ({exc})")
        return 2
    m = sweep.manifest
    if args.json:
        _print_json("report", {"run_dir": str(args.run_dir),
                               "status": m.status if m else None, "kind": "sweep",
                               "manifest": m.to_json() if m else None, "rows": sweep.rows})
        return 0
    if m:
        print(f"# labkit sweep {m.run_id}: {m.op} ({m.algo}) of {m.scenario.get('name')}, "
              f"{m.iters} timed ops per size; rates in Mbit/s of the emulated links")
    else:
        print("# labkit sweep (recorded before sweeps kept a manifest: its scenario, op and "
              "revision are not known); rates in Mbit/s of the emulated links")
    print("#", *nccltests.header(), *(r.line() for r in rows), *nccltests.footer(rows),
          sep="\n")
    return 0


def _report_tuning(args) -> int:
    """A recorded tuning: every algorithm's rows as nccl-tests prints them, then the model
    fitted from them and what it chooses at each size; ``--json``: its manifest, rows and
    model."""
    from labkit.analysis import nccltests
    from labkit.runs.rundir import RunDataError, load_tuning

    try:
        tuning = load_tuning(args.run_dir)
    except RunDataError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    m, model = tuning.manifest, tuning.model
    if args.json:
        _print_json("report", {"run_dir": str(args.run_dir), "status": m.status,
                               "kind": "tune", "manifest": m.to_json(),
                               "rows": [r for rows in tuning.sweeps.values() for r in rows],
                               "model": json.loads(model.to_json())})
        return 0
    print(f"# labkit tune {m.run_id}: every All-Reduce algorithm over {len(m.ranks)} ranks "
          f"of {m.scenario.get('name')}, {m.iters} timed ops per size; rates in Mbit/s of "
          "the emulated links", "#", *nccltests.header(), sep="\n")
    for algo, rows in tuning.sweeps.items():
        print(*(f"{nccltests.Row(**r).line()}  {algo}" for r in rows), sep="\n")
    t = Table(title=f"model of fabric {model.fabric_key}: time = alpha + size / beta",
              title_justify="left", caption=f"kept for algo: auto in {tuning.model_path}"
              if tuning.model_path else "not kept on this machine (labkit tune keeps it)",
              caption_justify="left")
    for col in ("algorithm", "alpha (µs)", "beta (Mbit/s)", "rms error", "sizes fitted"):
        t.add_column(col, justify="left" if col == "algorithm" else "right", no_wrap=True)
    for algo, fit in model.fits.items():
        t.add_row(algo, f"{fit.alpha_s * 1e6:.0f}", f"{fit.beta_bytes_per_s * 8 / 1e6:.1f}",
                  f"{fit.rms_rel_error:.1%}", str(len(fit.sizes)))
    console.print(t)
    for size in model.sizes:
        console.print(f"auto at {size} B: {model.choose(size).reason}", highlight=False)
    return 0


def cmd_figures(args) -> int:
    from labkit.runs.rundir import RunDataError
    from labkit.ui import figures

    try:
        run = figures.load(args.run_dir)
    except RunDataError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    out = args.out = args.out or figures.default_out(run)  # args.out: _hand_back's too
    try:
        figures.writable_folder(out)  # before anything is built
    except OSError as exc:
        return _refused(exc)
    names = [name for name, _ in figures.figure_set(run)]
    images = shutil.which("chromium") is not None
    if not images:
        err.print("[yellow]note:[/] SVG and PNG need Chromium (apt-get install chromium, or "
                  "make setup); writing HTML only")
    with _progress("steps", to_stderr=args.json) as progress:
        task = progress.add_task("building figures", total=len(names) + 2)
        try:
            written = figures.write(run, out,
                                    lambda step: progress.update(task, advance=1,
                                                                 description=step), images)
        except OSError as exc:  # a file that is there already, or the disk's
            return _refused(exc)
    if args.json:
        _print_json("figures", {"run_dir": str(args.run_dir), "out": str(out),
                                "figures": names, "images": images,
                                "files": [str(f) for f in written]})
        return 0
    console.print(f"{len(written)} files in {out}: " + ", ".join(names))
    return 0


def cmd_samples(args) -> int:
    """Record the samples again, one labkit process each, with progress and an estimate."""
    from labkit.runs import samples as samples_mod

    try:
        chosen = samples_mod.select(samples_mod.load(), args.only)
        estimates = {s.path: samples_mod.estimate_s(s) for s in chosen}
        if args.quotes:
            return _requote()
        if args.list:
            table = Table("sample", "labkit command", "figures", "estimate")
            for s in chosen:
                table.add_row(s.path, escape(shlex.join(s.command)), ", ".join(s.figures),
                              _minutes(estimates[s.path]))
            console.print(table)
            console.print(f"{len(chosen)} samples, about {_minutes(sum(estimates.values()))}")
            return 0
        rev = samples_mod.check_revision(args.allow_dirty)
    except samples_mod.SamplesError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    console.print(f"recording {len(chosen)} samples at labkit {rev[:12]}, about "
                  f"{_minutes(sum(estimates.values()))} on the machine that last did")
    with Progress(TextColumn("{task.description:<40}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("left ~"), TimeRemainingColumn(), console=console) as progress:
        task = progress.add_task("samples", total=sum(estimates.values()))
        for s in chosen:
            progress.update(task, description=s.path)
            try:
                done = samples_mod.record(s)
            except RuntimeError as exc:
                progress.stop()
                err.print(f"[red]error:[/] {escape(str(exc))}")
                return 1
            progress.advance(task, estimates[s.path])
            drawn = "".join(f"; {f}" for f in done.figures)
            progress.console.print(f"{s.path}: recorded in {_minutes(done.seconds)} "
                                   f"(estimated {_minutes(estimates[s.path])}){drawn}")
    return _requote()


def _requote() -> int:
    """Write the docs' quoted numbers from the samples; print what moved (and markers that
    name no number: exit 1)."""
    from labkit.runs.quotes import requote_documents

    changed = requote_documents()
    moved = [q for q in changed if q.value is not None]
    for q in moved:
        console.print(f"{q.where}:{q.line}: {q.quoted}{escape(q.unit)} → {q.value}"
                      f"{escape(q.unit)} ({q.sample} {q.key})")
    console.print(f"the docs' quoted numbers: {len(moved)} written again from the samples"
                  if moved else "the docs' quoted numbers are the samples' own")
    for q in changed:
        if q.value is None:
            err.print(f"[red]error:[/] {escape(q.describe())}")
    return 1 if len(moved) < len(changed) else 0


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def cmd_lab(args) -> int:
    """Install the labkit kernel, then become JupyterLab on the notebooks."""
    from labkit.ui import lab

    where = lab.install_kernel(user=args.user)
    console.print(f"kernel `{lab.KERNEL}` installed in {where}")
    if args.kernel_only:
        return 0
    try:
        command = lab.lab_command(port=args.port, browser=not args.no_browser, ip=args.ip)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    for note in command.notes:
        console.print(escape(note))
    sys.stdout.flush()
    os.execv(command.argv[0], command.argv)
    return 0  # not reached: JupyterLab runs in this process


def cmd_labs(args) -> int:
    """Release the labs, or grade submissions of them."""
    from labkit.ui.labs import handout

    try:
        if args.labs_command == "release":
            written = handout.release(args.out)
            console.print(f"{len(written)} files in {args.out}: "
                          + ", ".join(p.name for p in written), highlight=False)
            return 0
        out = args.out = args.out or handout.GRADES_DIR / time.strftime("%Y%m%d-%H%M%S")
        with _progress("notebooks") as progress:
            task = progress.add_task("grading", total=None)

            def show(done: int, total: int, what: str) -> None:
                progress.update(task, completed=done, total=total)
                progress.console.print(f"ran {escape(what)}", highlight=False)

            rows = handout.grade(args.submissions, out, live=args.live, on_progress=show)
    except (FileExistsError, FileNotFoundError) as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    t = Table(title=f"grades in {out}")
    for col in ("student", "lab", "passed", "not yet", "ungraded"):
        t.add_column(col)
    for student, lab in dict.fromkeys((r.student, r.lab) for r in rows):
        mine = [r.status for r in rows if (r.student, r.lab) == (student, lab)]
        t.add_row(student, lab, str(mine.count("pass")),
                  str(len(mine) - mine.count("pass") - mine.count(handout.UNGRADED)),
                  str(mine.count(handout.UNGRADED)))
    console.print(t)
    return 0


def cmd_serve(args) -> int:
    """Serve runs until Ctrl-C."""
    from labkit.ui import serve

    try:
        service = serve.Service(args.socket or serve.SOCKET, args.group,
                                log=lambda line: console.print(escape(line), highlight=False))
        service.start()
    except serve.Refused as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    console.print(f"labkit serve: runs for group {args.group} at {service.path}, one at a "
                  "time (Ctrl-C stops)", highlight=False)
    _before_building()
    try:
        service.serve_forever()
    finally:
        service.close()
    return 0


def cmd_runs(args) -> int:
    from labkit.runs.rundir import list_runs

    runs = list_runs()
    if args.json:
        _print_json("runs", {"runs": runs})
        return 0
    if not runs:
        console.print("no runs recorded yet: `labkit run topologies/bottleneck.yaml`")
        return 0
    t = Table()
    for col in ("run id", "status", "size", "modified", "path"):
        t.add_column(col)
    for r in runs:
        style = "" if r["status"] == "complete" else "yellow"
        t.add_row(r["run_id"], r["status"], f"{r['bytes'] / 1e6:.1f} MB", r["modified"],
                  r["path"], style=style)
    console.print(t)
    return 0


def cmd_clean(args) -> int:
    from labkit.kernel import registry

    if os.geteuid() != 0:
        from labkit.runs.runner import WITHOUT_ROOT

        err.print("[red]error:[/] labkit clean needs root: it removes what a killed run left "
                  f"in the kernel. {WITHOUT_ROOT}")
        return 1
    try:
        with registry.RunLock(registry.CLEANING):
            return _clean(registry.leftover_registries(), registry.leftover_work_dirs(),
                          args.dry_run)
    except registry.RunLockedError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return 1


def _clean(leftovers: list, work_dirs: list[Path], dry_run: bool) -> int:
    from labkit.kernel import registry

    if not leftovers and not work_dirs:
        console.print("nothing to clean: no labkit run left objects behind")
        return 0
    failed = 0
    for reg in leftovers:
        if dry_run:
            kinds = Counter(e["kind"] for e in reg.entries)
            console.print(f"run {reg.run_id}: recorded " +
                          ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
            continue
        struct_ops = [e for e in reg.entries if e["kind"] == "struct_ops"]
        try:
            removed = reg.teardown()
        except registry.TeardownIncomplete as exc:
            err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
            failed = 1
            continue
        console.print(f"run {reg.run_id}: " + ("; ".join(removed) or "nothing was left"))
        for note in registry.wait_freed(struct_ops):
            console.print(f"run {reg.run_id}: {note}", highlight=False)
    for path in work_dirs:  # scratch files of a killed run (none is running: we hold the lock)
        try:
            if not dry_run:
                shutil.rmtree(path)
        except OSError as exc:
            err.print(f"[red]error:[/] cannot remove {escape(str(path))}: {exc.strerror}",
                      highlight=False)
            failed = 1
            continue
        console.print(f"run {path.name}: {'would remove' if dry_run else 'removed'} its "
                      f"scratch directory {path}", highlight=False)
    return failed


if __name__ == "__main__":
    sys.exit(main())
