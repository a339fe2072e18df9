"""``reactive``: dynamic shaping by AIMD on the storage senders' low lanes.

Every interval it looks at the bottleneck as the fabric telemetry shows it
(``telemetry_delay_ms`` old): if a vip packet would wait longer than
``target_us``, storage's total rate is halved (at most once per round trip of the
control loop, so one observation is not punished twice); otherwise it grows by
5 % of the bottleneck per interval, and the valves open once it reaches it.
"""

from __future__ import annotations

from labkit.control.base import Controller

INCREASE = 0.05  # of the bottleneck's rate, per interval
DECREASE = 0.5
FLOOR = 0.01  # of the bottleneck's rate: never shut storage out entirely
POLL_MS = 8  # the fabric telemetry's sampling period (labkit.capture.QueuePoller)


class Reactive(Controller):
    name = "reactive"

    def __init__(self, plant):
        super().__init__(plant)
        self.rate = plant.bottleneck_mbps
        self.last_cut = 0
        spec = plant.spec
        self.loop_ns = int((spec.telemetry_delay_ms + POLL_MS + spec.interval_ms) * 1e6)

    def step(self, now_ns: int) -> None:
        views = self.plant.feed.view(now_ns)
        if not views:
            return
        delay_us = max(v.vip_delay_ns for v in views.values()) / 1e3
        top = self.plant.bottleneck_mbps
        if delay_us > self.plant.spec.target_us:
            if now_ns - self.last_cut < self.loop_ns:
                return
            self.rate = max(self.rate * DECREASE, FLOOR * top)
            self.last_cut = now_ns
            reason = f"vip delay {delay_us:.0f} us > target: x{DECREASE}"
        else:
            self.rate = min(self.rate + INCREASE * top, top)
            reason = f"vip delay {delay_us:.0f} us <= target: +{INCREASE:.0%}"
        self.hold(None if self.rate >= top else round(self.rate, 3), reason)
