"""What a run's summary blames for a job's slow phases (labkit.analysis.culprits), from
ranks' rows and port counters made by hand: a straggler, a host's link, the bottleneck;
nothing when no op was slow."""

from __future__ import annotations

import polars as pl

from labkit.analysis.culprits import culprits

MS = 1_000_000
HOSTS = ["g1", "g2", "g3", "g4"]
USUAL = {"compute": 100, "wire": 20, "bubble": 0, "resent": 0}


def _rows(slowed: dict[int, dict[int, dict[str, int]]], ops: int = 12) -> pl.DataFrame:
    """Each rank's row of each op (times in ms): the usual, but as ``slowed`` says for
    op -> rank -> figures; an op lasts its longest rank's compute, wait and bubble."""
    rows, t = [], 0
    for op in range(ops):
        mine = [{**USUAL, "late": 0, **slowed.get(op, {}).get(r, {})} for r in range(4)]
        length = max(m["late"] + m["compute"] + m["wire"] + m["bubble"] for m in mine)
        for r, m in enumerate(mine):
            rows.append({"policy": "isolated", "op": op, "rank": r, "host": HOSTS[r],
                         "start_ns": (t + m["late"]) * MS, "end_ns": (t + length) * MS,
                         "wrong": 0, "compute_ns": m["compute"] * MS,
                         "exposed_ns": m["wire"] * MS, "bubble_ns": m["bubble"] * MS,
                         "resent": m["resent"]})
        t += length + 10
    return pl.DataFrame(rows)


def _queue(drops_at_ms: int | None = None) -> pl.DataFrame:
    """The bottleneck port's counters every 50 ms: drops once, at ``drops_at_ms``."""
    rows, dropped = [], 0
    for t in range(0, 3000, 50):
        dropped += 40 if drops_at_ms is not None and t == drops_at_ms else 0
        rows.append({"policy": "isolated", "t_ns": t * MS, "port": "leaf1-eth4",
                     "classid": "1:1", "drops": dropped, "backlog_bytes": 0})
    return pl.DataFrame(rows)


def test_a_straggler_is_named_with_the_others_bubbles():
    slow = {op: {2: {"compute": 200}, **{r: {"bubble": 100} for r in (0, 1, 3)}}
            for op in (5, 6, 7)}
    (c,) = culprits(_rows(slow), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.from_op, c.to_op, c.kind, c.name) == (5, 7, "rank", "g3")
    assert c.slowdown > 1.5 and c.lost_ms > 0 and "g3 computed" in c.evidence


def test_a_late_start_is_a_stragglers_too():
    """An All-Reduce's compute is between its ops: the straggler begins them late."""
    slow = {op: {1: {"late": 100}, **{r: {"bubble": 100} for r in (0, 2, 3)}}
            for op in (3, 4)}
    (c,) = culprits(_rows(slow), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("rank", "g2")


def test_a_slow_link_is_named_by_the_two_ranks_whose_data_waited_on_the_wire():
    """g3's link slows the data into g3 (from g2) and into g4 (from g3)."""
    slow = {op: {2: {"wire": 120}, 3: {"wire": 110}, 0: {"bubble": 90}, 1: {"bubble": 90}}
            for op in (4, 5, 6, 8)}  # 7 is not slow, but between two that are
    (c,) = culprits(_rows(slow), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.from_op, c.to_op, c.kind, c.name) == (4, 8, "link", "g3")
    assert "into g3 and g4" in c.evidence


def test_the_ring_wraps_around():
    slow = {op: {3: {"wire": 120}, 0: {"wire": 120}} for op in (4, 5)}
    (c,) = culprits(_rows(slow), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("link", "g4")


def test_drops_at_the_bottleneck_blame_it_first():
    slow = {op: {2: {"wire": 120}, 3: {"wire": 110}} for op in (4, 5)}
    rows = _rows(slow)
    during = int(rows.filter(pl.col("op") == 4)["start_ns"].min()) // MS + 40
    (c,) = culprits(rows, _queue(drops_at_ms=during - during % 50 + 50), "leaf1-eth4",
                    "leaf1-spine1")
    assert (c.kind, c.name) == ("bottleneck", "leaf1-spine1")
    assert "dropped 40 packets" in c.evidence


def test_nothing_is_blamed_when_no_op_was_slow_or_every_op_was():
    assert culprits(_rows({}), _queue(), "leaf1-eth4", "leaf1-spine1") == ()
    every = {op: {0: {"compute": 300}} for op in range(12)}
    assert culprits(_rows(every), _queue(), "leaf1-eth4", "leaf1-spine1") == ()
    assert culprits(_rows({}).clear(), _queue(), "leaf1-eth4", "leaf1-spine1") == ()


def test_a_link_past_the_hosts_own_is_named_as_the_path_between_two_ranks():
    """Only the data from g2 into g3 was late (a spine link on its way): not g2's link."""
    slow = {op: {2: {"wire": 120}, 0: {"bubble": 90}, 3: {"bubble": 90}} for op in (4, 5)}
    (c,) = culprits(_rows(slow), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("path", "g2->g3")
    assert "not either's own" in c.evidence


def test_a_lossy_link_whose_timeouts_fell_one_way_is_named_by_its_losses_both_ways():
    """g3's link lost packets both ways, but only the data into g3 met long timeouts:
    g2 and g3 both sent packets again, so it is g3's link, not the path from g2. A path
    whose losses only g2 resent stays a path. g3 may send far fewer again than g2 (a
    real run of a 3 % loss: 771 and 174 an op)."""
    def lossy(g2_resent: int, g3_resent: int) -> pl.DataFrame:
        return _rows({op: {1: {"resent": g2_resent}, 2: {"wire": 300, "resent": g3_resent},
                           3: {"wire": 25}} for op in (4, 5)})
    (c,) = culprits(lossy(30, 20), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("link", "g3") and "30 and 20 more packets" in c.evidence
    (c,) = culprits(lossy(771, 174), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("link", "g3")
    (c,) = culprits(lossy(30, 2), _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("path", "g2->g3")


def test_a_stray_resend_does_not_make_a_path_a_link():
    """A slow path (a spine link at a lower rate) whose ranks each resent a packet once:
    not losses both ways."""
    rows = _rows({op: {1: {"resent": 1}, 2: {"wire": 300, "resent": 1}, 3: {"wire": 25}}
                  for op in (4, 5)})
    (c,) = culprits(rows, _queue(), "leaf1-eth4", "leaf1-spine1")
    assert (c.kind, c.name) == ("path", "g2->g3")
