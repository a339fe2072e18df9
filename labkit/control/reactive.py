"""``reactive``: dynamic shaping by AIMD on the storage senders' low lanes.

Every interval it looks at the bottleneck as the fabric telemetry shows it
(``telemetry_delay_ms`` old): if vip packets arrived there and would wait longer
than ``target_us``, storage's share of its fair share is halved (at most once per
round trip of the control loop, so one observation is not punished twice);
otherwise it grows by a quarter of the fair share per interval, up to ``idle_share``.
Once no vip packet has arrived for ``IDLE_MS`` of telemetry and no queue beyond the
target stands at the bottleneck (the job computes; a queue could hold the vip packets
the job waits for), there is nothing to protect: storage gets ``idle_share`` at once
instead of climbing back over the compute phase's first tens of milliseconds.
"""

from __future__ import annotations

from labkit.control.base import Controller
from labkit.kernel.capture import POLL_MS

INCREASE = 0.25  # of the senders' fair share, per interval
DECREASE = 0.5
FLOOR = 0.01  # of the senders' fair share: never shut storage out entirely
IDLE_MS = 16  # two telemetry samples with no vip packet: the vip lane is idle


class Reactive(Controller):
    name = "reactive"

    def __init__(self, plant):
        super().__init__(plant)
        self.share = plant.spec.idle_share
        self.last_cut = 0
        self.last_vip_ns = 0  # the newest sample in which vip packets arrived
        spec = plant.spec
        self.loop_ns = int((spec.telemetry_delay_ms + POLL_MS + spec.interval_ms) * 1e6)

    def step(self, now_ns: int) -> None:
        views = self.plant.feed.view(now_ns)
        if not views:
            return
        newest = max(v.t_ns for v in views.values())
        if any(v.vip_new_bytes for v in views.values()):
            self.last_vip_ns = newest
        queued_us = max(v.vip_delay_ns for v in views.values()) / 1e3
        # no vip packet arrived, none waited: storage's own queue is not the vip lane's
        delay_us = max(v.vip_delay_ns if v.vip_new_bytes else 0 for v in views.values()) / 1e3
        if delay_us > self.plant.spec.target_us:
            if now_ns - self.last_cut < self.loop_ns:
                return
            self.share = max(self.share * DECREASE, FLOOR)
            self.last_cut = now_ns
            reason = f"vip delay {delay_us:.0f} us > target: x{DECREASE}"
        elif (newest - self.last_vip_ns >= IDLE_MS * 1_000_000
              and queued_us <= self.plant.spec.target_us):
            self.share = self.plant.spec.idle_share
            reason = f"no vip packet for {IDLE_MS} ms: idle share"
        else:
            self.share = min(self.share + INCREASE, self.plant.spec.idle_share)
            reason = f"vip delay {delay_us:.0f} us <= target: +{INCREASE:.0%}"
        self.hold(round(self.share, 4), reason)
