"""Batches: a grid's points (:mod:`labkit.model.grid`) run as ordinary runs and recorded
together; :func:`load_runs` reads many runs back as one frame.

Executors: ``local`` runs the points one after another on this machine, in this process;
``slurm`` submits each point as its own Slurm job through submitit, one whole node per job
(``--exclusive``, one node, one task, all its memory: a run measures the machine, so it
shares it with nothing), and the job calls :func:`job_main`, which calls
:func:`labkit.run`. Each point is an ordinary run wherever it ran; run ids carry the host
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
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from labkit.analysis import metrics
from labkit.kernel.registry import RunLock
from labkit.model import grid as grid_mod
from labkit.model.grid import Grid, Point
from labkit.model.manifest import (
    BatchManifest,
    BatchPoint,
    BatchRef,
    GridRecord,
    RunManifest,
    ScenarioFile,
)
from labkit.model.scenario import Scenario, ScenarioError
from labkit.runs import rundir, runner
from labkit.runs.provenance import git_revision
from labkit.runs.rundir import PolarsDataType, RunDataError, RunWriter

EXECUTORS = ("local", "slurm")
ENDED = ("complete", "failed", "interrupted", "cancelled")
# Slurm job states (squeue %T) of a job that has not ended
SLURM_ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
               "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT",
               "RESV_DEL_HOLD", "STOPPED", "POWER_UP_NODE"}
POLL_S = 5.0  # how often the slurm executor looks at its jobs
GONE_GRACE_S = 60.0  # an ended job's result may reach a shared filesystem this late
BASE_COLUMNS: dict[str, PolarsDataType] = {"run_id": pl.Utf8, "scenario": pl.Utf8,
                                        "batch": pl.Utf8, "point": pl.Int64, "seed": pl.Int64}


@dataclass(frozen=True)
class PointJob:
    """What one point's run needs, wherever it runs (pickled into a Slurm job)."""

    point: int
    scenario: Scenario
    policies: tuple[str, ...]
    duration: float | None
    out: str  # the run directory to create
    batch: BatchRef  # recorded in the run's manifest


@dataclass(frozen=True)
class PointOutcome:
    """How a point's run went, as the function that ran it says: ``status`` (complete,
    failed or interrupted) and what it knows of the rest (None: not said)."""

    status: str
    run_id: str | None = None
    host: str | None = None
    error: str | None = None
    start_time: str | None = None
    end_time: str | None = None


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


# --- one point ------------------------------------------------------------------------------


def run_point(job: PointJob, on_progress: Callable[[runner.Progress], None] | None = None
              ) -> PointOutcome:
    """Run one point here and say how it went (complete or failed). A run that fails is
    an answer, not an exception; ``KeyboardInterrupt`` still stops the caller."""
    host, start_time = rundir.host_label(), rundir.now_iso()
    try:
        run = runner.run(job.scenario, list(job.policies), out=job.out, duration=job.duration,
                         on_progress=on_progress, batch=job.batch)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a scenario the machine refuses, a run that failed: recorded
        return PointOutcome("failed", host=host, start_time=start_time,
                            error=f"{type(exc).__name__}: {exc}", end_time=rundir.now_iso())
    return PointOutcome("complete", host=host, start_time=start_time,
                        run_id=run.manifest.run_id, end_time=rundir.now_iso())


def job_main(job: PointJob) -> PointOutcome:
    """A Slurm job's work: :func:`run_point`. Slurm's signals — SIGTERM when the job is
    cancelled or reaches its time limit — stop the run as Ctrl-C does: it tears down what it
    built and is recorded as interrupted (a second signal cannot cut the teardown short)."""
    stopping: list[int] = []

    def interrupt(signum, _frame):
        if not stopping:
            stopping.append(signum)
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        return run_point(job)
    except KeyboardInterrupt:
        signame = signal.Signals(stopping[0]).name if stopping else "SIGINT"
        return PointOutcome("interrupted", host=rundir.host_label(),
                            error=f"stopped by {signame} (scancel, or the job's time limit)",
                            end_time=rundir.now_iso())
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# --- the batch ------------------------------------------------------------------------------


