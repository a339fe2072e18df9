"""The reactive and proactive controllers' decisions, step by step, on a telemetry feed
of made-up samples (the feed itself is labkit's: samples shown ``telemetry_delay_ms``
late). What they decide is what the valves are told: a share of each sender's fair
share."""

from labkit.control.base import Plant
from labkit.control.proactive import Proactive
from labkit.control.reactive import IDLE_MS, Reactive
from labkit.kernel.feed import FabricFeed
from labkit.kernel.tc import FIFO_CLASS, ClassStats
from labkit.model.scenario import ControlSpec

MS = 1_000_000
SPEC = ControlSpec()
PERIOD_MS = 8  # the queue poller's


class Told:
    """Stands for the valves: what each sender was told, in Mbit/s."""

    def __init__(self):
        self.mbps: list[float] = []

    def set(self, host: str, lane: str, reason: str, mbps: float) -> None:
        self.mbps.append(mbps)


def _plant() -> tuple[Plant, FabricFeed, Told]:
    feed = FabricFeed({"p": 100.0}, "fifo", SPEC.telemetry_delay_ms)
    told = Told()
    return Plant(told, {"st1": 100.0}, ["g1"], 100.0, feed, SPEC), feed, told


def _sample(feed: FabricFeed, t_ms: float, vip_so_far: int, backlog: int = 0) -> None:
    classes = [ClassStats(FIFO_CLASS, 0, 0, 0, 0, backlog, backlog // 1500)]
    feed.push(int(t_ms * MS), "p", classes,
              {"vip": (0, vip_so_far), "normal": (0, 0), "low": (0, 0)})


def test_reactive_halves_on_a_vip_queue_and_opens_once_the_vip_lane_is_idle():
    plant, feed, told = _plant()
    c = Reactive(plant)
    _sample(feed, 100, 0)
    _sample(feed, 108, 10_000, backlog=125_000)  # vip arrived and would wait 10 ms
    c.step(114 * MS)
    assert c.share == SPEC.idle_share / 2
    _sample(feed, 116, 20_000)  # vip arrived, no queue: additive increase only
    c.step(122 * MS)
    assert c.share == SPEC.idle_share / 2 + 0.25
    for t in range(124, 124 + IDLE_MS + PERIOD_MS, PERIOD_MS):  # no vip packet after 116
        _sample(feed, t, 20_000)
    c.step((124 + IDLE_MS + SPEC.telemetry_delay_ms) * MS)
    assert c.share == SPEC.idle_share
    assert told.mbps[-1] == SPEC.idle_share * 100.0


def test_reactive_does_not_open_while_a_queue_may_hold_the_vip_packets():
    plant, feed, _ = _plant()
    c = Reactive(plant)
    _sample(feed, 100, 0)
    _sample(feed, 108, 10_000, backlog=125_000)
    c.step(114 * MS)
    for t in range(116, 116 + IDLE_MS + PERIOD_MS, PERIOD_MS):  # no vip packet arrives ...
        _sample(feed, t, 10_000, backlog=250_000)  # ... and a 20 ms queue stands
    c.step((116 + IDLE_MS + SPEC.telemetry_delay_ms) * MS)
    assert c.share == SPEC.idle_share / 2 + 0.25  # the additive increase only


def _bursts(feed: FabricFeed, c: Proactive, until_ms: int, on, step_ms: float = 4) -> list:
    """Samples every 8 ms, vip at 100 Mbit/s while ``on(t)``, and the controller stepping
    every ``step_ms``: (t in ms, share held) after each step."""
    vip, held, t_sample = 0, [], 0
    for i in range(int(until_ms / step_ms)):
        now = i * step_ms
        while t_sample <= now:
            vip += 100_000 if on(t_sample) else 0  # 100 Mbit/s for 8 ms
            _sample(feed, t_sample, vip)
            t_sample += PERIOD_MS
        c.step(int(now * MS))
        held.append((now, c.held))
    return held


def test_proactive_holds_ahead_of_the_rhythm_and_releases_at_the_learned_end():
    plant, feed, _ = _plant()
    c = Proactive(plant)
    # 200 ms bursts every 500 ms, the first at 100 ms
    held = _bursts(feed, c, 2100, lambda t: 100 <= t % 500 < 300)
    assert c.length_ns and abs(c.length_ns / MS - 200) <= PERIOD_MS
    busy = [t for t, share in held if share == SPEC.busy_share]
    late = [t for t, share in held if 1600 <= t < 1900 and share == SPEC.busy_share]
    # the fourth burst (1600-1800 ms): held from lead_ms before it ...
    assert min(late) >= 1600 - SPEC.lead_ms - PERIOD_MS and 1600 - PERIOD_MS in busy
    # ... and released at its learned end, before the telemetry could show the quiet
    assert max(late) < 1800 + SPEC.telemetry_delay_ms


def test_proactive_holds_again_when_a_burst_runs_past_its_learned_end():
    plant, feed, _ = _plant()
    c = Proactive(plant)
    # 200 ms bursts every 500 ms, but the fourth lasts 300 ms
    held = _bursts(feed, c, 2100,
                   lambda t: 100 <= t % 500 < 300 or (1600 <= t < 1900))
    shares = dict(held)
    assert shares[1800] == SPEC.idle_share  # its learned end (1792 ms) has passed: released
    assert shares[1860] == SPEC.busy_share  # a sample after the end shows it going on
