"""``proactive``: spike prevention from the rhythm of training, learned by watching.

It sees only the fabric telemetry (the vip lane's bytes through the bottleneck,
``telemetry_delay_ms`` old) and no hint from the job. A burst starts when the vip
lane's rate rises past a tenth of the bottleneck after at least ``QUIET_MS`` of
quiet and ends when it stays below that for as long. From the last bursts it
learns the period (median gap between starts) and the length (median burst);
storage is held to ``busy_share`` of the bottleneck from ``lead_ms`` before the
next predicted start until the predicted end, and while a burst is seen going
on. Each prediction is scored when its burst really starts (prediction error).
"""

from __future__ import annotations

import statistics

from labkit.control.base import Controller

ACTIVE = 0.10  # of the bottleneck's rate: the vip lane is busy above this
QUIET_MS = 20  # a burst ends after this long below ACTIVE (and needs it before it starts)
LEARN_FROM = 3  # bursts seen before predicting
HISTORY = 6


class Proactive(Controller):
    name = "proactive"

    def __init__(self, plant):
        super().__init__(plant)
        self.last_sample: tuple[int, int] | None = None  # (t_ns, vip bytes) of the feed
        self.active_since: int | None = None
        self.last_active = 0
        self.starts: list[int] = []
        self.lengths: list[int] = []
        self.predicted: int | None = None  # the next start, as predicted
        self.errors_ns: list[int] = []

    @property
    def prediction_error_ms(self) -> float | None:
        return statistics.mean(abs(e) for e in self.errors_ns) / 1e6 if self.errors_ns else None

    def _observe(self, now_ns: int) -> None:
        """Follow the vip lane's rate through the newest telemetry: bursts start, end."""
        views = self.plant.feed.view(now_ns)
        if not views:
            return
        t = max(v.t_ns for v in views.values())
        vip = sum(v.vip_bytes for v in views.values())
        prev, self.last_sample = self.last_sample, (t, vip)
        if prev is None or t <= prev[0]:
            return
        mbps = (vip - prev[1]) * 8e3 / (t - prev[0])
        quiet_ns = QUIET_MS * 1_000_000
        if mbps >= ACTIVE * self.plant.bottleneck_mbps:
            if self.active_since is None and t - self.last_active >= quiet_ns:
                self._started(prev[0])
            if self.active_since is None:
                self.active_since = prev[0]
            self.last_active = t
        elif self.active_since is not None and t - self.last_active >= quiet_ns:
            self.lengths = (self.lengths + [self.last_active - self.active_since])[-HISTORY:]
            self.active_since = None

    def _started(self, t: int) -> None:
        if self.predicted is not None:
            self.errors_ns.append(t - self.predicted)
        self.starts = (self.starts + [t])[-HISTORY:]
        self.predicted = None
        if len(self.starts) >= LEARN_FROM and self.lengths:
            period = statistics.median(b - a for a, b in zip(self.starts, self.starts[1:],
                                                               strict=False))
            self.predicted = t + int(period)

    def step(self, now_ns: int) -> None:
        self._observe(now_ns)
        spec = self.plant.spec
        busy = spec.busy_share * self.plant.bottleneck_mbps
        if self.active_since is not None:
            self.hold(busy, "vip burst under way")
            return
        if self.predicted is not None and self.lengths:
            length = statistics.median(self.lengths)
            lead = int((spec.lead_ms + spec.telemetry_delay_ms) * 1e6)
            if self.predicted - lead <= now_ns < self.predicted + length:
                ahead_ms = (self.predicted - now_ns) / 1e6
                self.hold(busy, f"vip burst predicted in {ahead_ms:.0f} ms")
                return
        self.hold(None, "no vip burst seen or predicted")
