"""One point of a batch, whichever executor runs it: what its run needs
(:class:`PointJob`, pickled into a Slurm job), how it went (:class:`PointOutcome`), and
:func:`run_point`, which runs it here as an ordinary :func:`labkit.run`. The batch
(:mod:`labkit.runs.batch`) and the Slurm executor (:mod:`labkit.runs.slurm`) share them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labkit.model.manifest import BatchRef
from labkit.model.scenario import Scenario
from labkit.runs import rundir, runner

# how a point may end (the others: pending, submitted, running)
ENDED = ("complete", "failed", "interrupted", "cancelled")


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
