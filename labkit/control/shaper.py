"""Kernel-side enforcement of the controllers' decisions: the held class of each held
host's NIC (``1:20`` of the ``held`` layout, :mod:`labkit.tc`), which every packet
but vip passes, whoever sent it — labkit's storage agents, iperf3, a user's own
program. Packets over the ceiling wait in that queue (TCP small queues keep each
socket's share of it bounded); none is marked or dropped by the valve.

One thread, :class:`Shaper`, keeps each class's ceiling equal to what the host's
valve setting says now: the held lane's rate (``Valves.set`` by the controller), or
its busy rate while the job's window is open in the host's ``lk_phase`` (written by
the job itself on a GPU host, by the state-aware relay on a storage host), from
``lead_ms`` before the window so that what waits is held before the collective
starts. A ceiling moves in one netlink message (well under a millisecond); the class
keeps its queue, so no flow is reordered. Why a thread and not a per-packet class
choice in BPF: two classes per lane would reorder a flow at each window edge and let
the idle class's backlog flow on into the collective.
"""

from __future__ import annotations

import threading
import time

from labkit import tc
from labkit.control.valve import JobPhase, Valves
from labkit.fabric import Fabric

HELD_LANE = "low"  # the valve setting the controllers move for a held host
POLL_MS = 2.0


class Shaper:
    """Follow the held hosts' valve settings and job phases with their classes' ceilings."""

    def __init__(self, valves: Valves, fabric: Fabric, hosts: list[str], lead_ms: float):
        self.valves, self.fabric, self.hosts = valves, fabric, hosts
        self.lead_ns = int(lead_ms * 1e6)
        self.applied: dict[str, float | None] = {h: None for h in hosts}  # None: the link
        self.nics = {h: (fabric.nic(h).ifindex, fabric.host_shape(h)) for h in hosts}
        self.changes = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shaper", daemon=True)

    def ceiling(self, host: str, now_ns: int) -> float | None:
        """What the host's held class should let through now (Mbit/s; None: the link)."""
        valve = self.valves.valves[host]
        setting = valve.lanes[HELD_LANE]
        if setting.busy_mbps is not None:
            p = JobPhase.from_buffer_copy(valve.obj.maps["lk_phase"].lookup(0))
            if p.busy_from_ns - self.lead_ns <= now_ns < p.busy_until_ns:
                return setting.busy_mbps
        return setting.mbps

    def apply(self, now_ns: int) -> None:
        for host in self.hosts:
            want = self.ceiling(host, now_ns)
            if want != self.applied[host]:
                self.fabric.ns[host].run(tc.set_held_ceil, *self.nics[host], want)
                self.applied[host] = want
                self.changes += 1

    def _loop(self) -> None:
        try:
            while not self._stop.wait(POLL_MS / 1e3):
                self.apply(time.monotonic_ns())
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)

    def start(self) -> Shaper:
        self.apply(time.monotonic_ns())
        self._thread.start()
        return self

    def halt(self) -> None:
        """End the thread (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def stop(self) -> None:
        self.halt()
        if self.errors:
            raise RuntimeError(f"shaper failed: {self.errors[0]}") from self.errors[0]
