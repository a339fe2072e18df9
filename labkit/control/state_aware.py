"""``state-aware``: the job says when it communicates; the valves listen.

Each collective agent writes its phase into its own host's valve (``lk_phase``,
whose file descriptor it inherits): the window in which it expects to communicate
(announced when its compute starts) and the bytes to send. That host's gate reads
it in the kernel, per packet, with no control loop at all, and holds from
``lead_ms`` before the window, so what is already queued drains before the
collective starts. Storage hosts run no job, so this relay carries the phase to
them: it reads the GPU hosts' phase maps every 5 ms and writes the merged window
(see :meth:`StateAware._merged`) into the storage senders' valves
``relay_delay_ms`` later, emulating the message's trip across the fabric's control
network. While a window is open each low lane runs at ``busy_share`` of its fair share
(:func:`labkit.control.session.storage_senders`); otherwise at ``idle_share`` of it, less
what drains, within about :data:`DRAIN_MS`, a queue of more than :data:`DRAIN_FROM_MS` the
fabric telemetry shows at the bottleneck: at ``idle_share`` a queue left by a burst would
drain at 2 % of the port's rate (seconds), and the job's next packets, its rendezvous
and its retransmissions included, would wait behind it. A user's program
(``kind: program``) writes its phase through :mod:`labkit.torch`, or not at all: the
job marker in the kernel keeps the window open while the job's packets cross a
bottleneck; an open window is relayed one poll longer than it reads, so the storage
hosts stay held until the next look.
"""

from __future__ import annotations

import math
from collections import deque

from labkit.control.base import Controller, Plant
from labkit.kernel.valve import JobPhase, Valves

RELAY_POLL_MS = 5.0
DRAIN_MS = 20.0  # the idle rate drains a queue seen at the bottleneck in about this long
DRAIN_FROM_MS = 5.0  # ... from this long a queue (shorter ones TCP keeps, and drains, itself)
DRAIN_STEPS = 10  # the lowered idle rate moves in tenths of the fair share


class StateAware(Controller):
    name = "state-aware"

    def __init__(self, plant: Plant):
        super().__init__(plant, interval_ms=RELAY_POLL_MS)
        if not isinstance(plant.valves, Valves):
            raise TypeError("state-aware reads the GPU hosts' phase maps and writes the "
                            "storage hosts': it needs a run's valves (labkit.kernel.valve)")
        self.valves = plant.valves
        spec = plant.spec
        for host, fair_mbps in plant.senders.items():
            plant.valves.set(host, "low", "state-aware: the idle rate, and the busy rate "
                             "while the job communicates", mbps=spec.idle_share * fair_mbps,
                             busy_mbps=spec.busy_share * fair_mbps)
        self.idle = spec.idle_share  # of the fair share, now (less while a queue drains)
        self.relayed = set(plant.senders) - set(plant.gpu_hosts)  # the rest read their own
        self.window = (0, 0)
        self.in_flight: deque[tuple[int, tuple[int, int]]] = deque()

    def _merged(self, now_ns: int) -> tuple[int, int]:
        """The ranks' windows as one: while any rank's window is open, until the last of
        those closes (a rank closes its own by announcing the next); otherwise the
        next windows, from the first start to the last end."""
        windows = []
        for host in self.plant.gpu_hosts:
            raw = self.valves.valves[host].obj.maps.lk_phase.lookup(0)
            if not isinstance(raw, bytes):  # an array map (one value) has every slot
                raise RuntimeError(f"{host}'s lk_phase map has no phase in slot 0")
            p = JobPhase.from_buffer_copy(raw)
            if p.busy_until_ns > now_ns:
                windows.append((p.busy_from_ns, p.busy_until_ns))
        open_now = [w for w in windows if w[0] <= now_ns]
        chosen = open_now or windows
        if not chosen:
            return (0, 0)
        return (min(w[0] for w in chosen), max(w[1] for w in chosen))

    def _drain(self, now_ns: int) -> None:
        """Lower the idle rate while the bottleneck queues beyond :data:`DRAIN_FROM_MS`, so
        that the queue is gone in about :data:`DRAIN_MS`; back to ``idle_share`` once it
        is."""
        spec, views = self.plant.spec, self.plant.feed.view(now_ns)
        delay_ms = max((v.vip_delay_ns for v in views.values()), default=0) / 1e6
        idle = spec.idle_share
        if delay_ms > DRAIN_FROM_MS:  # in tenths, down: each change moves the held class's
            # ceiling (netlink) and each rise wakes the host's senders (a socket walk)
            steps = math.floor((spec.idle_share - delay_ms / DRAIN_MS) * DRAIN_STEPS)
            idle = max(spec.busy_share, steps / DRAIN_STEPS)
        if idle == self.idle:
            return
        self.idle = idle
        reason = (f"state-aware: a {delay_ms:.1f} ms queue at the bottleneck, drained by the "
                  "idle rate" if idle < spec.idle_share else "state-aware: the idle rate")
        for host, fair_mbps in self.plant.senders.items():
            self.plant.valves.set(host, "low", reason, mbps=idle * fair_mbps)

    def step(self, now_ns: int) -> None:
        self._drain(now_ns)
        window = self._merged(now_ns)
        if 0 < window[0] <= now_ns:  # open: it holds until the next relay at least, since
            # the kernel keeps a window open past the job's latest packet (a program's
            # traffic, bpf/jobmark.bpf.c) without knowing when this relay looks again
            window = (window[0], window[1] + int(RELAY_POLL_MS * 1e6))
        if window != self.window:
            self.window = window
            self.in_flight.append((now_ns + int(self.plant.spec.relay_delay_ms * 1e6), window))
        while self.in_flight and self.in_flight[0][0] <= now_ns:
            _, (start, end) = self.in_flight.popleft()
            for host in self.relayed:
                self.valves.valves[host].publish_phase("soon", start, end)
            self.valves.log_phase(sorted(self.relayed), start, end, now_ns)
