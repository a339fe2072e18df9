"""The batch's ``slurm`` executor: each point of a grid submitted as its own Slurm job
through submitit, one whole node per job (``--exclusive``, one node, one task, all its
memory: a run measures the machine, so it shares it with nothing); the job calls
:func:`job_main`, which runs the point as :func:`labkit.run` does here. The jobs' files
and each job's stdout and stderr go in the batch's ``slurm/`` folder.

Slurm's accounting (sacct) is often not configured: squeue says whether a job is still
alive, and a job that left it without a result has failed. Ctrl-C, or this process
failing, cancels every job not yet ended. What a point's record holds is the batch's
(:mod:`labkit.runs.batch`); this module only says what happened to each job.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from labkit.model.grid import Grid, Point
from labkit.model.manifest import BatchPoint
from labkit.runs import points, rundir, runner
from labkit.runs.points import ENDED, PointJob, PointOutcome

# Slurm job states (squeue %T) of a job that has not ended
SLURM_ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
               "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT",
               "RESV_DEL_HOLD", "STOPPED", "POWER_UP_NODE"}
POLL_S = 5.0  # how often the slurm executor looks at its jobs
GONE_GRACE_S = 60.0  # an ended job's result may reach a shared filesystem this late
SQUEUE_SILENCE_S = 600.0  # squeue failing this long: the batch stops and cancels its jobs


class PointLog(Protocol):
    """What the executor needs of the batch's record: its directory, each point's entry,
    a point's job, and a way to record a change of a point (the entry, as recorded)."""

    dir: Path
    points: list[BatchPoint]

    def job(self, grid: Grid, p: Point) -> PointJob: ...

    def update(self, index: int, status: str, *, host: str | None = None,
               job_id: str | None = None, error: str | None = None,
               log: str | None = None) -> BatchPoint: ...

    def ended(self, index: int, outcome: PointOutcome) -> BatchPoint: ...


Tell = Callable[[Point, BatchPoint], None]


def job_main(job: PointJob) -> PointOutcome:
    """A Slurm job's work: :func:`~labkit.runs.points.run_point`. Slurm's signals — SIGTERM
    when the job is cancelled or reaches its time limit — stop the run as Ctrl-C does: it
    tears down what it built and is recorded as interrupted (a second signal cannot cut
    the teardown short)."""
    stopping: list[int] = []

    def interrupt(signum, _frame):
        if not stopping:
            stopping.append(signum)
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        return points.run_point(job)
    except KeyboardInterrupt:
        signame = signal.Signals(stopping[0]).name if stopping else "SIGINT"
        return PointOutcome("interrupted", host=rundir.host_label(),
                            error=f"stopped by {signame} (scancel, or the job's time limit)",
                            end_time=rundir.now_iso())
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


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


def check(cluster: str) -> None:
    """:class:`~labkit.runs.runner.NotReady` unless jobs can be submitted from here."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise runner.NotReady("submitit is not installed: run `make setup`") from None
    lacking = [p for p in ("sbatch", "squeue", "srun") if shutil.which(p) is None]
    if cluster == "slurm" and lacking:
        raise runner.NotReady(f"Slurm's {', '.join(lacking)} not on PATH: run `labkit batch "
                              "--executor slurm` where jobs are submitted (a login node), "
                              "or install slurm-client")


def run(record: PointLog, g: Grid, tell: Tell, run_fn: Callable = job_main,
        cluster: str = "slurm", poll_s: float = POLL_S,
        gone_grace_s: float = GONE_GRACE_S) -> None:
    """Submit every point of ``g`` as a job that calls ``run_fn`` (default
    :func:`job_main`), and record each one's result in ``record`` as it ends."""
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


def _wait(record: PointLog, g: Grid, jobs: dict[int, Any], tell: Tell, cluster: str,
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
