"""``job-priority``, after Crux (SIGCOMM'24), as a feature of a policy's stack: the jobs
ranked by GPU intensity, learned while they run, and the most intense job's packets put
in the vip lane, every other job's in the normal lane, in the kernel's classifier.

A job's GPU intensity is the compute time of its iterations per byte it sent across the
bottleneck in them: its engine tells each iteration's compute as it ends (``op_done``)
and the kernel's per-job counters at the watched ports (the probes', by the job's DSCP)
give the bytes since its previous iteration. The ranking is over each job's latest
:data:`WINDOW` iterations, made again as each iteration ends; the classifier's rules are
rewritten only when the most intense job changes, and every ranking that changed a lane
is kept (``job_ranks``). Until every job has ended :data:`WARMUP` iteration, all are
vip, as under ``fair``.

Three lanes, one of them storage's: the most intense job is alone in vip, and the others
share the normal lane's FIFO, however many there are.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from labkit.model.scenario_spec import LaneRule, Policy, Scenario
from labkit.model.tables import JobRankRow
from labkit.runs.features.base import Feature, Stack
from labkit.runs.features.lanes import Lanes
from labkit.runs.features.probes import Probes
from labkit.runs.result import PolicyResult

WINDOW = 8  # a job's latest iterations its intensity is learned over
WARMUP = 1  # iterations every job ends before the first ranking


class JobPriority(Feature):
    """The jobs ranked by GPU intensity as they run; the top one's DSCP in the vip lane."""

    def __init__(self) -> None:
        self.stack: Stack | None = None
        self.lanes: Lanes | None = None
        self.probes: Probes | None = None
        self.dscps: dict[str, int] = {}
        self.seen: dict[str, deque[tuple[int, int]]] = {}  # job: (compute ns, bytes) per op
        self.sent: dict[str, int] = {}  # job: its bytes at the watched ports so far
        self.top: str | None = None
        self.rows: list[JobRankRow] = []
        self.lock = threading.Lock()  # engines' lines may come from more than one thread

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return policy.layout == "job-priority"

    def build(self, stack: Stack) -> None:
        self.stack = stack
        self.lanes = stack.need(Lanes, "job-priority")
        self.probes = stack.need(Probes, "job-priority (each job's bytes at the bottleneck)")
        self.dscps = {job.name: job.dscp for job in stack.sc.jobs}
        self.seen = {name: deque(maxlen=WINDOW) for name in self.dscps}
        self.sent = dict.fromkeys(self.dscps, 0)

    def _bytes(self, job: str) -> int:
        """The job's bytes the watched ports have taken so far (the kernel's count)."""
        assert self.probes, "built"
        dscp = self.dscps[job]
        return sum(port.jobs()[dscp][1] for port in self.probes.watched if port.jobs)

    def op_done(self, job: str, op: int, compute_ns: int) -> None:
        if job not in self.seen:
            return
        with self.lock:
            total = self._bytes(job)
            self.seen[job].append((compute_ns, total - self.sent[job]))
            self.sent[job] = total
            if op + 1 >= WARMUP and all(len(s) >= WARMUP for s in self.seen.values()):
                self._rank()

    def intensity(self, job: str) -> float:
        """Compute ns per byte across the bottleneck over the job's latest iterations."""
        seen = list(self.seen[job])[-WINDOW:]
        compute = sum(c for c, _ in seen)
        nbytes = sum(b for _, b in seen)
        return compute / nbytes if nbytes else float("inf")

    def _rank(self) -> None:
        learned = {job: self.intensity(job) for job in self.seen}
        top = max(learned, key=lambda job: learned[job])
        if top == self.top:
            return
        self.top = top
        assert self.stack and self.lanes and self.lanes.classifier, "built"
        rules = [LaneRule("vip" if job == top else "normal", dscp=dscp)
                 for job, dscp in self.dscps.items()]
        self.lanes.classifier.configure([*rules, *self.stack.sc.lanes],
                                        self.stack.policy.port_layout)
        now = time.monotonic_ns()
        self.rows += [JobRankRow(now, job, value, len(self.seen[job]),
                                 "vip" if job == top else "normal")
                      for job, value in learned.items()]

    def collect(self, result: PolicyResult) -> None:
        result.job_ranks = list(self.rows)
