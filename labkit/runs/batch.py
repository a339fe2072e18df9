"""Batches: a grid's points (:mod:`labkit.model.grid`) run as ordinary runs and recorded
together; :func:`load_runs` reads many runs back as one frame.

Executors: ``local`` runs the points one after another on this machine, in this process;
``slurm`` submits each point as its own Slurm job (:mod:`labkit.runs.slurm`). Each point
(:mod:`labkit.runs.points`) is an ordinary run wherever it ran; run ids carry the host
name, so runs from many nodes never collide.

A batch directory (``data/runs/<batch-id>/``, written as ``.<batch-id>.incomplete/`` until
every point has ended, like a run; docs/batches.md):

* ``manifest.json``: kind ``batch``, the grid (file, hash, name), the scenario file, the
  executor, and ``points``: per point its index, parameters, policies, seed, run directory
  (relative), status (pending, submitted, running, complete, failed, interrupted,
  cancelled), run id, host, Slurm job id, error;
* ``grid.yaml``: the grid file as written;
* ``runs/p000/`` ...: each point's run, an ordinary run directory;
* ``runs.parquet``: :func:`load_runs` of the batch when it ended (duckdb reads it as is);
* ``summary.json``: how many points ended how;
* ``slurm/``: submitit's files and each job's stdout and stderr (``slurm`` executor).

A point that fails is recorded with its error and the batch goes on; Ctrl-C (SIGINT,
SIGTERM) stops the batch: the running point tears down as a run does, Slurm jobs not yet
ended are cancelled, and the batch stays ``.incomplete`` with status ``interrupted``.

``job_main``, ``slurm_parameters``, ``slurm_executor`` and ``SLURM_ALIVE`` are
:mod:`labkit.runs.slurm`'s; importing them from here still works until the next release,
with a DeprecationWarning.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from labkit.analysis.frames import JOBS_COLUMNS, SUMMARY_COLUMNS, jobs_frame, summary_frame
from labkit.kernel.registry import RunLock
from labkit.model import grid as grid_mod
from labkit.model import paths
from labkit.model.grid import Grid, Point
from labkit.model.manifest import (
    BatchManifest,
    BatchPoint,
    BatchRef,
    GridRecord,
    RunManifest,
    ScenarioFile,
)
from labkit.model.scenario import ScenarioError
from labkit.model.summary import Summary
from labkit.runs import moved, rundir, runner, slurm
from labkit.runs.points import ENDED, PointJob, PointOutcome, run_point
from labkit.runs.provenance import git_revision
from labkit.runs.rundir import PolarsDataType, RunDataError, RunWriter
from labkit.runs.slurm import GONE_GRACE_S, POLL_S

EXECUTORS = ("local", "slurm")
BASE_COLUMNS: dict[str, PolarsDataType] = {"run_id": pl.Utf8, "scenario": pl.Utf8,
                                        "batch": pl.Utf8, "point": pl.Int64, "seed": pl.Int64}


@dataclass(frozen=True)
class Batch:
    """A recorded batch: its directory and manifest (``points`` lists how each ended)."""

    path: Path
    manifest: BatchManifest

    @property
    def points(self) -> tuple[BatchPoint, ...]:
        return self.manifest.points

    @property
    def complete(self) -> bool:
        return all(p.status == "complete" for p in self.points)

    def frame(self) -> pl.DataFrame:
        return load_runs(self.path)

    def jobs(self) -> pl.DataFrame:
        return load_jobs(self.path)


# --- the batch ------------------------------------------------------------------------------


class _Record:
    """The batch directory, its manifest rewritten at every change of a point."""

    def __init__(self, grid: Grid, executor: str, out: str | Path | None,
                 argv: list[str] | None):
        self.batch_id = rundir.new_run_id(f"batch-{grid.name}")
        self.writer = RunWriter(Path(out) if out is not None
                                else paths.current().runs / self.batch_id)
        self.dir = self.writer.tmp
        (self.dir / "grid.yaml").write_text(grid.text or Path(grid.path).read_text())
        (self.dir / "runs").mkdir()
        self.points = [BatchPoint(point=p.index, name=p.name, parameters=p.parameters,
                                  policies=p.policies, seed=p.seed, run=f"runs/{p.name}")
                       for p in grid.points]
        self.manifest = BatchManifest(
            run_id=self.batch_id,
            grid=GridRecord(file=str(Path(grid.path).resolve()), sha256=grid.sha256,
                            name=grid.name, description=grid.description,
                            axes={a.key: tuple(a.values) for a in grid.axes},
                            policies=grid.policies, seeds=grid.seeds, duration_s=grid.duration),
            scenario=ScenarioFile(file=str(Path(grid.scenario_path).resolve()),
                                  sha256=grid.base.sha256, name=grid.base.name),
            executor=executor, host=rundir.host_label(), start_time=rundir.now_iso(),
            argv=tuple(argv) if argv is not None else None,
            labkit_revision=git_revision(), points=tuple(self.points))
        self.writer.write_manifest(self.manifest)

    def job(self, grid: Grid, p: Point) -> PointJob:
        return PointJob(p.index, p.scenario, p.policies, grid.duration,
                        str((self.dir / "runs" / p.name).resolve()),
                        BatchRef(id=self.batch_id, point=p.index, parameters=p.parameters))

    def update(self, index: int, status: str, *, run_id: str | None = None,
               host: str | None = None, job_id: str | None = None, error: str | None = None,
               log: str | None = None, start_time: str | None = None,
               end_time: str | None = None) -> BatchPoint:
        """Point ``index`` now at ``status``, with what else is said (None: as it was),
        recorded."""
        p = self.points[index]
        point = replace(p, status=status, run_id=_said(run_id, p.run_id),
                        host=_said(host, p.host), job_id=_said(job_id, p.job_id),
                        error=_said(error, p.error), log=_said(log, p.log),
                        start_time=_said(start_time, p.start_time),
                        end_time=_said(end_time, p.end_time))
        if point.status in ENDED and point.status != "complete":
            # what the run kept, if it started: its directory under the temporary name
            kept = rundir.incomplete_path(self.dir / "runs" / point.name)
            point = replace(point, run=f"runs/{kept.name}" if kept.exists() else None)
        self.points[index] = point
        self.manifest = replace(self.manifest, points=tuple(self.points))
        self.writer.write_manifest(self.manifest)
        return point

    def ended(self, index: int, outcome: PointOutcome) -> BatchPoint:
        """Point ``index`` as its run's ``outcome`` says it went, recorded."""
        o = outcome
        return self.update(index, o.status, run_id=o.run_id, host=o.host, error=o.error,
                           start_time=o.start_time, end_time=o.end_time)

    def stopped(self, status: str, error: str | None = None) -> None:
        """The batch did not finish: ``interrupted``, or ``incomplete`` with the error."""
        self.manifest = replace(self.manifest, status=status, error=error,
                                end_time=rundir.now_iso())
        self.writer.write_manifest(self.manifest)

    def finish(self) -> Batch:
        counts = {s: sum(p.status == s for p in self.points) for s in ENDED}
        summary = {"kind": "batch", "points": len(self.points), **counts}
        try:
            frame = load_runs(self.dir)
        except RunDataError as exc:  # a run that says it is complete cannot be read
            summary["runs_parquet"] = f"not written: {exc}"
        else:
            frame.with_columns(pl.col("path").str.replace(
                str(self.dir), str(self.writer.target), literal=True)
            ).write_parquet(self.dir / "runs.parquet")
        path = self.writer.finish({}, summary)
        return Batch(path, rundir.read_manifest(path, BatchManifest))


