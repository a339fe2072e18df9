"""The fabric feed a controller reads: samples shown ``telemetry_delay_ms`` late, and vip
arrivals counted between the samples the controller saw, however many it missed."""

from labkit.kernel.feed import FabricFeed
from labkit.kernel.tc import FIFO_CLASS, ClassStats

MS = 1_000_000


def _push(feed: FabricFeed, t_ms: float, backlog: int, vip_offered: int) -> None:
    classes = [ClassStats(FIFO_CLASS, 0, 0, 0, 0, backlog, backlog // 1500)]
    lanes = {"vip": (0, vip_offered), "normal": (0, 0), "low": (0, 0)}
    feed.push(int(t_ms * MS), "p", classes, lanes)


def test_a_sample_shows_when_its_delay_has_passed():
    feed = FabricFeed({"p": 100.0}, "fifo", delay_ms=5)
    _push(feed, 10, 125_000, 0)
    assert feed.view(14 * MS) == {}
    seen = feed.view(15 * MS)["p"]
    assert (seen.t_ns, seen.backlog_bytes, seen.vip_delay_ns) == (10 * MS, 125_000, 10 * MS)


def test_vip_bytes_count_since_the_sample_seen_before():
    feed = FabricFeed({"p": 100.0}, "fifo", delay_ms=5)
    _push(feed, 0, 0, 1000)
    _push(feed, 8, 0, 1000)
    assert feed.view(13 * MS)["p"].vip_new_bytes == 0
    # two samples between two looks: the vip bytes the first one saw are not lost
    _push(feed, 16, 50_000, 1062)
    _push(feed, 16.3, 50_000, 1062)
    assert feed.view(22 * MS)["p"].vip_new_bytes == 62
    # the same sample looked at again is the same observation
    assert feed.view(23 * MS)["p"].vip_new_bytes == 62
    _push(feed, 24, 0, 1062)
    assert feed.view(30 * MS)["p"].vip_new_bytes == 0
