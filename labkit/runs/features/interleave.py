"""``interleave``, after CASSINI (NSDI'24), as a feature of a policy's stack: the jobs'
iterations shifted in time so that their communication phases take turns at the
bottleneck instead of meeting there (``fair``'s lanes otherwise).

Once every job has ended :data:`LEARN` iterations, and again every :data:`EVERY`
iterations of the first job, each job's communication time alone is reckoned from its
bytes at the bottleneck (the kernel's per-job count over the port's rate), its compute
from what its engine reports, and the period from the slowest job's two. Where each job's
next communication phase but one would begin is foreseen from its latest iterations; if
two of them would meet (and they can all fit apart in the period), the phases are laid
out one after another in it, in the scenario's order, its idle time shared out between
them as gaps, and the jobs are told to put off one of their coming ops (``SHIFT <op>
<ns>`` to its engines, which apply it between ops) by as little as that takes in all:
any one of them may be the one that stays. A shifted job pays once, the shift, in that
iteration; with equal periods the jobs then stay apart. Every shift is kept
(``job_shifts``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from itertools import combinations

from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import JobShiftRow
from labkit.runs.features.base import Feature, Stack, watched_ports
from labkit.runs.features.jobwatch import JobWatch
from labkit.runs.result import PolicyResult
from labkit.traffic.agents import Engine

LEARN = 3  # iterations every job ends before the first layout (two at least)
EVERY = 4  # iterations of the first job between layouts
AHEAD = 2  # a shift applies to the op this many after the job's latest
CLEARANCE = 0.05  # of the period: communication phases nearer each other than this meet


class Interleave(Feature):
    """Each job's communication phase put in its turn within the slowest job's period."""

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

    def iteration_ns(self, job: str) -> int:
        """How long the job's iterations take now: its latest one (jobs that meet at the
        bottleneck run slower than the period), less a shift it was given (a layout comes
        once every job has ended :data:`LEARN` of them, so there is one)."""
        assert self.watch, "built"
        seen = self.watch.seen[job]
        shifted = sum(r.shift_ns for r in self.rows if r.job == job and r.op == seen[-1].op)
        return seen[-1].t_ns - seen[-2].t_ns - shifted

    def _lay_out(self) -> None:
        """Each job's op :data:`AHEAD` after its latest put off as :func:`layout` says,
        from where it would begin if left alone, within the period the slowest job takes
        alone (its compute and its communication): the jobs that will still run that op
        (one that ends before then sends no more phases to keep apart from)."""
        assert self.watch, "built"
        latest = {job: self.watch.seen[job][-1] for job in self.order}
        running = [job for job in self.order if latest[job].op + AHEAD < self.iterations[job]]
        if len(running) < 2:
            return
        comm = {job: self.comm_ns(job) for job in running}
        period = max(latest[job].compute_ns + comm[job] for job in running)
        begins = {job: latest[job].t_ns + latest[job].compute_ns
                  + (AHEAD - 1) * self.iteration_ns(job) for job in running}
        now = time.monotonic_ns()
        for job, shift in (layout(running, begins, comm, period) or {}).items():
            if not shift:  # the one that stays, or in place already
                continue
            op = latest[job].op + AHEAD
            for engine in self.engines.get(job, ()):
                engine.send(f"SHIFT {op} {shift}")
            self.rows.append(JobShiftRow(now, job, op, shift, period, comm[job]))

    def collect(self, result: PolicyResult) -> None:
        result.job_shifts = list(self.rows)


def layout(order: Sequence[str], begins: Mapping[str, int], comm: Mapping[str, int],
           period: int) -> dict[str, int] | None:
    """How far to put off each job (in ``order``) whose communication phase would begin
    at ``begins`` and last ``comm`` in every ``period``, so that each phase begins a gap
    after the one before it ends, the gaps sharing out the period's idle time, by as
    little as that takes in all (ties: the first such layout in ``order``). None when no
    two phases come within :data:`CLEARANCE` of the period of each other (they are apart
    as they are), or when they cannot be (their gaps would be narrower than that: moving
    them would only chase the noise of their timing)."""
    clearance = int(CLEARANCE * period)
    gap = (period - sum(comm.values())) // len(order)
    if gap < clearance or apart(begins, comm, period, clearance):
        return None
    place, wanted = 0, {}
    for job in order:  # each one's place, from the first job's begin on
        wanted[job] = (begins[order[0]] + place - begins[job]) % period
        place += comm[job] + gap
    # every job may be put off by as much again: the least in all (one of them stays)
    return min(({job: (w + extra) % period for job, w in wanted.items()}
                for extra in dict.fromkeys((period - w) % period for w in wanted.values())),
               key=lambda shifts: sum(shifts.values()))


def apart(begins: Mapping[str, int], comm: Mapping[str, int], period: int, clearance: int
          ) -> bool:
    """Whether the jobs' communication phases, each beginning at ``begins`` and lasting
    ``comm`` in every ``period``, are at least ``clearance`` from each other."""
    for a, b in combinations(begins, 2):
        after = (begins[b] - begins[a]) % period  # b's begin, after a's
        if after < comm[a] + clearance or period - after < comm[b] + clearance:
            return False
    return True
