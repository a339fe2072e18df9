"""Fabric telemetry as a controller sees it.

The queue poller (:mod:`labkit.kernel.capture`) samples the bottleneck ports' HTB classes
every 8 ms, as a switch streams its queue telemetry. A controller does not see a
sample when it is taken but ``delay_ms`` later (the collector's latency, set in
the scenario's ``control.telemetry_delay_ms``), so its reaction time is
polling period + delay + its own decision interval, all reported.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, replace

from labkit.kernel import tc


@dataclass(frozen=True)
class PortView:
    """One bottleneck port, as last seen: when it was sampled, the queueing delay a vip
    packet would meet (backlog of the queue the vip lane uses / port rate), and the
    vip lane's bytes offered so far and since the sample the controller saw before."""

    t_ns: int
    vip_delay_ns: int
    backlog_bytes: int
    vip_bytes: int
    vip_new_bytes: int


class FabricFeed:
    """Samples pushed by the poller; :meth:`view` shows what was taken ``delay_ms`` ago."""

    def __init__(self, rates_mbps: dict[str, float], port_layout: str, delay_ms: float):
        self.rates = rates_mbps  # port label -> Mbit/s
        self.vip_class = tc.LANE_CLASS["vip"] if port_layout in ("lanes", "weights") \
            else None
        self.delay_ns = int(delay_ms * 1e6)
        self.pending: deque[tuple[str, PortView]] = deque()
        self.seen: dict[str, PortView] = {}
        self.vip_so_far: dict[str, int] = {}
        self.shown: dict[str, PortView] = {}  # per port, what the previous view showed
        self.lock = threading.Lock()

    def push(self, t_ns: int, port: str, classes: list[tc.ClassStats],
             lanes: dict[str, tuple[int, int]]) -> None:
        """Called by the poller for every sample of a port (``lanes``: offered per lane)."""
        waits_in = [c for c in classes if self.vip_class is None or c.classid == self.vip_class]
        backlog = sum(c.backlog_bytes for c in waits_in)
        vip = lanes["vip"][1]
        with self.lock:
            view = PortView(t_ns, int(backlog * 8e3 / self.rates[port]),
                            sum(c.backlog_bytes for c in classes), vip,
                            vip - self.vip_so_far.get(port, vip))
            self.vip_so_far[port] = vip
            self.pending.append((port, view))

    def view(self, now_ns: int) -> dict[str, PortView]:
        """Per port, the newest sample taken at least ``delay_ms`` before ``now_ns``, its
        vip bytes counted since the sample the previous view showed (a feed has one
        reader, its controller): when two samples reach it between two of its steps, the
        vip packets the first one saw still count."""
        with self.lock:
            while self.pending and self.pending[0][1].t_ns <= now_ns - self.delay_ns:
                port, v = self.pending.popleft()
                self.seen[port] = v
            for port, v in self.seen.items():
                shown = self.shown.get(port)
                if shown is not None and shown.t_ns != v.t_ns:
                    self.seen[port] = replace(v, vip_new_bytes=v.vip_bytes - shown.vip_bytes)
                self.shown[port] = self.seen[port]
            return dict(self.seen)
