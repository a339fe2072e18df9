"""``labkit batch``: a grid of scenario variants x policies x seeds run here or on Slurm,
with a bar per run; ``--dry-run`` lists the points it expands into."""

from __future__ import annotations

import sys

from rich.markup import escape

from labkit.model.manifest import BatchPoint
from labkit.ui.cli import signals
from labkit.ui.cli.output import console, failed, print_json, progress_bars
from labkit.ui.cli.reports import print_batch, print_points


def cmd_batch(args) -> int:
    from labkit.model import grid as grid_mod
    from labkit.runs import batch as batch_mod
    from labkit.runs import runner

    g = grid_mod.load(args.grid)
    if args.dry_run:
        if args.json:
            print_json("batch", {"dry_run": True, **_points_document(g)})
        else:
            print_points(g)
        return 0
    signals.before_building()
    signals.note_user_code(g.base)
    ended = {"complete": "green", "failed": "red", "interrupted": "yellow",
             "cancelled": "yellow"}
    with progress_bars("", to_stderr=args.json) as progress:
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
            return failed(exc)
    if args.json:
        print_json("batch", {"dry_run": False, "batch_dir": str(done.path),
                             "complete": done.complete, "manifest": done.manifest.to_json()})
        return 0 if done.complete else 1
    print_batch(done)
    console.print(f"batch recorded in [bold]{done.path}[/] (labkit.load_runs reads it)")
    return 0 if done.complete else 1


def _points_document(g) -> dict:
    """What a grid expands into, as data: its name, scenario, keys and points."""
    return {"grid": g.name, "scenario": g.scenario_path, "runs": g.size,
            "axes": [a.key for a in g.axes],
            "points": [{"point": p.index, "name": p.name, "parameters": p.parameters,
                        "policies": list(p.policies), "seed": p.seed} for p in g.points]}
