"""Frames for figures and notebooks (:mod:`labkit.ui.plots`, notebooks/): one run's, or
several runs' summaries side by side, sweeps, tunings and lossless fabrics, each a polars
frame with a fixed schema; the jobs of a run whose jobs shared the fabric (their frames:
:mod:`labkit.analysis.jobframes`).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import polars as pl

from labkit.analysis.windows import cdf, counter_delta, event_pairs, num, op_times, windows
from labkit.model.abi import LANES, RANK_SHIFT
from labkit.model.manifest import RunManifest
from labkit.model.scenario_spec import JOB_LAYOUTS, LAYOUTS
from labkit.model.summary import (
    AllReduce,
    Job,
    Program,
    Summary,
)


def part_of_windows(collectives: pl.DataFrame, part: tuple[float, float] = (0.0, 1.0)
                    ) -> dict[str, tuple[int, int]]:
    """Each policy's window cut to ``part`` (fractions from, to of its length)."""
    return {p: (int(s + (e - s) * part[0]), int(s + (e - s) * part[1]))
            for p, (s, e) in windows(op_times(collectives)).items()}


def propagation_rtt_ms(links: list[dict], a: str, b: str) -> float:
    """The round trip's propagation delay (ms) between nodes ``a`` and ``b`` along a
    shortest path of ``links`` (a run manifest's ``scenario.fabric.links``: ``a``, ``b``,
    ``delay_ms`` each; a link recorded before delays has none): twice the delays on the
    way, as every delayed link holds each direction alike."""
    near: dict[str, list[tuple[str, float]]] = {}
    for link in links:
        d = float(link.get("delay_ms", 0.0))
        near.setdefault(link["a"], []).append((link["b"], d))
        near.setdefault(link["b"], []).append((link["a"], d))
    seen, frontier = {a: 0.0}, [a]  # breadth first: the path of fewest links
    while frontier:
        after = []
        for n in frontier:
            for m, d in near.get(n, ()):
                if m not in seen:
                    seen[m] = seen[n] + d
                    after.append(m)
        frontier = after
    if b not in seen:
        raise ValueError(f"no path from {a} to {b} in the fabric's links")
    return 2 * seen[b]


EVENT_TEXT = {"down": "{link} down", "rate_mbps": "{link} at {value:g} Mbit/s",
              "loss_percent": "{link} losing {value:g}%", "delay_ms": "{link} {value:g} ms long",
              "slow": "{link} computing {value:g}x"}  # a host's event: its name as the link


def event_spans(events: pl.DataFrame, policy: str, t0: int, start: int, end: int
                ) -> list[tuple[float, float, str, str]]:
    """The faults of ``policy``'s timeline (its ``events`` rows) that overlap [start, end]:
    (from, to in seconds since ``t0``, the change, a label), each start paired with the
    same event's next end (none: it lasted to the end of the run)."""
    return [((b["t_ns"] - t0) / 1e9, (min(e, end) - t0) / 1e9, b["change"],
             EVENT_TEXT[b["change"]].format(link=b["link"], value=b["value"]))
            for b, e in event_pairs(events, policy) if b["t_ns"] < end and e > start]


def straggled_ops(run: RecordedRun) -> tuple[int, int]:
    """The two iterations a job's timeline shows: around the first straggler's start (the
    last iteration the first policy began before it, and the next, slowed), else the
    first two."""
    slowed = run["events"].filter((pl.col("change") == "slow") & (pl.col("state") == "start"))
    if slowed.is_empty():
        return 0, 1
    first = slowed.sort("t_ns").row(0, named=True)
    began = (run["collectives"].filter(pl.col("policy") == first["policy"])
             .group_by("op").agg(pl.col("start_ns").min())
             .filter(pl.col("start_ns") < first["t_ns"]))
    last = int(num(began["op"].max())) if began.height else 0
    return last, last + 1


