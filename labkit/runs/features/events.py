"""Faults on a policy's timeline (a scenario's ``events``) as a feature of its stack: each
event's link goes down, runs at another rate or loses packets at its time after the
traffic starts, for its length, again and again when it repeats; every change is recorded
with the time it took effect (the ``events`` table).

A link down is every packet dropped, both ways, by the lossy links' dropper
(:mod:`labkit.kernel.loss`, through :class:`LossyLinks`; a link without loss of its own
gets one that drops nothing until then): a dead optic as the hosts and routers see it,
its routes left in place as a static fabric's are. A rate is both ports' HTB classes
moved, by requests prepared as the stack is built (:func:`labkit.kernel.tc.rate_requests`)
and sent when due through a socket opened then in each port's namespace. A delay is the
delay line's, which the fabric splices into a link whose delay an event changes
(``Fabric(spliced=...)``). A straggler (a host's ``slow``) is, for labkit's own rank, its
engine told ``SLOW <rank> <factor>``: each of the rank's compute phases that starts from
then on takes that many times as long (``SLOW <rank> 1`` ends it); for a program's rank,
its cgroup's CPU quota (:mod:`labkit.kernel.cpuquota`: 1 / factor of one CPU). The other
ranks wait for it as they would for a slow GPU.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

from labkit.kernel import cpuquota, loss, tc
from labkit.kernel.cgroups import CgroupError
from labkit.model.scenario_spec import EventSpec, Policy, Scenario
from labkit.model.tables import EventRow
from labkit.model.topo import Port
from labkit.runs.features.base import Feature, Stack
from labkit.runs.features.jobmark import JobMarking
from labkit.runs.features.loss import LossyLinks
from labkit.runs.result import PolicyResult
from labkit.traffic.agents import Engine


def occurrences(i: int, event: EventSpec) -> Iterator[tuple[float, int, str]]:
    """When event ``i`` starts and ends, in order: (seconds after the traffic starts, ``i``,
    "start" or "end"), for ever when it repeats (taken lazily: an event every microsecond
    costs nothing until it is due)."""
    at = event.at_s
    while True:
        yield at, i, "start"
        if event.for_s is None:
            return
        yield at + event.for_s, i, "end"
        if event.every_s is None:
            return
        at += event.every_s


class Events(Feature):
    """The scenario's events, applied on time by a thread of their own."""

    _thread: threading.Thread | None = None
    failed: tuple[int, Exception] | None = None  # the event that could not be applied

    def __init__(self) -> None:
        self.rtnl: dict[str, tc.Rtnl] = {}  # a socket in each node whose rate changes

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return bool(sc.events)

    def build(self, stack: Stack) -> None:
        self.stack, self.events = stack, stack.sc.events
        self.ports: dict[str, tuple[Port, Port]] = {pa.link.name: (pa, pb)
                                                    for pa, pb in stack.topo.links}
        self.ranks: dict[str, tuple[Engine, int]] = {}  # each host's rank and its engine
        self.slow: dict[str, float] = {}  # each straggler's factor now
        marking = stack.get(JobMarking)
        self.groups = marking.groups if marking else {}  # a program's ranks' cgroups
        if any(e.host in self.groups for e in self.events) and (why := cpuquota.problem()):
            raise CgroupError(f"a straggler on a program's host: {why}")
        # the lossy links' droppers (LossyLinks closes them and counts their drops)
        droppers = stack.need(LossyLinks, "a link's events").links
        assert droppers is not None, "built before the events"
        self.droppers: loss.LossyLinks = droppers
        for event in self.events:
            if event.host:
                continue
            pa, pb = self.ports[event.link]
            if event.change in ("down", "loss_percent") and \
                    event.link not in self.droppers.objects:
                self.droppers.add(event.link, 0.0, [(h.ns, h.ifname, h.ifindex) for h in
                                                    map(stack.fabric.handle, (pa, pb))])
        self.rows: list[EventRow] = []
        self._stop = threading.Event()
        # each rate event's requests, as it starts (True) and ends, with their sockets
        self.rates: dict[tuple[int, bool], list[tuple[tc.Rtnl, list[bytearray]]]] = {}
        for i, event in enumerate(self.events):
            if event.change == "rate_mbps":
                for port in self.ports[event.link]:
                    self._prepare_rate(i, event, port)

    def _prepare_rate(self, i: int, event: EventSpec, port: Port) -> None:
        fabric = self.stack.fabric
        if port.node not in self.rtnl:
            self.rtnl[port.node] = fabric.ns[port.node].run(tc.Rtnl)
        index, shape = fabric.handle(port).ifindex, fabric.shape_of(port)
        for starting, rate in ((True, event.value), (False, shape.rate_mbps)):
            self.rates.setdefault((i, starting), []).append(
                (self.rtnl[port.node], tc.rate_requests(index, shape, rate)))

    def jobs_started(self, engines: Mapping[str, Sequence[Engine]]) -> None:
        self.ranks = {host: (engine, rank) for job in engines.values() for engine in job
                      for rank, host in engine.hosts.items()}
        for host in self.slow:  # slowed before its ranks started
            self._tell(host)

    def start(self) -> None:
        plan = heapq.merge(*(occurrences(i, e) for i, e in enumerate(self.events)))
        self._thread = threading.Thread(target=self._run, args=(time.monotonic_ns(), plan),
                                        daemon=True, name="labkit-events")
        self._thread.start()

    def _run(self, t0: int, plan: Iterator[tuple[float, int, str]]) -> None:
        for at_s, i, state in plan:
            if self._stop.wait(max(0.0, (t0 + at_s * 1e9 - time.monotonic_ns()) / 1e9)):
                return
            event = self.events[i]
            try:
                self._apply(i, state == "start")
            except Exception as exc:  # noqa: BLE001 (raised again by stop(), in the run)
                self.failed = (i, exc)
                return
            self.rows.append(EventRow(time.monotonic_ns(), i, event.target, event.change,
                                      event.value, state))

    def _apply(self, i: int, starting: bool) -> None:
        event = self.events[i]
        if event.host:  # one of labkit's hosts (the scenario's check): its engine is told
            self.slow[event.host] = event.value if starting else 1.0
            self._tell(event.host)
            return
        link = self.ports[event.link][0].link
        if event.change == "rate_mbps":
            for rtnl, requests in self.rates[i, starting]:
                for request in requests:
                    rtnl.call(request)
        elif event.change == "delay_ms":
            self.stack.fabric.set_delay(event.link,
                                        event.value if starting else link.delay_ms,
                                        link.jitter_ms)
        else:
            self.droppers.set(event.link, event.value if starting else link.loss_percent)

    def _tell(self, host: str) -> None:
        """The host's rank's engine, of its compute factor now (once its ranks run), or
        a program's rank's CPU quota."""
        if host in self.groups:
            label = f"{self.stack.registry.run_id}/{self.stack.policy.name}/{host}"
            cpuquota.quota(self.groups[host], self.slow[host], label, self.stack.registry.add)
        elif host in self.ranks:
            engine, rank = self.ranks[host]
            engine.send(f"SLOW {rank} {self.slow[host]}")

    def stop(self) -> None:
        """No more changes; one that could not be made fails the run here, naming it."""
        if self._thread:
            self._stop.set()
            self._thread.join(timeout=5)
        if self.failed:
            (i, exc), self.failed = self.failed, None
            raise RuntimeError(f"events[{i}] could not be applied, so the run does not show "
                               f"it: {exc}") from exc

    def collect(self, result: PolicyResult) -> None:
        result.events = self.rows

    def close(self) -> None:
        try:
            self.stop()
        finally:
            for rtnl in self.rtnl.values():
                rtnl.close()
