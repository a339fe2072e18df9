"""``job-priority``, after Crux (SIGCOMM'24), as a feature of a policy's stack: the jobs
ranked by GPU intensity, learned while they run, and the most intense job's packets put
in the vip lane, every other job's in the normal lane, in the kernel's classifier.

A job's GPU intensity is the compute time of its iterations per byte it sent across the
bottleneck in them: its engine tells each iteration's compute as it ends (``op_done``)
and the kernel's per-job counters at the watched ports (the probes', by the job's DSCP)
give the bytes since its previous iteration (``jobwatch.JobWatch``). The ranking is over
each job's latest iterations, made again as each ends; the classifier's rules are
rewritten only when the most intense job changes, and every ranking that changed a lane
is kept (``job_ranks``). Until every job has ended :data:`WARMUP` iteration, all are vip,
as under ``fair``.

Three lanes, one of them storage's: the most intense job is alone in vip, and the others
share the normal lane's FIFO, however many there are.
"""

from __future__ import annotations

import time

from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import JobRankRow
from labkit.runs.features.base import Feature, Stack
from labkit.runs.features.jobwatch import JobWatch, set_job_lanes
from labkit.runs.result import PolicyResult

WARMUP = 1  # iterations every job ends before the first ranking


class JobPriority(Feature):
    """The jobs ranked by GPU intensity as they run; the top one's DSCP in the vip lane."""

    def __init__(self) -> None:
        self.stack: Stack | None = None
        self.watch: JobWatch | None = None
        self.top: str | None = None
        self.rows: list[JobRankRow] = []

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return policy.layout == "job-priority"

    def build(self, stack: Stack) -> None:
        self.stack = stack
        self.watch = JobWatch(stack, "job-priority")

    def op_done(self, job: str, op: int, compute_ns: int) -> None:
        assert self.watch, "built"
        if self.watch.ended(job, op, compute_ns) and self.watch.every_job_has(WARMUP):
            self._rank()

    def intensity(self, job: str) -> float:
        """Compute ns per byte across the bottleneck over the job's latest iterations."""
        assert self.watch, "built"
        seen = self.watch.seen[job]
        nbytes = sum(it.bytes for it in seen)
        return sum(it.compute_ns for it in seen) / nbytes if nbytes else float("inf")

    def _rank(self) -> None:
        assert self.stack and self.watch, "built"
        learned = {job: self.intensity(job) for job in self.watch.seen}
        top = max(learned, key=lambda job: learned[job])
        if top == self.top:
            return
        self.top = top
        lanes = {job: "vip" if job == top else "normal" for job in learned}
        set_job_lanes(self.stack, lanes)
        now = time.monotonic_ns()
        self.rows += [JobRankRow(now, job, value, len(self.watch.seen[job]), lanes[job])
                      for job, value in learned.items()]

    def collect(self, result: PolicyResult) -> None:
        result.job_ranks = list(self.rows)