def lane_sojourns(sojourn: pl.DataFrame, summary: Summary, spans: dict) -> pl.DataFrame:
    """Sampled sojourns (µs) at each policy's bottleneck port within its window:
    ``policy, lane, sojourn_us``."""
    parts = []
    for policy, p in summary.policies.items():
        if policy not in spans:
            continue
        start, end = spans[policy]
        parts.append(sojourn.filter((pl.col("policy") == policy)
                                    & (pl.col("port") == p.bottleneck.port)
                                    & pl.col("t_ns").is_between(start, end))
                      .select("policy", "lane", (pl.col("sojourn_ns") / 1e3).alias("sojourn_us")))
    return pl.concat(parts) if parts else pl.DataFrame(
        schema={"policy": pl.Utf8, "lane": pl.Utf8, "sojourn_us": pl.Float64})


def watched_ports(queue: pl.DataFrame) -> list[str]:
    """The ports whose queues a run sampled, sorted."""
    return queue["port"].unique().sort().to_list()


PORT_BACKLOG_COLUMNS = pl.Schema({"policy": pl.Utf8, "port": pl.Utf8, "backlog_kib": pl.Float64,
                                  "max_kib": pl.Float64, "mbps": pl.Float64,
                                  **{f"{lane}_drops": pl.Int64 for lane in LANES}})


def port_backlogs(queue: pl.DataFrame, lanes: pl.DataFrame, spans: dict[str, tuple[int, int]],
                  ports: list[str], q: float) -> pl.DataFrame:
    """Per policy in ``spans`` (in its order) and port in ``ports``, over the policy's span:
    the backlog (KiB, all classes summed) at the ``q`` quantile of the samples and at most,
    the Mbit/s the port sent and the packets each lane lost there."""
    parts = []
    for policy, (start, end) in spans.items():
        mine = pl.col("policy") == policy
        backlog = (queue.filter(mine & pl.col("port").is_in(ports)
                                & pl.col("t_ns").is_between(start, end))
                   .group_by("port", "t_ns").agg(pl.col("backlog_bytes").sum() / 1024)
                   .group_by("port").agg(
                       pl.col("backlog_bytes").quantile(q, interpolation="linear")
                       .alias("backlog_kib"), pl.col("backlog_bytes").max().alias("max_kib")))
        sent = (counter_delta(queue.filter(mine & pl.col("port").is_in(ports)),
                              ["port", "classid"], ["bytes"], start, end)
                .group_by("port").agg(pl.col("bytes").sum() * 8e3 / max(end - start, 1))
                .rename({"bytes": "mbps"}))
        lost = (counter_delta(lanes.filter(mine & pl.col("port").is_in(ports)),
                              ["port", "lane"], ["dropped_packets"], start, end)
                .group_by("port").agg(pl.col("dropped_packets").filter(pl.col("lane") == lane)
                                      .sum().alias(f"{lane}_drops") for lane in LANES))
        parts.append(backlog.join(sent, on="port", how="left").join(lost, on="port", how="left")
                     .with_columns(pl.lit(policy).alias("policy")).sort("port"))
    return pl.concat([p.select(list(PORT_BACKLOG_COLUMNS)).cast(PORT_BACKLOG_COLUMNS)
                      for p in parts]) if parts else pl.DataFrame(schema=PORT_BACKLOG_COLUMNS)


def allowed_storage(controller: pl.DataFrame, policy: str, start: int, end: int,
                    open_mbps: float, step_ns: int = 5_000_000) -> pl.DataFrame:
    """What the logged valves let storage send (low lane, Mbit/s summed over the valves,
    at most ``open_mbps``) every ``step_ns`` in [start, end): an open valve counts as
    ``open_mbps``, a relayed phase window switches its valve to its busy rate. Only valves
    whose rate changed or that received a window count: windows a job wrote into its own
    host's valve are not logged and do not show."""
    rows = controller.filter((pl.col("policy") == policy) & (pl.col("lane") == "low")
                             & (pl.col("t_ns") < end)).sort("t_ns")
    moved = rows.filter(pl.col("new_mbps").is_not_null() | pl.col("busy_from_ns").is_not_null())
    rows = rows.filter(pl.col("valve").is_in(moved["valve"].unique().to_list()))
    rate: dict[str, float | None] = {}
    busy: dict[str, tuple[int, int, float | None]] = {}
    events = rows.iter_rows(named=True)
    pending = next(events, None)
    out_t, out_mbps = [], []
    for t in range(start, end, step_ns):
        while pending is not None and pending["t_ns"] <= t:
            valve = pending["valve"]
            if pending["busy_from_ns"] is not None:
                busy[valve] = (pending["busy_from_ns"], pending["busy_until_ns"],
                               pending["new_busy_mbps"])
            else:
                rate[valve] = pending["new_mbps"]
            pending = next(events, None)
        total = 0.0
        for valve in sorted(rate.keys() | busy.keys()):  # one order: the same float sum
            b_from, b_until, b_mbps = busy.get(valve, (0, 0, None))
            held = b_mbps if b_mbps is not None and b_from <= t < b_until else rate.get(valve)
            total += open_mbps if held is None else held
        out_t.append(t)
        out_mbps.append(min(total, open_mbps))
    return pl.DataFrame({"t_ns": out_t, "mbps": out_mbps},
                        schema={"t_ns": pl.Int64, "mbps": pl.Float64})


