"""``proactive``: spike prevention from the rhythm of training, learned by watching.

It sees only the fabric telemetry (the vip lane's bytes through the bottleneck,
``telemetry_delay_ms`` old) and no hint from the job. A burst starts when the vip
lane's rate rises past a tenth of the bottleneck and ends once it has stayed below
that for ``QUIET_MS`` — or, once it has lasted nearly its learned length, at its
first quiet sample (activity again within ``QUIET_MS`` resumes the same burst).
From the last bursts it learns the rhythm of training: how long a burst lasts and
how long the quiet between two bursts (the compute) lasts, so the next burst is due
one quiet after the last one ended (the period follows from the two, and the last
end fixes its phase even when bursts stretch under congestion). Storage is held to
``busy_share`` of its fair share from ``lead_ms`` before the predicted start until the
predicted end, and while a burst is seen going on — until it has lasted its learned
length, unless a sample from after that shows it still going on: the telemetry shows
an end a poll and ``telemetry_delay_ms`` late, and a prediction needs no telemetry.
Otherwise to ``idle_share``. Each prediction is scored when its burst really starts
(prediction error).
"""

from __future__ import annotations

import statistics

from labkit.control.base import Controller

SAMPLE_CHECK_MS = 4.0  # acts on each telemetry sample soon after it arrives (half its period)
ACTIVE = 0.10  # of the bottleneck's rate: the vip lane is busy above this
QUIET_MS = 20  # a burst ends after this long below ACTIVE
DUE = 0.85  # a burst this far into its learned length ends at its first quiet sample
LEARN_FROM = 2  # bursts seen before predicting (one quiet between them)
HISTORY = 6


class Proactive(Controller):
    name = "proactive"

    def __init__(self, plant):
        super().__init__(plant, interval_ms=SAMPLE_CHECK_MS)
        self.last_sample: tuple[int, int] | None = None  # (t_ns, vip bytes) of the feed
        self.active_since: int | None = None
        self.last_active = 0
        self.bursts: list[tuple[int, int]] = []  # (start, end) of the last bursts seen
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
        if mbps >= ACTIVE * self.plant.bottleneck_mbps:
            if self.active_since is None:
                if self.bursts and prev[0] - self.bursts[-1][1] < QUIET_MS * 1_000_000:
                    self._resumed()
                else:
                    self._started(prev[0])
            self.last_active = t
        elif self.active_since is not None and (
                t - self.last_active >= QUIET_MS * 1_000_000
                or (len(self.bursts) >= LEARN_FROM
                    and self.last_active - self.active_since >= DUE * self.length_ns)):
            self._ended(self.active_since)

    def _started(self, t: int) -> None:
        if self.predicted is not None:
            self.errors_ns.append(t - self.predicted)
        self.predicted = None
        self.active_since = t

    def _resumed(self) -> None:
        """The last burst ended too soon (a quiet sample inside it): it goes on."""
        self.active_since = self.bursts.pop()[0]
        self.predicted = None

    def _ended(self, since: int) -> None:
        """The burst active since ``since`` is over: learn from it, and predict the next
        one's start."""
        self.bursts = (self.bursts + [(since, self.last_active)])[-HISTORY:]
        self.active_since = None
        if len(self.bursts) >= LEARN_FROM:
            self.predicted = self.last_active + self.quiet_ns

    @property
    def quiet_ns(self) -> int:
        """The learned quiet between one burst's end and the next one's start."""
        return int(statistics.median(b[0] - a[1] for a, b in
                                     zip(self.bursts, self.bursts[1:], strict=False)))

    @property
    def length_ns(self) -> int:
        return int(statistics.median(end - start for start, end in self.bursts))

    def _due_to_end(self, now_ns: int) -> bool:
        """The burst under way has lasted its learned length, and no sample since has seen
        it go on: it is over now, though the telemetry, ``telemetry_delay_ms`` and a poll
        old, cannot show it yet."""
        if self.active_since is None or len(self.bursts) < LEARN_FROM:
            return False
        end = self.active_since + self.length_ns
        return now_ns >= end and self.last_active <= end

    def step(self, now_ns: int) -> None:
        self._observe(now_ns)
        spec = self.plant.spec
        if self.active_since is not None:
            if self._due_to_end(now_ns):
                self.hold(spec.idle_share, "vip burst at its learned end")
            else:
                self.hold(spec.busy_share, "vip burst under way")
            return
        if self.predicted is not None:
            lead = int(spec.lead_ms * 1e6)
            if self.predicted - lead <= now_ns < self.predicted + self.length_ns:
                ahead_ms = (self.predicted - now_ns) / 1e6
                self.hold(spec.busy_share, f"vip burst predicted in {ahead_ms:.0f} ms")
                return
        self.hold(spec.idle_share, "no vip burst seen or predicted")
