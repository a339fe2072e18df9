"""Faults on a timeline in a real fabric (issue 49): a link down, then at half its rate,
each on time and for its length; checked by the kernel's own counters of the link's port
(HTB's bytes, which the queue poller reads) and by the ring's op times."""

from __future__ import annotations

import polars as pl
import pytest

import labkit
from labkit.model import scenario
from labkit.model.paths import scenario_file
from tests import ping
from tests.leaks import assert_no_leaks

DOC = {
    "name": "events",
    "defaults": {"link": {"rate_mbps": 100, "mtu": 1500, "buffer_kb": 256}},
    "fabric": {"routers": ["r1", "r2"], "hosts": {"gpu": {"r1": ["g1"], "r2": ["g2"]}},
               "links": [["r1", "r2"]], "bottlenecks": [["r1", "r2"]]},
    "traffic": [{"kind": "allreduce", "ranks": ["g1", "g2"], "size_bytes": "512KiB",
                 "iterations": 400, "compute_ms": 5}],
    "events": [{"at_s": 1.0, "link": ["r1", "r2"], "down": True, "for_s": 0.5},
               {"at_s": 2.5, "link": ["r2", "r1"], "rate_mbps": 50, "for_s": 1.5}],
}
SLACK_NS = 30_000_000  # a change's time against its plan


def sent_mbps(queue: pl.DataFrame, port: str, start: int, end: int) -> float:
    """What ``port`` sent over [start, end] by HTB's own byte counters (all its classes)."""
    q = (queue.filter((pl.col("port") == port) & pl.col("t_ns").is_between(start, end))
         .group_by("t_ns").agg(pl.col("bytes").sum()).sort("t_ns"))
    span = q["t_ns"][-1] - q["t_ns"][0]
    return (q["bytes"][-1] - q["bytes"][0]) * 8e3 / span


def test_a_link_goes_down_then_runs_at_half_rate_on_time(fabric_ready, tmp_path):
    sc = scenario.parse(DOC, "test_events.py")
    # 5 s: 0.3 s past the last window checked (the rate back at 4 s, then 0.7 s of it)
    run = labkit.run(sc, ["isolated"], duration=5, out=tmp_path / "run")
    ev = run["events"].sort("t_ns")
    assert ev.select("event", "state").rows() == [(0, "start"), (0, "end"), (1, "start"),
                                                  (1, "end")]
    t = ev["t_ns"].to_list()
    assert abs(t[1] - t[0] - 500_000_000) < SLACK_NS  # down for 0.5 s
    assert abs(t[2] - t[0] - 1_500_000_000) < SLACK_NS  # the rate 1.5 s after
    assert abs(t[3] - t[2] - 1_500_000_000) < SLACK_NS
    port = run.summary.policies["isolated"].bottleneck.port
    queue = run["queue"]
    before = sent_mbps(queue, port, t[0] - 700_000_000, t[0] - 50_000_000)
    down = sent_mbps(queue, port, t[0] + 50_000_000, t[1] - 50_000_000)
    half = sent_mbps(queue, port, t[2] + 200_000_000, t[3] - 50_000_000)
    after = sent_mbps(queue, port, t[3] + 100_000_000, t[3] + 700_000_000)
    assert before > 60 and after > 60, (before, after)
    assert down < 1, down  # every packet dropped before the port's queue
    assert 30 < half <= 50 * 1.05, half  # HTB held the port at the new rate
    ops = run["collectives"].group_by("op").agg(pl.col("start_ns").min(),
                                                pl.col("end_ns").max())
    # no op of the ring ended while its link was down
    assert ops.filter(pl.col("end_ns").is_between(t[0] + 20_000_000, t[1])).is_empty()
    assert_no_leaks()