SUMMARY_COLUMNS = {
    "policy": pl.Utf8, "ops": pl.Int64, "p50_ms": pl.Float64, "p99_ms": pl.Float64,
    "slowdown_p50": pl.Float64, "slowdown_p99": pl.Float64, "busbw_mbps": pl.Float64,
    "exposed_comm": pl.Float64, "bubbles": pl.Float64, "bottleneck_mb_per_iter": pl.Float64,
    "storage_mbps": pl.Float64, "bottleneck_used": pl.Float64, "vip_drops": pl.Int64,
    "low_drops": pl.Int64, "cpu_bound": pl.Boolean,
}


def summary_frame(summary: Summary, digits: int | None = None) -> pl.DataFrame:
    """One row per policy of a run's summary: its collective's (or job's) ops or
    iterations, completion times and slowdowns, bus bandwidth (collectives) or exposed
    communication, bubbles and bytes per iteration across the bottleneck (jobs), storage
    goodput, the bottleneck's use and drops per lane. What ``labkit run`` prints and the
    notebooks show (``digits``: floats rounded for display)."""
    rows = []
    for policy, p in summary.policies.items():
        w, b = p.workload, p.bottleneck
        per_iter = None if isinstance(w, AllReduce) else w.bottleneck_bytes_per_iteration
        rows.append({
            "policy": policy, "ops": w.ops if isinstance(w, AllReduce) else w.iterations,
            "p50_ms": w.p50_ms, "p99_ms": w.p99_ms,
            "slowdown_p50": w.slowdown_p50, "slowdown_p99": w.slowdown_p99,
            "busbw_mbps": w.busbw_mbps if isinstance(w, AllReduce) else None,
            "exposed_comm": None if isinstance(w, AllReduce) else w.exposed_comm_fraction,
            "bubbles": w.bubble_fraction if isinstance(w, Job) else None,
            "bottleneck_mb_per_iter": per_iter / 1e6 if per_iter is not None else None,
            "storage_mbps": p.storage.goodput_mbps, "bottleneck_used": b.utilization,
            "vip_drops": b.lanes.vip.drops, "low_drops": b.lanes.low.drops,
            "cpu_bound": p.cpu_bound})
    frame = pl.DataFrame(rows, schema=SUMMARY_COLUMNS)
    return frame if digits is None else frame.with_columns(
        pl.col(pl.Float64).round(digits))


JOBS_COLUMNS = {"policy": pl.Utf8, "job": pl.Utf8, "gpus": pl.Int64, "iterations": pl.Int64,
                "busbw_mbps": pl.Float64,
                "p50_ms": pl.Float64, "p99_ms": pl.Float64, "slowdown_p50": pl.Float64,
                "slowdown_p99": pl.Float64, "together_slowdown_p99": pl.Float64,
                "gpu_utilization": pl.Float64, "gpu_utilization_all": pl.Float64,
                "bottleneck_share": pl.Float64, "bottleneck_drops": pl.Int64,
                "sojourn_p99_us": pl.Float64}


CULPRITS_SCHEMA = {"policy": pl.Utf8, "from_op": pl.Int64, "to_op": pl.Int64,
                   "slowdown": pl.Float64, "lost_ms": pl.Float64, "kind": pl.Utf8,
                   "name": pl.Utf8, "evidence": pl.Utf8}