def _said(new: str | None, old: str | None) -> str | None:
    return old if new is None else new


def run_batch(grid: str | Path | Grid, executor: str = "local", *,
              out: str | Path | None = None,
              on_point: Callable[[Point, BatchPoint], None] | None = None,
              on_progress: Callable[[Point, runner.Progress], None] | None = None,
              argv: list[str] | None = None, run_fn: Callable | None = None,
              cluster: str = "slurm", poll_s: float = POLL_S,
              gone_grace_s: float = GONE_GRACE_S) -> Batch:
    """Run every point of ``grid`` (a grid file or a loaded :class:`~labkit.model.grid.Grid`)
    with ``executor`` and record the batch in ``out`` (default data/runs/<batch-id>).

    ``on_point(point, entry)`` hears every change of a point's record (its
    :class:`~labkit.model.manifest.BatchPoint` in the manifest);
    ``on_progress(point, progress)`` each run's progress (local executor). ``run_fn``
    replaces what runs a point (:func:`~labkit.runs.points.run_point` locally,
    :func:`~labkit.runs.slurm.job_main` in a Slurm job) and ``cluster`` submitit's
    executor ("slurm"; "local" runs the jobs as local processes): both only for tests.
    Raises :class:`~labkit.model.scenario.ScenarioError` (a bad grid or executor) and
    :class:`~labkit.runs.runner.NotReady` before creating anything."""
    g = grid if isinstance(grid, Grid) else grid_mod.load(grid)
    if executor not in EXECUTORS:
        raise ScenarioError(g.path, "executor", f"unknown executor {executor!r} "
                                                f"(known: {', '.join(EXECUTORS)})")
    if executor == "local" and run_fn is None and (problem := runner.not_ready()):
        raise runner.NotReady(problem)
    if executor == "slurm":
        slurm.check(cluster)
    # a local batch of real runs holds the machine from its first point to its last (each
    # point's run takes the lock again inside), from before anything is recorded
    held = executor == "local" and run_fn is None
    with RunLock(f"batch-{g.name}") if held else nullcontext():
        record = _Record(g, executor, out, list(argv) if argv else None)
        tell = on_point or (lambda *_: None)
        try:
            if executor == "local":
                _run_local(record, g, tell, on_progress, run_fn or run_point)
            else:
                slurm.run(record, g, tell, run_fn or slurm.job_main, cluster, poll_s,
                          gone_grace_s)
        except KeyboardInterrupt:
            record.stopped("interrupted")
            raise
        except Exception as exc:  # the executor itself failed (not a point): said, raised
            record.stopped("incomplete", f"{type(exc).__name__}: {exc}")
            raise
        return record.finish()


