import json
from dataclasses import replace

import polars as pl
import pytest

from labkit.analysis import fidelity, frames, ports, summarize, windows
from labkit.model.summary import AllReduce, Fidelity, Summary
from labkit.model.summary_meta import PortMeta, SummaryMeta
from labkit.runs.rundir import SCHEMAS

S = 1_000_000_000  # ns


def frame(name, rows):
    return pl.DataFrame(rows, schema=SCHEMAS[name])


@pytest.fixture
def tables():
    """Two policies, two ranks: isolated ops take 100 ms, fifo ops 200 ms except one of 400."""
    coll, queue, lanes, flows, ios, cpu, soj, lat = [], [], [], [], [], [], [], []
    for policy, durations in (("isolated", [100] * 4), ("fifo", [200, 200, 200, 400])):
        t = 0
        for op, ms in enumerate(durations):
            for rank in range(2):
                coll.append({"policy": policy, "op": op, "rank": rank, "host": f"g{rank}",
                             "start_ns": t + rank * 1_000, "end_ns": t + ms * 1_000_000,
                             "wrong": 0})
            t += ms * 1_000_000
        for k in range(0, 201):  # 0..2 s, 10 ms apart; the port sends 80 Mbit/s
            queue.append({"policy": policy, "t_ns": k * S // 100, "port": "spine1-eth0",
                          "classid": "1:10", "lane": "all", "bytes": k * 100_000,
                          "packets": k * 25, "drops": 0, "overlimits": 0,
                          "backlog_bytes": 100 * k if policy == "fifo" else 0,
                          "backlog_packets": k})
        for k in range(0, 21):  # 0..2 s, 100 ms apart
            ts = k * S // 10
            for i in range(10):  # sojourns 1..10 us (x10 under fifo), latencies 2x that
                scale = 10 if policy == "fifo" else 1
                soj.append({"policy": policy, "t_ns": ts, "port": "spine1-eth0", "lane": "vip",
                            "sojourn_ns": (i + 1) * 1000 * scale, "bytes": 4000,
                            "stamp_ns": ts - 5, "seq": i})
                lat.append({"policy": policy, "t_ns": ts, "lane": "vip", "bytes": 4000,
                            "latency_ns": (i + 1) * 2000 * scale, "stamp_ns": ts - 5,
                            "seq": (1 << 24 if i == 9 else 0) | i})
            for lane, rate in (("vip", 750_000), ("normal", 0), ("low", 250_000)):
                lanes.append({"policy": policy, "t_ns": ts, "port": "spine1-eth0", "lane": lane,
                              "offered_packets": k * 10, "offered_bytes": k * rate,
                              "enqueued_packets": k * 9, "enqueued_bytes": k * rate,
                              "dropped_packets": k if lane == "low" else 0,
                              "dropped_bytes": 0})
            flows.append({"policy": policy, "host": "g1", "entry": "dataset", "t_ns": ts,
                          "bytes": k * 125_000 if policy == "fifo" else 0})
            if policy == "fifo":  # one metadata I/O every 100 ms taking k ms
                ios.append({"policy": policy, "host": "g2", "entry": "metadata", "t_ns": ts,
                            "latency_ns": k * 1_000_000, "bytes": 4096})
            cpu.append({"policy": policy, "t_ns": ts, "busy": 0.95 if policy == "fifo" else 0.4})
    return {"collectives": frame("collectives", coll), "queue": frame("queue", queue),
            "lanes": frame("lanes", lanes), "flows": frame("flows", flows),
            "ios": frame("ios", ios),
            "cpu": frame("cpu", cpu), "transport": frame("transport", []),
            "sojourn": frame("sojourn", soj), "latency": frame("latency", lat),
            "histograms": frame("histograms", [])}


META = SummaryMeta(
    scenario="t", run_id="r", scale_factor=10, policies=("isolated", "fifo"),
    workload="allreduce", size_bytes=1_000_000, ranks=2, ring_link_mbps=100.0,
    ports={"spine1-eth0": PortMeta(link="leaf1-spine1", rate_mbps=100.0, node="spine1",
                                   burst_bytes=0, hop="spine1->leaf1", senders=(0,))})


def test_op_times_span_first_start_to_last_end(tables):
    ops = windows.op_times(tables["collectives"])
    fifo = ops.filter(pl.col("policy") == "fifo")
    assert fifo["ms"].to_list() == [200, 200, 200, 400]
    assert fifo["ranks"].to_list() == [2] * 4