class _Record:
    """The batch directory, its manifest rewritten at every change of a point."""

    def __init__(self, grid: Grid, executor: str, out: str | Path | None,
                 argv: list[str] | None):
        self.batch_id = rundir.new_run_id(f"batch-{grid.name}")
        self.writer = RunWriter(Path(out) if out is not None else rundir.RUNS_DIR / self.batch_id)
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
    replaces what runs a point (:func:`run_point` locally, :func:`job_main` in a Slurm
    job) and ``cluster`` submitit's executor ("slurm"; "local" runs the jobs as local
    processes): both only for tests. Raises :class:`~labkit.model.scenario.ScenarioError` (a bad
    grid or executor) and :class:`~labkit.runs.runner.NotReady` before creating anything."""
    g = grid if isinstance(grid, Grid) else grid_mod.load(grid)
    if executor not in EXECUTORS:
        raise ScenarioError(g.path, "executor", f"unknown executor {executor!r} "
                                                f"(known: {', '.join(EXECUTORS)})")
    if executor == "local" and run_fn is None and (problem := runner.not_ready()):
        raise runner.NotReady(problem)
    if executor == "slurm":
        _check_slurm(cluster)
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
                _run_slurm(record, g, tell, run_fn or job_main, cluster, poll_s, gone_grace_s)
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


# --- Slurm ------------------------------------------------------------------------------------


def slurm_parameters(g: Grid) -> dict[str, Any]:
    """What each job of ``g`` asks Slurm for, as submitit's ``update_parameters`` takes it:
    one whole node (exclusive, all its memory), one task, the grid's time limit, and the
    point run directly in the batch step (which holds every CPU of the node; an ``srun``
    step of one task may be bound to one CPU)."""
    s = g.slurm
    params: dict[str, Any] = {
        "name": f"labkit-{g.name}", "timeout_min": s.time_min, "nodes": 1,
        "tasks_per_node": 1, "slurm_exclusive": True, "slurm_mem": "0",
        "slurm_use_srun": False,
    }
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(s, key):
            params[f"slurm_{key}"] = getattr(s, key)
    if s.setup:
        params["slurm_setup"] = list(s.setup)
    return params


def slurm_executor(g: Grid, folder: Path, cluster: str = "slurm"):
    """submitit's executor for ``g``'s jobs, files in ``folder``."""
    import submitit

    extra = {"slurm_python": g.slurm.python} if g.slurm.python else {}
    ex = submitit.AutoExecutor(folder=folder, cluster=cluster, **extra)
    ex.update_parameters(**slurm_parameters(g))
    return ex


def _check_slurm(cluster: str) -> None:
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise runner.NotReady("submitit is not installed: run `make setup`") from None
    lacking = [p for p in ("sbatch", "squeue", "srun") if shutil.which(p) is None]
    if cluster == "slurm" and lacking:
        raise runner.NotReady(f"Slurm's {', '.join(lacking)} not on PATH: run `labkit batch "
                              "--executor slurm` where jobs are submitted (a login node), "
                              "or install slurm-client")


def _run_slurm(record: _Record, g: Grid, tell, run_fn, cluster: str, poll_s: float,
               gone_grace_s: float) -> None:
    ex = slurm_executor(g, record.dir / "slurm", cluster)
    jobs: dict[int, Any] = {}
    try:
        for p in g.points:
            try:
                job = ex.submit(run_fn, record.job(g, p))
            except Exception as exc:  # sbatch refused it: recorded, the others go on
                tell(p, record.update(p.index, "failed",
                                      error=f"not submitted: {type(exc).__name__}: {exc}"))
                continue
            jobs[p.index] = job
            tell(p, record.update(p.index, "submitted", job_id=str(job.job_id),
                                  log=_relative(job.paths.stderr, record.dir)))
        _wait(record, g, jobs, tell, cluster, poll_s, gone_grace_s)
    except BaseException as exc:  # Ctrl-C, or this process failing: no job runs on untended
        why = ("the batch was interrupted" if isinstance(exc, KeyboardInterrupt) else
               f"the batch stopped: {type(exc).__name__}: {exc}")
        for index, job in jobs.items():
            if record.points[index].status not in ENDED:
                job.cancel(check=False)
                try:
                    tell(g.points[index], record.update(index, "cancelled", error=why))
                except Exception:  # noqa: S110 - the record may be what failed; cancel the rest
                    pass
        raise


SQUEUE_SILENCE_S = 600.0  # squeue failing this long: the batch stops and cancels its jobs


def _wait(record: _Record, g: Grid, jobs: dict[int, Any], tell, cluster: str,
          poll_s: float, gone_grace_s: float) -> None:
    """Collect each job's result as it ends. Slurm's own accounting (sacct, which submitit
    asks) is often not configured; squeue says whether a job is still alive, and a job
    that left it without a result for ``gone_grace_s`` has failed."""
    alive_at = {i: time.monotonic() for i in jobs}
    answered_at = time.monotonic()
    waiting = dict(jobs)
    while waiting:
        states = _squeue() if cluster == "slurm" else None
        if states is not None:
            answered_at = time.monotonic()
        elif cluster == "slurm" and time.monotonic() - answered_at > SQUEUE_SILENCE_S:
            raise RuntimeError(f"squeue has not answered for {SQUEUE_SILENCE_S:.0f} s: is "
                               "Slurm's controller down?")
        for index, job in list(waiting.items()):
            p = g.points[index]
            if job.paths.result_pickle.exists() or (cluster != "slurm" and job.done()):
                try:
                    outcome = job.result()
                except Exception as exc:  # raised in the job, outside labkit's own handling
                    outcome = PointOutcome("failed", error=f"{type(exc).__name__}: {exc}")
                tell(p, record.ended(index, outcome))
                del waiting[index]
                continue
            if states is None:
                continue
            state, nodes = states.get(str(job.job_id), (None, ""))
            if state in SLURM_ALIVE:
                alive_at[index] = time.monotonic()
                if state == "RUNNING" and record.points[index].status != "running":
                    tell(p, record.update(index, "running", host=nodes))
            elif time.monotonic() - alive_at[index] > gone_grace_s:
                tail = _last_line(job.paths.stderr)
                tell(p, record.update(index, "failed", error=(
                    f"Slurm job {job.job_id} ended ({state or 'no longer listed'}) without a "
                    f"result; its stderr: {job.paths.stderr}" + (f": {tail}" if tail else ""))))
                del waiting[index]
        if waiting:
            time.sleep(poll_s)


def _squeue() -> dict[str, tuple[str, str]] | None:
    """This user's Slurm jobs (recently ended ones too): id -> (state, nodes); None when
    squeue does not answer."""
    try:
        proc = subprocess.run(["squeue", "--me", "--noheader", "--states=all",
                               "--format=%i|%T|%N"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    out = {}
    for line in proc.stdout.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, nodes = rest.partition("|")
        out[job_id] = (state, nodes)
    return out


def _last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _relative(path: Path, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


# --- many runs as one frame -------------------------------------------------------------------


def load_runs(paths: str | Path | Iterable[str | Path]) -> pl.DataFrame:
    """One frame over many runs: a row per run and policy (the run's summary.json as
    :func:`labkit.analysis.metrics.summary_frame` gives it), led by ``run_id``, ``scenario``,
    ``batch`` and ``point`` (null for a run outside a batch), ``seed``, then each grid
    parameter (a column per key path, null where a run has none), and last the run's
    ``path``.

    ``paths``: run directories, batch directories (their complete points) and directories
    of runs (``data/runs``: every run and batch in it; sweeps and calibrations are left
    out), alone or in a list. Reads only manifests and summaries; RunDataError names a
    run that cannot be read."""
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
    reserved = {*BASE_COLUMNS, *metrics.SUMMARY_COLUMNS, "path"}
    columns = {k: (f"grid:{k}" if k in reserved else k, _dtype(v)) for k, v in keys.items()}
    schema: dict[str, PolarsDataType] = {
        **BASE_COLUMNS, **{name: t for name, t in columns.values()},
        **metrics.SUMMARY_COLUMNS, "path": pl.Utf8}
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
        frames.append(metrics.summary_frame(summary).select(
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