def _run_local(record: _Record, g: Grid, tell, on_progress, run_fn) -> None:
    for p in g.points:
        tell(p, record.update(p.index, "running", host=rundir.host_label(),
                              start_time=rundir.now_iso()))
        progress = (lambda pr, p=p: on_progress(p, pr)) if on_progress else None
        try:
            outcome = run_fn(record.job(g, p), on_progress=progress)
        except KeyboardInterrupt:
            tell(p, record.update(p.index, "interrupted", end_time=rundir.now_iso(),
                                  error="interrupted (Ctrl-C or SIGTERM)"))
            raise
        tell(p, record.ended(p.index, outcome))


# --- many runs as one frame -------------------------------------------------------------------


def load_runs(paths: str | Path | Iterable[str | Path]) -> pl.DataFrame:
    """One frame over many runs: a row per run and policy (the run's summary.json as
    :func:`labkit.analysis.frames.summary_frame` gives it), led by ``run_id``, ``scenario``,
    ``batch`` and ``point`` (null for a run outside a batch), ``seed``, then each grid
    parameter (a column per key path, null where a run has none), and last the run's
    ``path``.

    ``paths``: run directories, batch directories (their complete points) and directories
    of runs (``data/runs``: every run and batch in it; sweeps and calibrations are left
    out), alone or in a list. Reads only manifests and summaries; RunDataError names a
    run that cannot be read."""
    return _load(paths, summary_frame, SUMMARY_COLUMNS)


