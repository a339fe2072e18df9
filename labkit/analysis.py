"""Metrics from a run's tables (polars frames in, frames or plain values out).

Definitions (also in docs/data-model.md):

* an op's time runs from the first rank starting it to the last rank finishing it;
* the *window* of a policy runs from its first op's start to its last op's end;
  every rate below (goodput, utilization, lane Mbit/s) is measured over it;
* busbw follows nccl-tests: algbw x 2(n-1)/n for All-Reduce, with algbw =
  size / mean op time;
* slowdown = the metric under a policy / the same metric under ``isolated`` in
  the same run (null when the run has no isolated policy);
* counters are cumulative; a counter's value over the window is its last
  sample at or before the window's end minus its last sample at or before its start.
"""

from __future__ import annotations

import polars as pl

from labkit.scenario import LANES

CPU_BOUND_BUSY = 0.90  # mean machine-wide CPU busy fraction that flags a run as CPU-bound


def op_times(collectives: pl.DataFrame) -> pl.DataFrame:
    """One row per (policy, op): start, end and duration in ms."""
    return (
        collectives.group_by("policy", "op")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max(), pl.len().alias("ranks"))
        .with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
        .sort("policy", "op")
    )


def windows(ops: pl.DataFrame) -> dict[str, tuple[int, int]]:
    w = ops.group_by("policy").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    return {r["policy"]: (r["start_ns"], r["end_ns"]) for r in w.iter_rows(named=True)}


def counter_delta(frame: pl.DataFrame, keys: list[str], columns: list[str], start: int,
                  end: int) -> pl.DataFrame:
    """Per ``keys``, how much each cumulative counter in ``columns`` grew over [start, end]."""
    def at(t: int) -> pl.DataFrame:
        return (frame.filter(pl.col("t_ns") <= t).sort("t_ns").group_by(keys)
                .agg(pl.col(c).last() for c in columns))

    before, after = at(start), at(end)
    joined = after.join(before, on=keys, how="left", suffix="_0").fill_null(0)
    return joined.select(*keys, *[(pl.col(c) - pl.col(f"{c}_0")).alias(c) for c in columns])


def _quantile(series: pl.Series, q: float) -> float:
    return float(series.quantile(q, interpolation="linear"))


def allreduce(ops: pl.DataFrame, size_bytes: int, ranks: int) -> dict:
    ms = ops["ms"]
    mean_s = float(ms.mean()) / 1e3
    algbw = size_bytes * 8 / mean_s / 1e6
    return {"ops": ops.height, "p50_ms": _quantile(ms, 0.5), "p99_ms": _quantile(ms, 0.99),
            "mean_ms": float(ms.mean()), "algbw_mbps": algbw,
            "busbw_mbps": algbw * 2 * (ranks - 1) / ranks}


def goodput_mbps(flows: pl.DataFrame, start: int, end: int) -> float:
    if flows.is_empty():
        return 0.0
    grown = counter_delta(flows, ["host"], ["bytes"], start, end)
    return float(grown["bytes"].sum()) * 8 / ((end - start) / 1e9) / 1e6


def port_utilization(queue: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    """Bytes each port sent over the window (all its classes)."""
    grown = counter_delta(queue, ["port", "classid"], ["bytes"], start, end)
    return grown.group_by("port").agg(pl.col("bytes").sum())


def lane_stats(lanes: pl.DataFrame, port: str, start: int, end: int) -> dict:
    """Per lane at ``port``: Mbit/s and packets its queue accepted, packets it dropped."""
    seconds = (end - start) / 1e9
    grown = counter_delta(lanes.filter(pl.col("port") == port), ["lane"],
                          ["enqueued_packets", "enqueued_bytes", "dropped_packets"], start, end)
    by_lane = {r["lane"]: r for r in grown.iter_rows(named=True)}
    out = {}
    for lane in LANES:
        r = by_lane.get(lane, {})
        out[lane] = {"mbps": r.get("enqueued_bytes", 0) * 8 / seconds / 1e6,
                     "packets": int(r.get("enqueued_packets", 0)),
                     "drops": int(r.get("dropped_packets", 0))}
    return out


def cpu_busy(cpu: pl.DataFrame, start: int, end: int) -> float | None:
    inside = cpu.filter(pl.col("t_ns").is_between(start, end))
    return float(inside["busy"].mean()) if inside.height else None


def summarize(tables: dict[str, pl.DataFrame], meta: dict) -> dict:
    """The summary.json document for a run.

    ``meta`` carries what the tables do not: scenario name, run id, scale factor,
    All-Reduce size and ranks, and per bottleneck port its link name and rate.
    """
    ops = op_times(tables["collectives"])
    spans = windows(ops)
    policies = {}
    for policy in meta["policies"]:
        if policy not in spans:
            continue
        start, end = spans[policy]
        seconds = (end - start) / 1e9
        p_ops = ops.filter(pl.col("policy") == policy)

        def of(name: str, policy: str = policy) -> pl.DataFrame:
            return tables[name].filter(pl.col("policy") == policy)

        sent = port_utilization(of("queue"), start, end)
        util = {r["port"]: r["bytes"] * 8 / seconds / 1e6 / meta["ports"][r["port"]]["rate_mbps"]
                for r in sent.iter_rows(named=True)}
        port = max(util, key=util.get) if util else next(iter(meta["ports"]))
        busy = cpu_busy(of("cpu"), start, end)
        policies[policy] = {
            "allreduce": allreduce(p_ops, meta["size_bytes"], meta["ranks"]),
            "storage": {"goodput_mbps": goodput_mbps(of("flows"), start, end)},
            "bottleneck": {
                "link": meta["ports"][port]["link"], "port": port,
                "rate_mbps": meta["ports"][port]["rate_mbps"],
                "utilization": util.get(port, 0.0),
                "lanes": lane_stats(of("lanes"), port, start, end),
            },
            "cpu_busy": busy,
            "cpu_bound": busy is not None and busy >= CPU_BOUND_BUSY,
            "window_s": seconds,
        }
    base = policies.get("isolated", {}).get("allreduce")
    for p in policies.values():
        ar = p["allreduce"]
        for q in ("p50", "p99"):
            ar[f"slowdown_{q}"] = ar[f"{q}_ms"] / base[f"{q}_ms"] if base else None
    return {"scenario": meta["scenario"], "run_id": meta["run_id"],
            "scale_factor": meta["scale_factor"], "policies": policies}
