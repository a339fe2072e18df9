"""The figure set of a recorded run, written for a blog post: HTML, SVG and PNG.

Which figures a run gets depends on what it recorded: every run has the bottleneck
queue timeline, the completion-time CDFs and the per-lane sojourns; a run with ``fifo``
adds the funnel into its bottleneck port, and with ``fifo`` and a later stage (``priority``
or a controller) the three stages side by side; a run with an adaptive policy adds each
one's valve timeline; a training job adds where its iterations' time went and each
rank's timeline, a user's program (``kind: program``) where its iterations' time went;
a run whose jobs shared the fabric each job's bursts at the bottleneck (when the kernel
counted them apart) and each job's iteration times, in place of the completion-time CDFs
and a single workload's breakdown.
A sweep (``labkit sweep``) gets its busbw and time against message size, as nccl-tests'
users plot them; a tuning (``labkit tune``) its cost model against the measured times,
and every algorithm's busbw.
SVG and PNG are rendered by kaleido with the system's Chromium, all in one browser
session. plotly gives every rendering and every trace
a random id; traces get ids from their order and the rendering's id is replaced by
one derived from the figure's name, so the same run gives byte-identical SVG files.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Collection, Iterator
from functools import partial
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from labkit.analysis import frames
from labkit.model import paths
from labkit.model.summary import Job, Program
from labkit.runs import rundir
from labkit.runs.rundir import Run, Sweep, Tuning
from labkit.ui import plots

WIDTH, HEIGHT = plots.WIDTH, plots.HEIGHT
UID = re.compile(rb'defs-([0-9a-f]{6})"')


Recorded = Run | Sweep | Tuning  # what `labkit figures` draws


def default_out(rec: Recorded) -> Path:
    """Where `labkit figures` writes without ``--out``: data/figures/<run id> (a sweep
    recorded before sweeps kept a manifest: its folder's name)."""
    return paths.current().figures / (rec.manifest.run_id if rec.manifest else rec.path.name)


def load(path: Path) -> Recorded:
    """The run, sweep or tuning recorded in ``path``; RunDataError says what is wrong."""
    if (path / "sweep.json").exists():
        return rundir.load_sweep(path)
    if (path / "tune.parquet").exists():
        return rundir.load_tuning(path)
    return rundir.load_run(path)


def figure_set(rec: Recorded) -> Iterator[tuple[str, Callable[[], go.Figure]]]:
    """(file stem, builder) for every figure this run, sweep or tuning can draw: a sweep's
    busbw and time against message size; a tuning's model against its measurements and
    each algorithm's busbw."""
    if isinstance(rec, Sweep):
        rows = {rec.manifest.algo if rec.manifest else rec.path.name: rec.rows}
        yield "busbw", lambda: plots.sweep_busbw(rows, plots.sweep_subtitle(rec))
        yield "time", lambda: plots.sweep_time(rows, plots.sweep_subtitle(rec))
    elif isinstance(rec, Tuning):
        sub = plots.tuning_subtitle(rec)
        yield "model", lambda: plots.tuning_model(rec.model, rec.sweeps, sub)
        yield "busbw", lambda: plots.sweep_busbw(rec.sweeps, sub)
    else:
        yield from _run_figures(rec)


def _run_figures(run: Run) -> Iterator[tuple[str, Callable[[], go.Figure]]]:
    several = any(p.jobs for p in run.summary.policies.values())  # jobs shared the fabric
    yield "queue-timeline", lambda: plots.queue_timeline(run)
    if any(p.reroutes for p in run.summary.policies.values()):  # a routed fabric's
        yield "reroutes", lambda: plots.reroutes(run)
    if not several:  # each job's: job-iteration-cdf below
        yield "completion-cdf", lambda: plots.op_time_cdf(run)
    yield "lane-sojourn", lambda: plots.lane_sojourn(run)
    stages = set(frames.stage_frame(run.summary)["stage"])
    if 1 in stages:
        yield "funnel", lambda: plots.bottleneck_funnel(run)
    if 1 in stages and stages & {2, 3}:
        yield "three-stages", lambda: plots.three_stages(run)
    for policy, p in run.summary.policies.items():
        if p.controller:
            yield f"valves-{policy.replace('+', '-')}", partial(plots.valve_timeline, run, policy)
    workloads = [] if several else [p.workload for p in run.summary.policies.values()]
    if any(isinstance(w, Job | Program) for w in workloads):
        yield "parallelism", lambda: plots.parallelism(run)
    if any(isinstance(w, Job) for w in workloads):
        yield "job-timeline", lambda: plots.job_timeline(run, frames.straggled_ops(run))
    if several:
        if not run["job_lanes"].is_empty():
            yield "job-bursts", lambda: plots.job_bursts(run)
        yield "job-iteration-cdf", lambda: plots.job_iteration_cdfs(run)


def stable_svg(svg: bytes, name: str) -> bytes:
    """``svg`` with plotly's random rendering id replaced by one derived from ``name``."""
    found = UID.search(svg)
    if not found:
        return svg
    return svg.replace(found.group(1), re.sub(rb"[^a-z0-9]", b"", name.encode())[:24])


PLOTLY_JS = "plotly.min.js"  # what plotly writes beside a page (include_plotlyjs="directory")


def write_page(fig: go.Figure, path: Path, name: str) -> None:
    """``fig`` as a standalone HTML page, its traces' ids taken from their order and
    ``name``. plotly.js goes beside the page (one copy a directory), not from a CDN: figures
    open in a lab or on a laptop without internet."""
    for i, trace in enumerate(fig.data):
        trace.uid = f"{name}-{i}"
    fig.write_html(path, include_plotlyjs="directory", full_html=True, div_id=name)


def writable_folder(out: Path) -> None:
    """Make ``out`` a folder this process can write into, or raise FileExistsError (a
    file is there) or PermissionError, whose one line names it and what to do."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file, not a folder: --out names a new or empty "
                              "folder for the figures")
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as exc:
        raise PermissionError(f"cannot write into {out}: {exc.strerror}; choose a folder "
                              "of your own for --out") from None


def write(run: Recorded, out: Path, on_step: Callable[[str], None] | None = None,
          images: bool = True, only: Collection[str] | None = None) -> list[Path]:
    """Write every figure of ``run`` (those named in ``only``, if given) into ``out`` as
    .html, .svg and .png (only .html without ``images``); returns the files. ``on_step``
    hears of each figure built and each format rendered (figures + 2 steps). Existing files
    are left alone: a figure set is written into an empty or new directory."""
    writable_folder(out)
    built: dict[str, go.Figure] = {}
    for name, build in figure_set(run):
        if only is not None and name not in only:
            continue
        taken = [t for t in (out / f"{name}.{ext}" for ext in ("html", "svg", "png"))
                 if t.exists()]
        if taken:
            raise FileExistsError(f"{taken[0]} exists; labkit does not overwrite figures "
                                  "(choose another --out)")
        fig = build()
        write_page(fig, out / f"{name}.html", name)
        built[name] = fig
        if on_step:
            on_step(f"built {name}")
    formats = (("svg", 1), ("png", 2)) if images else ()
    for ext, scale in formats:  # one Chromium session per format
        pio.write_images(list(built.values()), [out / f"{n}.{ext}" for n in built],
                         format=ext, width=WIDTH, height=HEIGHT, scale=scale)
        if on_step:
            on_step(f"rendered {ext.upper()}")
    for name in built if images else ():
        svg = out / f"{name}.svg"
        svg.write_bytes(stable_svg(svg.read_bytes(), name))
    return [out / f"{n}.{ext}" for n in built for ext in ("html", *(e for e, _ in formats))]