def culprits_frame(summary: Summary) -> pl.DataFrame:
    """One row per policy and slow phase of the job, with what labkit's summary blames for
    it (``culprits``: from the ranks' records and the bottleneck's counters, never the
    scenario's events)."""
    return pl.DataFrame([{"policy": policy, "from_op": c.from_op, "to_op": c.to_op,
                          "slowdown": c.slowdown, "lost_ms": c.lost_ms, "kind": c.kind,
                          "name": c.name, "evidence": c.evidence}
                         for policy, p in summary.policies.items() for c in p.culprits or ()],
                        schema=CULPRITS_SCHEMA)


def jobs_frame(summary: Summary, digits: int | None = None) -> pl.DataFrame:
    """One row per policy and job of a run whose jobs shared the fabric (none otherwise):
    the job's GPUs, iterations, bus bandwidth (an All-Reduce's), the iterations' p50 and
    p99 and slowdowns against the job alone (and p99's against the jobs together without
    storage), its GPUs' utilization and the
    policy's over all jobs (weighted by GPUs), its share of the jobs' bytes at the
    bottleneck, its packets dropped there and their p99 time in its queue."""
    rows = []
    for policy, p in summary.policies.items():
        for name, j in (p.jobs.each.items() if p.jobs else ()):
            b = j.bottleneck
            rows.append({
                "policy": policy, "job": name, "gpus": j.gpus, "iterations": j.iterations,
                "busbw_mbps": (j.workload.busbw_mbps if isinstance(j.workload, AllReduce)
                               else None),
                "p50_ms": j.iteration_p50_ms, "p99_ms": j.iteration_p99_ms,
                "slowdown_p50": j.slowdown_p50, "slowdown_p99": j.slowdown_p99,
                "together_slowdown_p99": j.together_slowdown_p99,
                "gpu_utilization": j.gpu_utilization,
                "gpu_utilization_all": p.jobs.gpu_utilization if p.jobs else None,
                "bottleneck_share": b.share if b else None,
                "bottleneck_drops": b.dropped_packets if b else None,
                "sojourn_p99_us": b.sojourn_p99_us if b else None})
    frame = pl.DataFrame(rows, schema=JOBS_COLUMNS)
    return frame if digits is None else frame.with_columns(pl.col(pl.Float64).round(digits))


class RecordedRun(Protocol):
    """What the frames of a recorded run read from it (:class:`labkit.runs.rundir.Run`,
    from the layer above): its manifest, summary and tables by name."""

    manifest: RunManifest
    summary: Summary

    def __getitem__(self, table: str) -> pl.DataFrame: ...


class SharedJobEntry(NamedTuple):
    """One of several jobs as its run recorded it: kind (allreduce, job or program), the
    hosts its ranks ran on (its rows in ``collectives``: labkit's jobs do not share hosts)
    an All-Reduce's compute before each op (ms; 0 for the others) and a program's first
    iterations left out of every figure (``warmup``)."""

    name: str
    kind: str
    hosts: tuple[str, ...]
    compute_ms: float
    warmup: int = 0


def port_hops(scenario: dict) -> dict[str, str]:
    """Each port of a recorded run's fabric (its manifest's ``scenario``) by its name,
    as the hop it sends on: ``{"leaf1-eth4": "leaf1→spine1"}`` (a node's ports are
    numbered in its links' order, as labkit.model.topo numbers them)."""
    count: dict[str, int] = {}
    out = {}
    for link in scenario.get("fabric", {}).get("links", ()):
        for node, peer in ((link["a"], link["b"]), (link["b"], link["a"])):
            out[f"{node}-eth{count.get(node, 0)}"] = f"{node}→{peer}"
            count[node] = count.get(node, 0) + 1
    return out