def test_a_straggler_makes_every_rank_wait_and_the_port_sees_the_gaps(fabric_ready, tmp_path):
    """topologies/straggler.yaml: g3's rank computes twice as long (150 ms more a step)
    from 2 s for 3 s. Every iteration then takes a compute phase longer, by the ranks'
    clocks, and the other ranks spend it waiting in bubbles; the bottleneck port's own
    byte counters see the job's rate fall by as much (the same bytes a longer step)."""
    run = labkit.run(scenario.load(scenario_file("straggler")), out=tmp_path / "run")
    ev = run["events"].sort("t_ns")
    assert ev.select("link", "change", "state").rows() == [("g3", "slow", "start"),
                                                          ("g3", "slow", "end")]
    t0, t1 = ev["t_ns"].to_list()
    ops = run["collectives"].group_by("op").agg(
        pl.col("start_ns").min(), pl.col("end_ns").max(),
        pl.col("compute_ns").filter(pl.col("host") == "g3").first().alias("g3"),
        pl.col("bubble_ns").filter(pl.col("host") != "g3").mean().alias("bubble"))
    ops = ops.with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
    slowed = ops.filter(pl.col("start_ns").is_between(t0, t1 - 450_000_000))
    even = ops.filter((pl.col("end_ns") < t0) | (pl.col("start_ns") > t1))
    compute_ms = 3 * 50  # the job's forward and backward
    assert slowed.height >= 4 and even.height >= 8, (slowed, even)
    assert (slowed["g3"] == 2 * compute_ms * 1_000_000).all()
    grown = slowed["ms"].median() - even["ms"].median()
    assert compute_ms * 0.85 <= grown <= compute_ms * 1.15, (grown, slowed, even)
    assert slowed["bubble"].min() >= compute_ms * 0.8 * 1e6, slowed
    port = run.summary.policies["isolated"].bottleneck.port
    queue = run["queue"]
    normal = sent_mbps(queue, port, int(even["start_ns"].min()), t0 - 50_000_000)
    slow = sent_mbps(queue, port, int(slowed["start_ns"].min()), int(slowed["end_ns"].max()))
    expected = even["ms"].median() / slowed["ms"].median()
    assert slow / normal == pytest.approx(expected, rel=0.15), (slow, normal, expected)
    assert_no_leaks()


def test_the_events_table_is_empty_without_events(fabric_ready, tmp_path):
    doc = {k: v for k, v in DOC.items() if k != "events"}
    doc["traffic"] = [{**doc["traffic"][0], "iterations": 5}]
    run = labkit.run(scenario.parse(doc, "test_events.py"), ["isolated"],
                     out=tmp_path / "run")
    assert run["events"].is_empty()


@pytest.mark.parametrize("at_s", [7.0])
def test_an_event_after_the_runs_end_is_refused_before_anything_is_built(at_s, tmp_path):
    doc = {**DOC, "events": [{"at_s": at_s, "link": ["r1", "r2"], "down": True}]}
    with pytest.raises(scenario.ScenarioError, match=r"events\[0\]\.at_s"):
        labkit.run(scenario.parse(doc, "test_events.py"), ["isolated"], duration=6,
                   out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_links_delay_changes_on_time_as_ping_sees_it(fabric_ready, tmp_path):
    """A link with no delay of its own takes 5 ms each way for a second: ping across it
    (a command entry, its own clock) sees its RTT 10 ms longer for that second only."""
    doc = {**DOC, "events": [{"at_s": 1.0, "link": ["r1", "r2"], "delay_ms": 5,
                              "for_s": 1.0}],
           "traffic": [{**DOC["traffic"][0], "size_bytes": "4KiB", "iterations": 200,
                        "compute_ms": 20},  # a light ring: ping queues behind nothing
                       {"kind": "command", "name": "ping", "host": "g1",
                        "run": "ping -n -i 0.02 -c 150 {g2}"}]}
    run = labkit.run(scenario.parse(doc, "test_events.py"), ["fifo"], duration=4,
                     out=tmp_path / "run")  # isolated runs the ring alone, without commands
    out = (run.path / "agents/fifo/commands/ping.out").read_text()
    rtts = ping.rtts_ms(out)
    base = sorted(rtts)[len(rtts) // 4]  # the link without its delay
    longer = [r for r in rtts if 9.5 <= r - base <= 12]
    assert 35 <= len(longer) <= 55, (base, rtts)  # a second of pings every 20 ms
    first = next(i for i, r in enumerate(rtts) if r - base >= 9.5)
    assert all(r - base < 5 for r in rtts[:first]) and rtts[-1] - base < 5, rtts
    assert run["events"]["state"].to_list() == ["start", "end"]
    assert_no_leaks()
