"""What every controller shares: the plant it acts on and its decision loop."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from labkit.kernel import sched
from labkit.kernel.feed import FabricFeed
from labkit.model.scenario_spec import ControlSpec


class LaneValves(Protocol):
    """What a controller does to the hosts' valves: change a lane's setting (``mbps=...``,
    ``busy_mbps=...``). A run's are :class:`labkit.kernel.valve.Valves`; lab 3's rehearsal
    and the tests stand in their own."""

    def set(self, host: str, lane: str, reason: str, **changes: float | None) -> None: ...


@dataclass
class Plant:
    """What a controller may touch and know: the hosts' valves, the hosts whose storage
    data meets the collectives (their low lane is what it holds back) with each one's
    fair share in Mbit/s, the bottleneck's rate, the fabric telemetry feed, the GPU hosts (whose
    job publishes its phase) and the scenario's knobs."""

    valves: LaneValves
    senders: dict[str, float]  # host -> its fair share, Mbit/s
    gpu_hosts: list[str]
    bottleneck_mbps: float
    feed: FabricFeed
    spec: ControlSpec


class Controller:
    """Runs :meth:`step` every ``interval_ms`` in a thread until :meth:`stop`."""

    name = "controller"

    def __init__(self, plant: Plant, interval_ms: float | None = None):
        self.plant = plant
        self.interval_ns = int((interval_ms or plant.spec.interval_ms) * 1e6)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self.held: float | None = None  # the share of their fair share senders get now

    @property
    def prediction_error_ms(self) -> float | None:
        return None

    def start(self) -> Controller:
        self._thread.start()
        return self

    def _loop(self) -> None:
        sched.control_thread()
        tick = time.monotonic_ns()
        try:
            while not self._stop.is_set():
                self.step(time.monotonic_ns())
                tick += self.interval_ns
                delay = tick - time.monotonic_ns()
                if delay > 0:
                    self._stop.wait(delay / 1e9)
                else:
                    tick = time.monotonic_ns()
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)

    def step(self, now_ns: int) -> None:
        raise NotImplementedError

    def hold(self, share: float, reason: str) -> None:
        """Hold each sender's low lane to ``share`` of its fair share (``busy_share``
        while collectives run, at most ``idle_share``: storage alone never queues)."""
        if share == self.held:
            return
        self.held = share
        for host, fair_mbps in self.plant.senders.items():
            self.plant.valves.set(host, "low", reason, mbps=round(share * fair_mbps, 3))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5)
        if self.errors:
            raise RuntimeError(f"{self.name} controller failed: {self.errors[0]}") \
                from self.errors[0]