def shared_jobs(scenario: dict) -> tuple[SharedJobEntry, ...]:
    """The jobs of a run whose jobs shared the fabric, from its manifest's ``scenario``
    (its ``jobs`` list, ranks resolved to hosts; a training job's entry has no ``kind``);
    none for a run of one job."""
    return tuple(SharedJobEntry(j["name"], kind := j.get("kind", "job"), tuple(j["ranks"]),
                                float(j.get("compute_ms") or 0.0) if kind == "allreduce"
                                else 0.0, int(j.get("warmup") or 0) if kind == "program"
                                else 0) for j in scenario.get("jobs") or ())


FIDELITY_COLUMNS = {"policy": pl.Utf8, "cpu_busy": pl.Float64, "cpu_bound": pl.Boolean,
                    "generator_limited": pl.Boolean, "links_at_rate": pl.Boolean,
                    "port": pl.Utf8, "pairs": pl.Int64, "dev_p50": pl.Float64,
                    "dev_p90": pl.Float64, "dev_p99": pl.Float64, "excess": pl.Float64,
                    "late_share": pl.Float64, "kept_time": pl.Boolean}


def fidelity_frame(summary: Summary, digits: int | None = None) -> pl.DataFrame:
    """One row per policy and watched port that queued: how faithfully the run emulated
    its fabric (``fidelity`` in summary.json, docs/data-model.md): the machine's busy
    share, whether it was CPU-bound, whether the All-Reduce alone was limited by its
    generator, whether congested ports sent at their rate, and the port's dequeue timing
    (deviation quantiles, ``excess``, ``late_share``; ``kept_time`` false when flagged).
    A policy whose ports never queued has one row with no port."""
    rows = []
    for policy, p in summary.policies.items():
        fid = p.fidelity
        head = {"policy": policy, "cpu_busy": p.cpu_busy, "cpu_bound": fid.cpu_bound,
                "generator_limited": fid.generator_limited, "links_at_rate": fid.links_at_rate}
        rows += [{**head, "port": port, "pairs": d.pairs, "dev_p50": d.p50, "dev_p90": d.p90,
                  "dev_p99": d.p99, "excess": d.excess, "late_share": d.late_share,
                  "kept_time": not d.flagged}
                 for port, d in fid.dequeue.items() if d.p50 is not None] or [head]
    frame = pl.DataFrame(rows, schema=FIDELITY_COLUMNS)
    return frame if digits is None else frame.with_columns(pl.col(pl.Float64).round(digits))


def latency_cdfs(latency: pl.DataFrame, spans: dict[str, tuple[int, int]],
                 lane: str = "vip") -> dict[str, tuple[list[float], list[float]]]:
    """Per policy, the CDF of the one-way latency (µs) of ``lane``'s stamped packets that
    arrived inside the policy's window (sender's stamp to receiver's NIC ingress)."""
    out = {}
    for policy, (start, end) in spans.items():
        x = latency.filter((pl.col("policy") == policy) & (pl.col("lane") == lane)
                           & pl.col("t_ns").is_between(start, end))["latency_ns"] / 1e3
        if x.len():
            out[policy] = cdf(x)
    return out


def job_breakdown(summary: Summary) -> pl.DataFrame:
    """Per policy with a training job (labkit's, or the user's program): mean iteration
    split into compute, waits for data on the wire (a program's exposed communication)
    and bubbles (ms), and bytes per iteration across the bottleneck."""
    rows = []
    for policy, p in summary.policies.items():
        w = p.workload
        if isinstance(w, AllReduce) or w.mean_ms is None:
            continue
        per_iter = w.bottleneck_bytes_per_iteration
        rows.append({"policy": policy, "compute_ms": w.compute_ms,
                     "wire_wait_ms": (w.wire_wait_fraction * w.mean_ms if isinstance(w, Job)
                                      else w.exposed_comm_ms),
                     "bubble_ms": w.bubble_fraction * w.mean_ms if isinstance(w, Job) else 0.0,
                     "bottleneck_mb": per_iter / 1e6 if per_iter is not None else None})
    return pl.DataFrame(rows, schema={"policy": pl.Utf8, "compute_ms": pl.Float64,
                                      "wire_wait_ms": pl.Float64, "bubble_ms": pl.Float64,
                                      "bottleneck_mb": pl.Float64})