def load_jobs(paths: str | Path | Iterable[str | Path]) -> pl.DataFrame:
    """As :func:`load_runs`, a row per run, policy and job of runs whose jobs shared the
    fabric (:func:`labkit.analysis.frames.jobs_frame`; none for a run of one job): an
    ECMP study's per-seed bandwidth of each job, say."""
    return _load(paths, jobs_frame, JOBS_COLUMNS)


def _load(paths: str | Path | Iterable[str | Path],
          per_run: Callable[[Summary], pl.DataFrame],
          columns_of: Mapping[str, PolarsDataType]) -> pl.DataFrame:
    """The runs in ``paths``, each one's ``per_run`` frame of its summary led by the
    run's and its grid point's columns (see :func:`load_runs`)."""
    runs = []
    for d in _run_dirs([paths] if isinstance(paths, str | Path) else list(paths)):
        docs = rundir.read_documents(d)
        manifest = rundir.manifest_of(d, docs["manifest.json"], RunManifest)
        summary = rundir.read_summary(d, docs["summary.json"])
        runs.append((d, manifest, summary))
    keys: dict[str, list] = {}
    for _, manifest, _ in runs:
        for k, v in (manifest.batch.parameters if manifest.batch else {}).items():
            keys.setdefault(k, []).append(v)
    reserved = {*BASE_COLUMNS, *columns_of, "path"}
    columns = {k: (f"grid:{k}" if k in reserved else k, _dtype(v)) for k, v in keys.items()}
    schema: dict[str, PolarsDataType] = {
        **BASE_COLUMNS, **{name: t for name, t in columns.values()},
        **columns_of, "path": pl.Utf8}
    frames = []
    for d, manifest, summary in runs:
        b = manifest.batch
        params = b.parameters if b else {}
        lits = [pl.lit(manifest.run_id, pl.Utf8),
                pl.lit(summary.scenario, pl.Utf8), pl.lit(b and b.id, pl.Utf8),
                pl.lit(b and b.point, pl.Int64), pl.lit(manifest.seed, pl.Int64)]
        lits = [x.alias(n) for x, n in zip(lits, BASE_COLUMNS, strict=True)]
        lits += [pl.lit(_cell(params.get(k), t), t).alias(name)
                 for k, (name, t) in columns.items()]
        frames.append(per_run(summary).select(
            *lits, pl.all(), pl.lit(str(d), pl.Utf8).alias("path")))
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames, how="vertical").select(list(schema))


def _run_dirs(paths: list) -> list[Path]:
    out: list[Path] = []
    for given in paths:
        p = Path(given)
        if (p / "manifest.json").is_file():
            out += _expand_recorded(p, explicit=True)
        elif p.is_dir():
            for child in sorted(p.iterdir()):
                if not child.name.startswith(".") and (child / "manifest.json").is_file():
                    out += _expand_recorded(child, explicit=False)
        else:
            raise RunDataError(f"{p}: not a run, a batch or a directory of runs")
    return out


def _expand_recorded(d: Path, explicit: bool) -> list[Path]:
    """A run (itself), a batch (its complete points' runs), anything else: itself when
    named (load_runs then says what it is), nothing when found in a directory."""
    doc = rundir.read_documents(d, ("manifest.json",))["manifest.json"]
    kind = rundir.kind_of(d, doc)
    if kind == "batch":
        return [d / p.run for p in rundir.manifest_of(d, doc, BatchManifest).points
                if p.status == "complete" and p.run]
    return [d] if explicit or kind == "run" else []


def _dtype(values: list) -> PolarsDataType:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pl.Boolean
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pl.Int64
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pl.Float64
    return pl.Utf8


def _cell(value, dtype: PolarsDataType):
    if value is None:
        return None
    if dtype == pl.Float64:
        return float(value)
    if dtype == pl.Utf8 and not isinstance(value, str):
        return json.dumps(value, sort_keys=True)
    return value


__getattr__ = moved.forward(__name__, moved.to_module(
    "labkit.runs.slurm", "job_main", "slurm_parameters", "slurm_executor", "SLURM_ALIVE"))
