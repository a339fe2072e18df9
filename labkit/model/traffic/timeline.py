"""The ranks' plans (:mod:`labkit.model.traffic.schedules`, :mod:`labkit.model.traffic.jobs`) run in
virtual time, with no network: when each step starts, computes and sends, and so how
long an op or training iteration takes and how much of it each rank spends idle.

The step rule is the agents' own (:class:`labkit.traffic.collective.Op`): a step starts
once the previous one has and every message awaited by the steps before it has arrived;
its compute (a timed wait) runs first, then its messages leave. A message arrives
``transfer_ns(src, dst, nbytes)`` after it left (default: at once). Links are not shared:
each message has its path to itself, so this is the plan's own timing, not the fabric's.
Messages between the same two ranks for the same chunk are matched in order, as the
agents match them. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labkit.model.traffic.schedules import Plan

Transfer = Callable[[int, int, int], float]  # (src, dst, nbytes) -> ns on the way


@dataclass(frozen=True)
class Timeline:
    """When every rank finished (``end_ns``, all ranks starting at 0), how long each one
    computed, and when: ``busy_ns[r]`` lists rank r's compute phases as (start, end)."""

    end_ns: tuple[float, ...]
    compute_ns: tuple[float, ...]
    busy_ns: tuple[tuple[tuple[float, float], ...], ...] = ()

    @property
    def makespan_ns(self) -> float:
        return max(self.end_ns)

    @property
    def idle_fraction(self) -> float:
        """The part of the makespan the ranks did not compute, averaged over ranks: a
        pipeline's bubble when messages take no time."""
        span = self.makespan_ns
        return 1 - sum(self.compute_ns) / (len(self.compute_ns) * span) if span else 0.0


def _keys(plan: Plan, rank: int, sending: bool) -> list[list[tuple]]:
    """Per step, a key for each message sent (or awaited): (src, dst, chunk, k) with k
    counting earlier messages of the same src, dst and chunk."""
    seen: dict[tuple, int] = {}
    out = []
    for step in plan.steps:
        keys = []
        for m in step.send if sending else step.recv:
            pair = (rank, m.peer, m.chunk) if sending else (m.peer, rank, m.chunk)
            keys.append((*pair, seen.get(pair, 0)))
            seen[pair] = seen.get(pair, 0) + 1
        out.append(keys)
    return out


def simulate(plans: Sequence[Plan], transfer_ns: Transfer | None = None) -> Timeline:
    """Run every rank's plan (rank r = ``plans[r]``) by the step rule; ValueError if the
    plans wait for messages that are never sent."""
    transfer = transfer_ns or (lambda src, dst, nbytes: 0.0)
    n = len(plans)
    sends = [_keys(p, r, True) for r, p in enumerate(plans)]
    recvs = [_keys(p, r, False) for r, p in enumerate(plans)]
    arrival: dict[tuple, float] = {}
    next_step = [0] * n
    clock = [0.0] * n  # when the rank's last started step finished computing
    ready = [0.0] * n  # when every message awaited by the steps before next_step arrived
    busy: list[list[tuple[float, float]]] = [[] for _ in plans]
    progressed = True
    while progressed:
        progressed = False
        for r, plan in enumerate(plans):
            while next_step[r] < len(plan.steps):
                k = next_step[r]
                if k and any(key not in arrival for key in recvs[r][k - 1]):
                    break
                if k:
                    ready[r] = max([ready[r], *(arrival[key] for key in recvs[r][k - 1])])
                step = plan.steps[k]
                begin = max(clock[r], ready[r])
                clock[r] = begin + step.compute_ns
                if step.compute_ns:
                    busy[r].append((begin, clock[r]))
                for m, key in zip(step.send, sends[r][k], strict=True):
                    arrival[key] = clock[r] + transfer(r, m.peer, m.nbytes)
                next_step[r] += 1
                progressed = True
    if any(next_step[r] < len(p.steps) for r, p in enumerate(plans)):
        raise ValueError("the plans deadlock: a step waits for a message never sent")
    end = []
    for r, plan in enumerate(plans):
        awaited = [arrival.get(key) for key in recvs[r][-1]] if plan.steps else []
        last = [t for t in awaited if t is not None]
        if len(last) < len(awaited):
            raise ValueError(f"rank {r} awaits a message that is never sent")
        end.append(max([clock[r], ready[r], *last]))
    compute = tuple(float(sum(s.compute_ns for s in p.steps)) for p in plans)
    return Timeline(tuple(end), compute, tuple(tuple(spans) for spans in busy))