PROGRAM_OP_COLUMNS = {"policy": pl.Utf8, "op": pl.Utf8, "count": pl.Int64,
                      "bytes": pl.Int64, "p50_ms": pl.Float64, "p99_ms": pl.Float64,
                      "slowdown_p50": pl.Float64, "slowdown_p99": pl.Float64,
                      "busbw_mbps": pl.Float64}


def program_ops_frame(summary: Summary, digits: int | None = None) -> pl.DataFrame:
    """One row per policy and collective of a user's program (as it reported them, or the
    bursts of its traffic): how many, their size, times, slowdowns and, for a blocking
    All-Reduce, its bus bandwidth."""
    rows = [{"policy": policy, "op": name, "count": o.count, "bytes": o.bytes,
             "p50_ms": o.p50_ms, "p99_ms": o.p99_ms, "slowdown_p50": o.slowdown_p50,
             "slowdown_p99": o.slowdown_p99, "busbw_mbps": o.busbw_mbps}
            for policy, p in summary.policies.items() if isinstance(p.workload, Program)
            for name, o in p.workload.ops.items()]
    frame = pl.DataFrame(rows, schema=PROGRAM_OP_COLUMNS)
    return frame if digits is None else frame.with_columns(pl.col(pl.Float64).round(digits))


def port_senders(sojourn: pl.DataFrame, collectives: pl.DataFrame, policy: str, port: str,
                 start: int, end: int) -> list[str]:
    """Hosts whose stamped collective packets were sampled leaving ``port`` under ``policy``
    in [start, end] (the sender's rank is in each stamp's ``seq``), in rank order."""
    hosts = dict(collectives.filter(pl.col("policy") == policy)
                 .select("rank", "host").unique().iter_rows())
    ranks = (sojourn.filter((pl.col("policy") == policy) & (pl.col("port") == port)
                            & pl.col("t_ns").is_between(start, end) & (pl.col("stamp_ns") > 0))
             .select((pl.col("seq") // (1 << RANK_SHIFT)).alias("rank").unique().sort())
             ["rank"].to_list())
    return [hosts.get(r, f"rank {r}") for r in ranks]


STAGES = {1: "the bottleneck", 2: "priority lanes", 3: "adaptive control"}


def stage_of(policy: str, controlled: bool) -> int | None:
    """Which of the three stages (:data:`STAGES`) a policy of a summary stands for: ``fifo``
    the bottleneck, ``priority`` the lanes, any policy with a controller (``controlled``:
    its summary has one) adaptive control; ``isolated`` (the baseline) none; of the
    policies for several jobs, ``fair`` (priority's lanes) the lanes, the others none."""
    if policy in JOB_LAYOUTS:
        return 2 if policy == "fair" and not controlled else (3 if controlled else None)
    if controlled or policy.rpartition("+")[2] not in LAYOUTS:
        return 3
    return {"fifo": 1, "priority": 2}.get(policy)


def stage_frame(summary: Summary) -> pl.DataFrame:
    """:func:`summary_frame` of the policies that stand for a stage, with their ``stage``
    (1-3), sorted by stage (the summary's order within one)."""
    stages = {policy: stage_of(policy, p.controller is not None)
              for policy, p in summary.policies.items()}
    return (summary_frame(summary)
            .with_columns(pl.col("policy").replace_strict(stages, return_dtype=pl.Int64)
                          .alias("stage"))
            .filter(pl.col("stage").is_not_null())
            .with_row_index("order").sort("stage", "order").drop("order"))


PHASES = ("compute", "sending", "wire_wait", "bubble")

SPAN_PHASES = ("compute", "wire_wait", "bubble")  # the ``phases`` table's; the rest: sending


def _iterations(collectives: pl.DataFrame, policy: str, ops: list[int]) -> pl.DataFrame:
    rows = collectives.filter((pl.col("policy") == policy) & pl.col("op").is_in(ops))
    if rows.is_empty():
        raise ValueError(f"no iteration {ops} under {policy!r} in this run")
    return rows


def iteration_phases(collectives: pl.DataFrame, policy: str, ops: list[int]) -> pl.DataFrame:
    """Per (op, rank) of a training job under ``policy``, for the iterations ``ops``: where
    the rank's iteration ran (``start_ms``, ``end_ms`` from the first of those iterations'
    first start) and how long it spent computing, waiting for data on the wire and in
    bubbles (as recorded), and the rest of it, ``sending``: neither computing nor waiting
    for a message (the rank's loop queuing and sending its own messages)."""
    rows = _iterations(collectives, policy, ops)
    t0 = rows["start_ns"].min()
    return rows.sort("op", "rank").select(
        "op", "rank", "host",
        ((pl.col("start_ns") - t0) / 1e6).alias("start_ms"),
        ((pl.col("end_ns") - t0) / 1e6).alias("end_ms"),
        (pl.col("compute_ns") / 1e6).alias("compute_ms"),
        ((pl.col("end_ns") - pl.col("start_ns") - pl.col("compute_ns") - pl.col("exposed_ns")
          - pl.col("bubble_ns")) / 1e6).alias("sending_ms"),
        (pl.col("exposed_ns") / 1e6).alias("wire_wait_ms"),
        (pl.col("bubble_ns") / 1e6).alias("bubble_ms"))


def phase_spans(collectives: pl.DataFrame, phases: pl.DataFrame, policy: str,
                ops: list[int]) -> pl.DataFrame:
    """The recorded spans (``phases`` table) of the iterations ``ops`` under ``policy``:
    ``op, rank, host, phase`` (:data:`SPAN_PHASES`), ``start_ms, end_ms`` on the time axis
    of :func:`iteration_phases`."""
    t0 = _iterations(collectives, policy, ops)["start_ns"].min()
    return (phases.filter((pl.col("policy") == policy) & pl.col("op").is_in(ops))
            .sort("op", "rank", "start_ns")
            .select("op", "rank", "host", "phase",
                    ((pl.col("start_ns") - t0) / 1e6).alias("start_ms"),
                    ((pl.col("end_ns") - t0) / 1e6).alias("end_ms")))


def summed_spans(iterations: pl.DataFrame) -> pl.DataFrame:
    """For a run recorded before its ops' spans: each iteration's sums
    (:func:`iteration_phases`) laid end to end from its start, in :data:`PHASES` order,
    as spans shaped like :func:`phase_spans` (``sending`` is what lies between them)."""
    spans, start = [], pl.col("start_ms")
    for phase in PHASES:
        end = start + pl.col(f"{phase}_ms")
        if phase in SPAN_PHASES:
            spans.append(iterations.select("op", "rank", "host", pl.lit(phase).alias("phase"),
                                           start.alias("start_ms"), end.alias("end_ms")))
        start = end
    return pl.concat(spans).sort("op", "rank", "start_ms")


SWEEP_COLUMNS = {"sweep": pl.Utf8, "size": pl.Int64, "time_us": pl.Float64,
                 "algbw_mbps": pl.Float64, "busbw_mbps": pl.Float64, "link_mbps": pl.Float64,
                 "retransmits": pl.Int64}


def sweep_frame(sweeps: dict[str, list[dict]]) -> pl.DataFrame:
    """One row per sweep and message size: time, algbw, busbw, the link rate and the
    packets go-back-N resent (``sweeps``: name -> the rows of its sweep.json)."""
    return pl.DataFrame([{"sweep": name, **{c: r[c] for c in list(SWEEP_COLUMNS)[1:]}}
                         for name, rows in sweeps.items() for r in rows], schema=SWEEP_COLUMNS)


def pick_sweeps(sweeps: dict[str, list[dict]], names: list[str],
                sizes: tuple[int, int]) -> dict[str, list[dict]]:
    """The sweeps in ``names`` (in their order), each cut to message sizes in ``sizes``
    (smallest, largest, both included)."""
    return {n: [r for r in sweeps[n] if sizes[0] <= r["size"] <= sizes[1]] for n in names}


def placement_frame(summaries: dict[str, Summary], policy: str = "isolated") -> pl.DataFrame:
    """One training job placed several ways (a run each, named by the keys of
    ``summaries``), under ``policy``: iteration time p50 and its split (as
    :func:`job_breakdown`), and how many times slower each placement is than the fastest."""
    parts = [job_breakdown(s).filter(pl.col("policy") == policy)
             .with_columns(pl.lit(name).alias("placement"),
                           pl.lit(s.policies[policy].workload.p50_ms).alias("p50_ms"))
             for name, s in summaries.items()]
    frame = pl.concat(parts)
    return frame.select("placement", "p50_ms", "compute_ms", "wire_wait_ms", "bubble_ms",
                        "bottleneck_mb",
                        (pl.col("p50_ms") / pl.col("p50_ms").min()).alias("x_fastest"))


def auto_frame(model, sweeps: dict[str, list[dict]]) -> pl.DataFrame:
    """What ``algo: auto`` (``model``, a :class:`labkit.model.autotune.Model`) chooses at each
    size of ``sweeps`` (one per algorithm, measured on the model's fabric), the best one
    measured there, the chosen one's time relative to the best (1.0: it was the best), and
    the model's reason."""
    from labkit.model.autotune import regret

    return pl.DataFrame(regret(model, sweeps)).select("size", "chosen", "best", "relative",
                                                      "reason")


LOSSLESS_COLUMNS = {"run": pl.Utf8, "policy": pl.Utf8, "lossless": pl.Boolean,
                    "vip_drops": pl.Int64, "resends": pl.Int64, "slowdown_p50": pl.Float64,
                    "slowdown_p99": pl.Float64, "pauses": pl.Int64, "reaction_p50_us": pl.Float64,
                    "reaction_max_us": pl.Float64, "frame_us": pl.Float64}


def lossless_frame(summaries: dict[str, Summary], digits: int | None = None) -> pl.DataFrame:
    """One row per run (named by the keys of ``summaries``) and policy: whether its fabric
    was lossless, vip drops at the bottleneck, go-back-N resends (null: recorded before
    they were), the collective's slowdowns, and the pauses with how fast they acted
    against one frame's wire time."""
    rows = []
    for name, summary in summaries.items():
        for policy, p in summary.policies.items():
            w, ll = p.workload, p.lossless
            rows.append({"run": name, "policy": policy, "lossless": ll is not None,
                         "vip_drops": p.bottleneck.lanes.vip.drops,
                         "resends": p.transport.retransmits if p.transport else None,
                         "slowdown_p50": w.slowdown_p50, "slowdown_p99": w.slowdown_p99,
                         "pauses": ll.pauses if ll else 0,
                         "reaction_p50_us": ll.reaction_us.p50 if ll else None,
                         "reaction_max_us": ll.reaction_us.max if ll else None,
                         "frame_us": ll.packet_us if ll else None})
    frame = pl.DataFrame(rows, schema=LOSSLESS_COLUMNS)
    return frame if digits is None else frame.with_columns(pl.col(pl.Float64).round(digits))


def pause_frame(pauses: pl.DataFrame, policy: str, seconds: float) -> pl.DataFrame:
    """Per paused port and the queue that paused it, under ``policy``: pauses, the share of
    the run's ``seconds`` it stood paused, and how fast its pauses acted (µs)."""
    return (pauses.filter(pl.col("policy") == policy)
            .group_by("port", "cause").agg(
                pl.len().alias("pauses"),
                (pl.col("paused_ns").sum() / 1e9 / seconds).alias("paused_share"),
                (pl.col("reaction_ns").median() / 1e3).alias("reaction_p50_us"),
                (pl.col("reaction_ns").max() / 1e3).alias("reaction_max_us"))
            .sort("cause", "port"))


def io_latency_cdfs(ios: dict[str, pl.DataFrame], spans: dict[str, tuple[int, int]],
                    entry: str, policy: str) -> dict[str, tuple[list[float], list[float]]]:
    """Per run (the keys of ``ios``, each a run's ``ios`` table, with its ``policy``'s
    window in ``spans``), the CDF of storage entry ``entry``'s I/O completion times (ms)."""
    out = {}
    for name, frame in ios.items():
        start, end = spans[name]
        ms = frame.filter((pl.col("policy") == policy) & (pl.col("entry") == entry)
                          & pl.col("t_ns").is_between(start, end))["latency_ns"] / 1e6
        if ms.len():
            out[name] = cdf(ms)
    return out
