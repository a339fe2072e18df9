"""``interleave``, after CASSINI (NSDI'24), as a feature of a policy's stack: the jobs'
iterations shifted in time so that their communication phases take turns at the
bottleneck instead of meeting there (``fair``'s lanes otherwise).

Once every job has ended :data:`LEARN` iterations, and again every :data:`EVERY`
iterations of the first job, each job's communication time alone is reckoned from its
bytes at the bottleneck (the kernel's per-job count over the port's rate), its compute
from what its engine reports, and the period from the slowest job's two. The jobs'
communication phases are laid out one after another in that period, in the scenario's
order, the period's idle time shared out between them as gaps: each job after the first
whose phase is more than half a gap from its place is told to put off one of its coming
ops by however far that is (``SHIFT <op> <ns>`` to its engines, which apply it between
ops). A shifted job pays
once, the shift, in that iteration; with equal periods the jobs then stay apart. Every
shift is kept (``job_shifts``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence

from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import JobShiftRow
from labkit.runs.features.base import Feature, Stack, watched_ports
from labkit.runs.features.jobwatch import JobWatch
from labkit.runs.result import PolicyResult
from labkit.traffic.agents import Engine

LEARN = 3  # iterations every job ends before the first layout
EVERY = 4  # iterations of the first job between layouts
AHEAD = 2  # a shift applies to the op this many after the job's latest
MIN_SHIFT = 0.05  # of the period: a phase nearer its place than this stays


class Interleave(Feature):
    """Each job's communication phase put in its turn within the first job's period."""

    def __init__(self) -> None:
        self.watch: JobWatch | None = None
        self.order: list[str] = []  # the jobs, in the scenario's order
        self.iterations: dict[str, int] = {}
        self.engines: Mapping[str, Sequence[Engine]] = {}
        self.rate_bytes_per_ns = 0.0
        self.next_layout = LEARN - 1  # the first job's op after which to lay out again
        self.rows: list[JobShiftRow] = []

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return policy.layout == "interleave"

    def build(self, stack: Stack) -> None:
        self.watch = JobWatch(stack, "interleave")
        self.order = [job.name for job in stack.sc.jobs]
        self.iterations = {job.name: job.iterations or 0 for job in stack.sc.jobs}
        self.rate_bytes_per_ns = min(p.link.rate_mbps for p in watched_ports(stack.topo)) / 8e3

    def jobs_started(self, engines: Mapping[str, Sequence[Engine]]) -> None:
        self.engines = engines

    def op_done(self, job: str, op: int, compute_ns: int) -> None:
        assert self.watch, "built"
        if not self.watch.ended(job, op, compute_ns):
            return
        if job == self.order[0] and op >= self.next_layout and self.watch.every_job_has(LEARN):
            self.next_layout = op + EVERY
            self._lay_out()

    def comm_ns(self, job: str) -> int:
        """The job's communication time alone: its bytes per iteration at the busiest
        watched port over the port's rate (the first iteration, which sets up, left out
        once there are others)."""
        assert self.watch, "built"
        seen = list(self.watch.seen[job])[1:] or list(self.watch.seen[job])
        return int(statistics.median(it.bytes for it in seen) / self.rate_bytes_per_ns)

    def _lay_out(self) -> None:
        """Each job after the first: its op :data:`AHEAD` after its latest put off so that
        its communication begins as the one before it in the order ends, within the
        period the slowest job takes alone (its compute and its communication)."""
        assert self.watch, "built"
        latest = {job: self.watch.seen[job][-1] for job in self.order}
        comm = {job: self.comm_ns(job) for job in self.order}
        period = max(latest[job].compute_ns + comm[job] for job in self.order)
        # the period's idle time shared out: a gap after each job's communication, and
        # a phase within half a gap of its place is left where it is
        gap = max(period - sum(comm.values()), 0) // len(self.order)
        first = latest[self.order[0]]
        # when the first job's next communication begins: its op's end, then its compute
        begins = first.t_ns + first.compute_ns
        now = time.monotonic_ns()
        for before, job in zip(self.order, self.order[1:], strict=False):
            begins += comm[before] + gap  # this job's turn: a gap after the one before
            mine = latest[job]
            natural = mine.t_ns + mine.compute_ns + (AHEAD - 1) * period  # its op's start
            shift = (begins - natural) % period
            if min(shift, period - shift) < max(MIN_SHIFT * period, gap / 2):
                continue
            op = mine.op + AHEAD
            if op >= self.iterations[job]:  # it ends before then: nothing to shift
                continue
            for engine in self.engines.get(job, ()):
                engine.send(f"SHIFT {op} {shift}")
            self.rows.append(JobShiftRow(now, job, op, shift, period, comm[job]))

    def collect(self, result: PolicyResult) -> None:
        result.job_shifts = list(self.rows)
