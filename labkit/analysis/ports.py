"""The bottleneck ports' part of a policy's summary: how much of its rate each port used,
which one was busiest, and each lane's rate, drops, sojourn and backlog there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from labkit.analysis.windows import counter_delta, quantile_us
from labkit.model.abi import LANES, RANK_SHIFT
from labkit.model.summary import (
    BottleneckLane,
    PerLane,
)
from labkit.model.summary_meta import SummaryMeta


def utilizations(queue: pl.DataFrame, meta: SummaryMeta, start: int, end: int
                 ) -> dict[str, float]:
    """Each bottleneck port's share of its rate used over [start, end] (one policy's)."""
    seconds = (end - start) / 1e9
    return {r["port"]: r["bytes"] * 8 / seconds / 1e6 / meta.ports[r["port"]].rate_mbps
            for r in port_utilization(queue, start, end).iter_rows(named=True)
            if r["port"] in meta.ports}


def port_utilization(queue: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    """Bytes each port sent over the window (all its classes)."""
    grown = counter_delta(queue, ["port", "classid"], ["bytes"], start, end)
    return grown.group_by("port").agg(pl.col("bytes").sum())


def busiest_port(utilization: dict[str, float], ports: list[str]) -> str:
    """The port of ``ports`` (a scenario's bottleneck ports, in its order) that was busiest;
    of ports equally busy the first, so a run's summary never depends on a table's row
    order; the first port when none sent."""
    return max((p for p in ports if p in utilization), key=utilization.__getitem__,
               default=ports[0])


def lane_rates(lanes: pl.DataFrame, port: str, start: int, end: int) -> pl.DataFrame:
    """One row per lane (in :data:`LANES` order) at ``port`` over [start, end]: Mbit/s the
    classifier sent towards it (offered), its queue accepted (enqueued) and it dropped,
    with the packets accepted and dropped."""
    seconds = (end - start) / 1e9
    counters = ["offered_bytes", "enqueued_bytes", "dropped_bytes", "enqueued_packets",
                "dropped_packets"]
    grown = counter_delta(lanes.filter(pl.col("port") == port), ["lane"], counters, start, end)
    by_lane = {r["lane"]: r for r in grown.iter_rows(named=True)}
    rows = []
    for lane in LANES:
        r = by_lane.get(lane, {})
        rows.append({"lane": lane,
                     **{f"{c[:-6]}_mbps": r.get(c, 0) * 8 / seconds / 1e6 for c in counters[:3]},
                     **{c: int(r.get(c, 0)) for c in counters[3:]}})
    return pl.DataFrame(rows, schema={"lane": pl.Utf8, "offered_mbps": pl.Float64,
                                      "enqueued_mbps": pl.Float64, "dropped_mbps": pl.Float64,
                                      "enqueued_packets": pl.Int64, "dropped_packets": pl.Int64})


def bottleneck_lanes(of: Callable[[str], pl.DataFrame], port: str, senders: Sequence[int],
                     start: int, end: int, ce_marks: dict[str, int]) -> PerLane[BottleneckLane]:
    """Each lane at ``port`` over [start, end] (``of``: one policy's tables): Mbit/s and
    packets its queue accepted, packets it dropped, sojourn p50/p99 and the one-way
    latency p99 (µs) of the packets whose sender's ring hop crosses ``port`` (senders by
    rank), the largest backlog of the queue it waited in, and its ``ce_marks``."""
    rates = {r["lane"]: r for r in lane_rates(of("lanes"), port, start, end).iter_rows(named=True)}
    soj = of("sojourn").filter((pl.col("port") == port) & pl.col("t_ns").is_between(start, end))
    lat = of("latency").filter(pl.col("t_ns").is_between(start, end)
                               & (pl.col("seq") // (1 << RANK_SHIFT)).is_in(list(senders)))
    backlog = max_backlog(of("queue"), port, start, end)

    def lane(name: str) -> BottleneckLane:
        waits = soj.filter(pl.col("lane") == name)["sojourn_ns"]
        r = rates[name]
        return BottleneckLane(
            mbps=r["enqueued_mbps"], packets=r["enqueued_packets"], drops=r["dropped_packets"],
            sojourn_p50_us=quantile_us(waits, 0.5), sojourn_p99_us=quantile_us(waits, 0.99),
            latency_p99_us=quantile_us(lat.filter(pl.col("lane") == name)["latency_ns"], 0.99),
            max_backlog_bytes=backlog[name], ecn_marks=ce_marks.get(name, 0))

    return PerLane.by_lane(lane)


def backlog_series(queue: pl.DataFrame, policy: str, port: str, start: int,
                   end: int) -> pl.DataFrame:
    """``t_ns, backlog_bytes`` at ``port`` under ``policy`` in [start, end], all its classes
    summed (what a packet arriving then would find queued, under any layout)."""
    return (queue.filter((pl.col("policy") == policy) & (pl.col("port") == port)
                         & pl.col("t_ns").is_between(start, end))
            .group_by("t_ns").agg(pl.col("backlog_bytes").sum()).sort("t_ns"))


def max_backlog(queue: pl.DataFrame, port: str, start: int, end: int) -> dict[str, int]:
    """Per lane, the largest backlog of the queue it waited in (the shared one under FIFO)."""
    q = queue.filter((pl.col("port") == port) & pl.col("t_ns").is_between(start, end))
    by_lane = dict(q.group_by("lane").agg(pl.col("backlog_bytes").max()).iter_rows())
    return {lane: int(by_lane.get(lane, by_lane.get("all", 0)) or 0) for lane in LANES}


def sent_series(queue: pl.DataFrame, policy: str, port: str, start: int, end: int,
                window_ns: int = 100_000_000) -> pl.DataFrame:
    """``t_ns, mbps``: what ``port`` sent under ``policy`` in each ``window_ns`` slice of
    [start, end] (its qdisc's own byte counters, all classes), ``t_ns`` the slice's
    middle."""
    q = (queue.filter((pl.col("policy") == policy) & (pl.col("port") == port)
                      & pl.col("t_ns").is_between(start, end))
         .group_by("t_ns").agg(pl.col("bytes").sum()).sort("t_ns")
         .with_columns(((pl.col("t_ns") - start) // window_ns).alias("w")))
    w = q.group_by("w").agg(pl.col("t_ns").min().alias("t0"), pl.col("t_ns").max().alias("t1"),
                            (pl.col("bytes").max() - pl.col("bytes").min()).alias("bytes"))
    w = w.filter(pl.col("t1") > pl.col("t0")).sort("w")
    return w.select(((pl.col("t0") + pl.col("t1")) // 2).alias("t_ns"),
                    (pl.col("bytes") * 8e3 / (pl.col("t1") - pl.col("t0"))).alias("mbps"))


def congested_windows(queue: pl.DataFrame, port: str, start: int, end: int,
                      window_ns: int = 100_000_000) -> pl.DataFrame:
    """Per ``window_ns`` slice of [start, end] in which ``port`` never ran empty: the
    Mbit/s it sent. A congested port that sends below its rate was not emulated
    faithfully (the machine could not keep up)."""
    q = (queue.filter((pl.col("port") == port) & pl.col("t_ns").is_between(start, end))
         .group_by("t_ns").agg(pl.col("bytes").sum(), pl.col("backlog_bytes").sum())
         .sort("t_ns").with_columns(((pl.col("t_ns") - start) // window_ns).alias("w")))
    w = q.group_by("w").agg(
        pl.col("backlog_bytes").min().alias("min_backlog"), pl.len().alias("samples"),
        ((pl.col("bytes").max() - pl.col("bytes").min()) * 8e3
         / (pl.col("t_ns").max() - pl.col("t_ns").min())).alias("mbps"))
    return w.filter((pl.col("min_backlog") > 0) & (pl.col("samples") >= 5))
