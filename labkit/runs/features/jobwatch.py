"""What the features that share the fabric between jobs (``job-priority``, ``job-weights``,
``interleave``) have in common: each job's iterations as they end (:class:`JobWatch`:
when, the compute its engine reports, the bytes the kernel counted for it at the
bottleneck since its previous one), and the jobs' lanes written into the classifier
(:func:`set_job_lanes`)."""

from __future__ import annotations

import time
from collections import deque
from typing import NamedTuple

from labkit.model.scenario_spec import LaneRule
from labkit.runs.features.base import Stack
from labkit.runs.features.lanes import Lanes
from labkit.runs.features.probes import Probes

KEEP = 8  # a job's latest iterations kept


class Iteration(NamedTuple):
    op: int
    t_ns: int  # when the launcher heard of its end (CLOCK_MONOTONIC)
    compute_ns: int  # its ranks' compute for it, as its first rank reports it
    bytes: int  # the job's bytes the busiest watched port took since its previous one


class JobWatch:
    """Each job's latest iterations (:data:`KEEP`), fed by ``op_done``: the bytes are the
    kernel's per-job counts (the probes', by the job's DSCP) at the watched port that took
    the most of them, one direction of the bottleneck."""

    def __init__(self, stack: Stack, by: str):
        self.probes = stack.need(Probes, f"{by} (each job's bytes at the bottleneck)")
        self.dscps = {job.name: job.dscp for job in stack.sc.jobs}
        self.seen: dict[str, deque[Iteration]] = {j: deque(maxlen=KEEP) for j in self.dscps}
        self.sent: dict[str, list[int]] = {j: [] for j in self.dscps}  # per watched port

    def ended(self, job: str, op: int, compute_ns: int) -> Iteration | None:
        """Record the end of ``job``'s op (None: not a job this watch knows)."""
        if job not in self.seen:
            return None
        dscp = self.dscps[job]
        now = [port.jobs()[dscp][1] for port in self.probes.watched if port.jobs]
        before = self.sent[job] or [0] * len(now)
        self.sent[job] = now
        it = Iteration(op, time.monotonic_ns(), compute_ns,
                       max((a - b for a, b in zip(now, before, strict=True)), default=0))
        self.seen[job].append(it)
        return it

    def every_job_has(self, n: int) -> bool:
        return all(len(s) >= n for s in self.seen.values())


def set_job_lanes(stack: Stack, lanes: dict[str, str]) -> None:
    """Each job's packets (by its DSCP) in the lane ``lanes`` gives it, before the
    scenario's own rules, on every router port (the shared ``lk_config``)."""
    feature = stack.need(Lanes, "a job's lane")
    assert feature.classifier, "built"
    dscps = {job.name: job.dscp for job in stack.sc.jobs}
    if not all(dscps[job] for job in lanes):  # DSCP 0 would match every unmarked packet
        raise ValueError(f"jobs {', '.join(lanes)} need DSCPs of their own: several jobs")
    rules = [LaneRule(lane, dscp=dscps[job]) for job, lane in lanes.items()]
    feature.classifier.configure([*rules, *stack.sc.lanes], stack.policy.port_layout)
