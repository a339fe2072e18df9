"""The collective sweeps: ``sweep`` (one collective's bandwidth across message sizes, as
nccl-tests prints it) and ``tune`` (every All-Reduce algorithm swept, and the model that
``algo: auto`` chooses by fitted to them)."""

from __future__ import annotations

import argparse
import sys

from labkit.model import scenario as scenario_mod
from labkit.ui.cli import signals
from labkit.ui.cli.output import console, err, failed, refused
from labkit.ui.cli.parser import nccl_refusal
from labkit.ui.cli.recorded import report_sweep, report_tuning
from labkit.ui.cli.reports import rates_line
from labkit.ui.cli.running import scenario_of


def _sizes(args) -> list[int] | None:
    """The message sizes of -b, -e and -f (None, said on stderr, when they do not fit)."""
    from labkit.analysis import nccltests

    try:
        return nccltests.sizes(scenario_mod.parse_size(args.minbytes, "-b"),
                               scenario_mod.parse_size(args.maxbytes, "-e"), args.stepfactor)
    except ValueError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return None


def cmd_sweep(args) -> int:
    from labkit.analysis import nccltests
    from labkit.model.traffic import schedules
    from labkit.runs import resolve, runner

    args.algo = args.algo or schedules.ALGOS[args.op][0]  # the op's first: ring, direct, ...
    if problem := nccl_refusal(args):
        return refused(ValueError(problem))
    if not args.check:
        err.print("note: -c 0 changes nothing: labkit checks every op's data (#wrong)")
    sc, rates = resolve.resolve_rates(scenario_of(args), str(args.scenario))
    size_list = _sizes(args)
    if size_list is None:
        return 2
    resolve.check_sweep(sc, args.op, args.algo, size_list, args.iters)
    if problem := runner.not_ready():
        return failed(runner.NotReady(problem))
    signals.before_building()
    scale = sc.scale_factor if args.units == "real" else None
    lines = sys.stderr if args.json else sys.stdout  # stdout carries the JSON document
    # nccl-tests' format is plain text, one record per line: printed as is, never wrapped
    print(f"# labkit sweep: {args.op} ({args.algo}) over {len(sc.ranks)} ranks of "
          f"{sc.name}, {args.iters} timed ops per size; " +
          (f"time and rates of the fabric the links stand for (scale factor "
           f"{sc.scale_factor:g}), emulated Mbit/s after #wrong" if scale
           else "rates in Mbit/s of the emulated links"),
          *([f"# {rates_line(rates)}"] if rates else []), "#", *nccltests.header(scale),
          sep="\n", flush=True, file=lines)
    def show(row) -> None:
        print(row.line(scale), flush=True, file=lines)
        if args.algo == resolve.AUTO:
            print(f"#   auto: {row.algo}", flush=True, file=lines)

    try:
        done = runner.sweep(sc, args.op, args.algo, size_list, args.iters, out=args.out,
                            on_row=show, argv=sys.argv)
    except (FileExistsError, RuntimeError) as exc:
        return failed(exc)
    print(*nccltests.footer(done.rows, scale), sep="\n", flush=True, file=lines)
    (err if args.json else console).print(f"sweep recorded in {done.path}")
    if args.json:
        report_sweep(argparse.Namespace(run_dir=done.path, json=True))
    return 0 if not sum(r.wrong for r in done.rows) else 1


def cmd_tune(args) -> int:
    from labkit.analysis import nccltests
    from labkit.runs import resolve, runner

    sc, rates = resolve.resolve_rates(scenario_of(args), str(args.scenario))
    size_list = _sizes(args)
    if size_list is None:
        return 2
    signals.before_building()
    lines = sys.stderr if args.json else sys.stdout  # stdout carries the JSON document
    print(f"# labkit tune: every All-Reduce algorithm over {len(sc.ranks)} ranks of {sc.name}, "
          f"{args.iters} timed ops per size", *([f"# {rates_line(rates)}"] if rates else []),
          "#", *nccltests.header(), sep="\n", flush=True, file=lines)
    try:
        done = runner.tune(sc, size_list, args.iters, out=args.out, argv=sys.argv,
                           on_row=lambda algo, row: print(f"{row.line()}  {algo}", flush=True,
                                                          file=lines))
    except (FileExistsError, RuntimeError) as exc:
        return failed(exc)
    said = err if args.json else console
    for size in size_list:
        said.print(f"auto at {size} B: {done.model.choose(size).reason}", highlight=False)
    said.print(f"model kept in {done.model_path}; tuning recorded in {done.path}")
    if args.json:
        return report_tuning(argparse.Namespace(run_dir=done.path, json=True))
    return 0