def test_counter_delta_uses_last_sample_at_or_before_each_edge(tables):
    q = tables["queue"].filter(pl.col("policy") == "fifo")
    grown = windows.counter_delta(q, ["port"], ["bytes"], S // 10 + 5, S // 2)
    assert grown["bytes"].to_list() == [4_000_000]  # samples at 0.1 s and 0.5 s


def test_summary(tables):
    s = summarize.summarize(tables, META)
    iso, fifo = s.policies["isolated"], s.policies["fifo"]
    assert isinstance(iso.workload, AllReduce) and isinstance(fifo.workload, AllReduce)
    assert iso.workload.busbw_mbps == pytest.approx(1e6 * 8 / 0.1 / 1e6 * 2 * 1 / 2)
    assert fifo.workload.p50_ms == 200
    assert fifo.workload.p99_ms == pytest.approx(200 + 0.97 * 200)
    assert fifo.workload.slowdown_p50 == pytest.approx(2.0)
    assert iso.workload.slowdown_p99 == pytest.approx(1.0)
    # window 0 .. 1.0 s: the port sent 10 MB -> 80 Mbit/s on a 100 Mbit/s link
    assert fifo.bottleneck.utilization == pytest.approx(0.8)
    assert fifo.bottleneck.link == "leaf1-spine1"
    lanes = fifo.bottleneck.lanes
    assert lanes.vip.mbps == pytest.approx(60.0)
    assert (lanes.low.mbps, lanes.low.packets, lanes.low.drops) == (pytest.approx(20.0), 90, 10)
    assert lanes.normal.packets == 90 and lanes.normal.mbps == 0
    assert fifo.storage.goodput_mbps == pytest.approx(10.0)
    assert iso.storage.goodput_mbps == 0
    # per entry; I/Os that arrived in the window (0 .. 1.0 s: k = 0..10)
    assert fifo.storage.entries["dataset"].goodput_mbps == pytest.approx(10.0)
    meta_io = fifo.storage.entries["metadata"]
    assert (meta_io.ios, meta_io.io_p50_ms, meta_io.goodput_mbps) == (11, 5.0, 0.0)
    assert meta_io.io_p99_ms == pytest.approx(9.9)
    assert fifo.cpu_bound and not iso.cpu_bound
    assert s.scale_factor == 10
    # delays: samples in the window only; latency only from senders crossing the port
    assert lanes.vip.sojourn_p50_us == pytest.approx(55.0)
    assert iso.bottleneck.lanes.vip.sojourn_p99_us == pytest.approx(10.0)
    assert lanes.vip.latency_p99_us == pytest.approx(180.0)  # rank 1 (seq 9) excluded
    assert lanes.low.sojourn_p50_us is None and lanes.low.latency_p99_us is None
    assert lanes.low.max_backlog_bytes == 10_000  # the shared FIFO at the window's end
    # fidelity: a never-empty queue sending 80 Mbit/s on a 100 Mbit/s link is flagged
    assert fifo.fidelity.cpu_bound and not fifo.fidelity.links_at_rate
    assert any("spine1-eth0" in n for n in fifo.fidelity.notes)
    assert iso.fidelity == Fidelity(cpu_bound=False, generator_limited=False,
                                    links_at_rate=True, links_kept_time=True, dequeue={},
                                    notes=())


def test_a_summary_is_written_as_it_reads_back(tables):
    s = summarize.summarize(tables, META)
    doc = s.to_json()
    assert list(doc["policies"]["fifo"]) == [
        "allreduce", "storage", "bottleneck", "controller", "cpu_busy", "cpu_bound", "fidelity",
        "window_s", "transport", "telemetry", "lossy_links", "commands", "culprits"]
    # no lossless; culprits: fifo's one slow op (400 ms against 200), blamed
    assert [(c.from_op, c.to_op) for c in s.policies["fifo"].culprits or ()] == [(3, 3)]
    text = json.dumps(doc, indent=2, default=str)
    again = Summary.from_json(json.loads(text))
    assert again == s and json.dumps(again.to_json(), indent=2, default=str) == text


def test_slowdown_is_null_without_isolated(tables):
    meta = replace(META, policies=("fifo",))
    s = summarize.summarize({k: v.filter(pl.col("policy") == "fifo") for k, v in tables.items()},
                           meta)
    assert s.policies["fifo"].workload.slowdown_p99 is None


def test_dequeue_fidelity_flags_a_port_that_stalls_for_its_queue_times():
    wire = 1000 * 8e3 / 100  # ns: a 1000-byte packet at 100 Mbit/s
    def gaps(stalls: int) -> pl.DataFrame:
        rows = [(i, "p", int(wire * (1.02 if i % 2 else 0.98)), 1000, 50_000) for i in range(1000)]
        rows += [(1000 + i, "p", int(wire + 5e6), 1000, 50_000) for i in range(stalls)]  # +5 ms
        rows += [(9999, "p", 1, 1000, 10)]  # inside the first burst: left out
        return pl.DataFrame(rows, schema=["t_ns", "port", "gap_ns", "bytes", "busy_bytes"],
                            orient="row")

    kept = fidelity.dequeue_fidelity(gaps(0), 100.0, 21_500, 20_000.0)
    assert kept.pairs == 1000 and not kept.flagged and kept.late_share == 0
    assert kept.p50 == pytest.approx(0.02, abs=1e-3) and abs(kept.mean) < 1e-3
    # 10 stalls of 5 ms in ~90 ms of busy time: over 1 % of it late by more than 2 ms
    late = fidelity.dequeue_fidelity(gaps(10), 100.0, 21_500, 20_000.0)
    assert late.flagged and late.late_share == pytest.approx(0.05 / 0.13, rel=0.05)
    assert fidelity.late_reason(replace(late, excess=0.01)).startswith(
        "it was late by more than 10% of its p99 queueing time (20000 us) for 38.2% of its")
    # beside 200 ms queueing times, a tenth of those (20 ms) is not reached, but ten such
    # stalls add up: the port took 62 % longer than its rate to send what waited
    slow = fidelity.dequeue_fidelity(gaps(10), 100.0, 21_500, 200_000.0)
    assert slow.late_share == 0 and slow.flagged
    assert slow.excess == pytest.approx(50 / 80.8, rel=0.01)
    assert fidelity.late_reason(slow).startswith("while packets waited it took 62% longer")
    # one such stall: 6 % longer, within the limit
    one = fidelity.dequeue_fidelity(gaps(1), 100.0, 21_500, 200_000.0)
    assert not one.flagged and one.excess == pytest.approx(5 / 80.08, rel=0.02)
    assert fidelity.dequeue_fidelity(gaps(0).head(50), 100.0, 0, 1.0).p99 is None


def test_the_fidelity_frame_has_a_row_per_port_that_queued():
    from pathlib import Path

    summary = Summary.from_json(json.loads((Path(__file__).parent /
                                            "recorded/checkpoint-burst-20261130/summary.json")
                                           .read_text()))
    frame = frames.fidelity_frame(summary)
    fifo = frame.filter(pl.col("policy") == "fifo")
    assert sorted(fifo["port"]) == ["leaf1-eth4", "spine1-eth0"]
    d = summary.policies["fifo"].fidelity.dequeue["spine1-eth0"]
    row = fifo.filter(pl.col("port") == "spine1-eth0").row(0, named=True)
    assert (row["pairs"], row["dev_p99"], row["kept_time"]) == (d.pairs, d.p99, True)
    assert row["excess"] is None  # recorded before it was
    iso = frame.filter(pl.col("policy") == "isolated")  # no port queued: one row, no port
    assert iso.height == 1 and iso["port"][0] is None
    assert list(frame["policy"].unique(maintain_order=True)) == list(summary.policies)


def test_the_lossless_frame_reads_runs_recorded_before_transport():
    from pathlib import Path

    old = Summary.from_json(json.loads((Path(__file__).parent /
                                        "recorded/bottleneck-20261130/summary.json").read_text()))
    frame = frames.lossless_frame({"old": old})
    assert frame["resends"].to_list() == [None] * 3 and not frame["lossless"].any()
    assert frame["vip_drops"].to_list() == [p.bottleneck.lanes.vip.drops
                                            for p in old.policies.values()]


def test_the_bottleneck_is_the_busiest_port_and_a_tie_goes_to_the_first_named():
    names = ["s1-eth1", "s1-eth0"]  # the scenario's order, not the alphabet's
    assert ports.busiest_port({"s1-eth0": 0.9, "s1-eth1": 0.4}, names) == "s1-eth0"
    assert ports.busiest_port({"s1-eth0": 0.5, "s1-eth1": 0.5}, names) == "s1-eth1"
    assert ports.busiest_port({"s1-eth1": 0.5, "s1-eth0": 0.5}, names) == "s1-eth1"
    assert ports.busiest_port({}, names) == "s1-eth1"
