"""The commands over what is recorded: ``report`` (a run's summary, a sweep's rows as
nccl-tests prints them, a tuning's rows and model), ``figures`` (a run's figure set as
files) and ``runs`` (the runs recorded on this machine)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from labkit.ui.cli.output import console, err, print_json, progress_bars, refused
from labkit.ui.cli.reports import print_summary


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
        return report_sweep(args)
    if (args.run_dir / "tune.parquet").exists():
        return report_tuning(args)
    run = _load(args.run_dir)
    if run is None:
        return 2
    if args.json:
        print_json("report", {"run_dir": str(args.run_dir), "status": run.manifest.status,
                              "summary": run.summary.to_json()})
    else:
        print_summary(run.summary)
    return 0


def report_sweep(args) -> int:
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
        print_json("report", {"run_dir": str(args.run_dir),
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


def report_tuning(args) -> int:
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
        print_json("report", {"run_dir": str(args.run_dir), "status": m.status,
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
        return refused(exc)
    names = [name for name, _ in figures.figure_set(run)]
    images = shutil.which("chromium") is not None
    if not images:
        err.print("[yellow]note:[/] SVG and PNG need Chromium (apt-get install chromium, or "
                  "make setup); writing HTML only")
    with progress_bars("steps", to_stderr=args.json) as progress:
        task = progress.add_task("building figures", total=len(names) + 2)
        try:
            written = figures.write(run, out,
                                    lambda step: progress.update(task, advance=1,
                                                                 description=step), images)
        except OSError as exc:  # a file that is there already, or the disk's
            return refused(exc)
    if args.json:
        print_json("figures", {"run_dir": str(args.run_dir), "out": str(out),
                               "figures": names, "images": images,
                               "files": [str(f) for f in written]})
        return 0
    console.print(f"{len(written)} files in {out}: " + ", ".join(names))
    return 0


def cmd_runs(args) -> int:
    from labkit.runs.rundir import list_runs

    runs = list_runs()
    if args.json:
        print_json("runs", {"runs": runs})
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
