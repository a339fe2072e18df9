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

from collections.abc import Callable, Sequence
from dataclasses import replace

import polars as pl

from labkit.model.abi import LANES, RANK_SHIFT
from labkit.model.scenario_spec import LAYOUTS
from labkit.model.summary import (
    AllReduce,
    Bottleneck,
    BottleneckLane,
    Command,
    ControllerReport,
    DctcpFlow,
    DequeueTiming,
    Fidelity,
    Job,
    Lossless,
    MarksAndDrops,
    PausedQueue,
    PauseTimes,
    PerLane,
    PolicySummary,
    PortQueue,
    Program,
    ProgramOp,
    ProgramRank,
    ProgramTraffic,
    Queues,
    ReactionTimes,
    Storage,
    StorageEntry,
    Summary,
    Tcp,
    Transport,
    Workload,
)
from labkit.model.summary_meta import LosslessMeta, SummaryMeta

CPU_BOUND_BUSY = 0.90  # mean machine-wide CPU busy fraction that flags a run as CPU-bound


def op_times(collectives: pl.DataFrame) -> pl.DataFrame:
    """One row per (policy, op): start, end, duration in ms, and chunks found wrong."""
    return (
        collectives.group_by("policy", "op")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max(), pl.len().alias("ranks"),
             pl.col("wrong").sum())
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


def _num(value: object) -> float:
    """A numeric column's aggregate (``mean``, ``sum``, ``max``, ``median``, ``quantile``)
    as a float. polars types an aggregate as any scalar a column can hold; labkit's are
    numbers, and an empty column's is null: an error here, as ``float(None)`` was."""
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"expected a number from a numeric column, got {value!r}")


def _quantile(series: pl.Series, q: float) -> float:
    return _num(series.quantile(q, interpolation="linear"))


def allreduce(ops: pl.DataFrame, size_bytes: int, ranks: int) -> AllReduce:
    ms = ops["ms"]
    mean_s = _num(ms.mean()) / 1e3
    algbw = size_bytes * 8 / mean_s / 1e6
    return AllReduce(ops=ops.height, p50_ms=_quantile(ms, 0.5), p99_ms=_quantile(ms, 0.99),
                     mean_ms=_num(ms.mean()), algbw_mbps=algbw,
                     busbw_mbps=algbw * 2 * (ranks - 1) / ranks, wrong=int(ops["wrong"].sum()))


def job(ops: pl.DataFrame, collectives: pl.DataFrame, meta: SummaryMeta, port: str) -> Job:
    """A training job's iterations: time, compute, exposed communication, bubbles, bytes.

    Exposed communication is the part of a rank's iteration not spent computing. Each
    rank also splits its waits for the network: until the message that ended a wait
    left its sender, it waited for a peer that was not ready (a bubble); after, for
    data on the way (the wire wait: queueing and retransmissions included). Fractions
    are of that rank's own iteration time, averaged over ranks and iterations.
    """
    ms = ops["ms"]
    per_rank = collectives.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("t")).with_columns(
        (pl.col("t") - pl.col("compute_ns")).alias("exposed"))
    if meta.job is None:
        raise ValueError(f"run {meta.run_id}: a job's summary needs the job's spec")
    hop = meta.ports[port].hop
    return Job(
        parallelism=meta.job.parallelism, iterations=ops.height,
        p50_ms=_quantile(ms, 0.5), p99_ms=_quantile(ms, 0.99), mean_ms=_num(ms.mean()),
        compute_ms=_num(per_rank["compute_ns"].mean()) / 1e6,
        exposed_comm_ms=_num(per_rank["exposed"].mean()) / 1e6,
        exposed_comm_fraction=_num((per_rank["exposed"] / per_rank["t"]).mean()),
        bubble_fraction=_num((per_rank["bubble_ns"] / per_rank["t"]).mean()),
        wire_wait_fraction=_num((per_rank["exposed_ns"] / per_rank["t"]).mean()),
        bytes_per_iteration=meta.bytes_per_iteration,
        bottleneck_bytes_per_iteration=meta.bytes_per_iteration.get(hop, 0),
        wrong=int(ops["wrong"].sum()))


def op_instances(program_ops: pl.DataFrame) -> pl.DataFrame:
    """One row per collective op of a program across its ranks (``op``, ``iteration``,
    ``n``, ``start_ns``, ``end_ns``, ``ranks``, ``bytes``, ``ms``): each rank's ops of one
    name are matched in their order within the iteration they name (or, without one, in
    the order of the whole run); an op runs from its first rank's start to its last
    rank's end."""
    numbered = program_ops.sort("start_ns").with_columns(
        pl.col("start_ns").cum_count().over("rank", "op", "iteration").alias("n"))
    return (numbered.group_by("op", "iteration", "n")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max(), pl.len().alias("ranks"),
                 pl.col("bytes").max())
            .with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
            .sort("start_ns"))


def program(ops: pl.DataFrame, collectives: pl.DataFrame, program_ops: pl.DataFrame,
            info: dict, ranks: int, vip_bytes: float) -> Program:
    """The user's program (``kind: program``): its iterations (as ``ops``: one row per
    iteration, first rank's start to last rank's end), compute and exposed communication
    per rank, and each collective it reported, or that its traffic showed (``info``:
    what the run recorded of it; ``vip_bytes``: what the bottleneck's vip lane carried
    over the window). Times in ms: what each rank timed, pooled over the ranks, as the job's
    own clock would give them (from its traffic, where a rank's own span is not seen: from
    the first rank's start to the last rank's end)."""
    per_rank = collectives.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("t"))
    by_rank = info["source"] != "traffic"
    ms = per_rank["t"] / 1e6 if by_rank else ops["ms"]
    by_op = {}
    instances = op_instances(program_ops) if program_ops.height else program_ops
    for name in sorted(set(instances["op"])) if instances.height else ():
        mine = instances.filter(pl.col("op") == name)
        t = ((program_ops.filter(pl.col("op") == name)
              .select((pl.col("end_ns") - pl.col("start_ns")) / 1e6).to_series())
             if by_rank else mine["ms"])
        nbytes = mine["bytes"].drop_nulls()
        mean_ms = _num(t.mean())
        size = int(_num(nbytes.median())) if nbytes.len() else None
        alone = mine.group_by("iteration").len()["len"].max() == 1  # not overlapping others
        busbw = None
        if name == "all_reduce" and size and alone:
            algbw = size * 8 / (mean_ms / 1e3) / 1e6
            busbw = algbw * 2 * (ranks - 1) / ranks
        by_op[name] = ProgramOp(count=mine.height, p50_ms=_quantile(t, 0.5),
                                p99_ms=_quantile(t, 0.99), mean_ms=mean_ms, bytes=size,
                                busbw_mbps=busbw)
    seen = tuple(ProgramRank.from_json(r, f"program.ranks[{i}]")
                 for i, r in enumerate(info["ranks"]))
    timed = ops.height > 0
    return Program(
        name=info["name"], source=info["source"], iterations=ops.height,
        warmup=info.get("warmup", 0),
        p50_ms=_quantile(ms, 0.5) if timed else None,
        p99_ms=_quantile(ms, 0.99) if timed else None,
        mean_ms=_num(ms.mean()) if timed else None,
        compute_ms=_num(per_rank["compute_ns"].mean()) / 1e6 if timed else None,
        exposed_comm_ms=_num(per_rank["exposed_ns"].mean()) / 1e6 if timed else None,
        exposed_comm_fraction=(_num((per_rank["exposed_ns"] / per_rank["t"]).mean())
                               if timed else None),
        ops=by_op,
        bottleneck_bytes_per_iteration=vip_bytes / ops.height if timed else None,
        traffic=ProgramTraffic(packets=sum(r.packets for r in seen),
                               bytes=sum(r.bytes for r in seen),
                               bursts_lost=info["bursts_lost"]),
        cpu_s=sum(r.cpu_s for r in seen), bad_lines=info["bad_lines"], ranks=seen,
        unmeasured=info.get("unmeasured"))


def goodput_mbps(flows: pl.DataFrame, start: int, end: int) -> float:
    if flows.is_empty():
        return 0.0
    grown = counter_delta(flows, ["host", "entry"], ["bytes"], start, end)
    return _num(grown["bytes"].sum()) * 8 / ((end - start) / 1e9) / 1e6


def storage(flows: pl.DataFrame, ios: pl.DataFrame, start: int, end: int) -> Storage:
    """Goodput over the window, in total and per storage entry, with each entry's I/O
    completion times (from arrival, so queueing at the client counts)."""
    entries = {}
    for name in sorted(set(flows["entry"]) | set(ios["entry"])):
        done = ios.filter((pl.col("entry") == name) & pl.col("t_ns").is_between(start, end))
        ms = done["latency_ns"] / 1e6
        entries[name] = StorageEntry(
            goodput_mbps=goodput_mbps(flows.filter(pl.col("entry") == name), start, end),
            ios=done.height,
            io_p50_ms=_quantile(ms, 0.5) if done.height else None,
            io_p99_ms=_quantile(ms, 0.99) if done.height else None)
    return Storage(goodput_mbps=goodput_mbps(flows, start, end), entries=entries)


def transport(ranks: pl.DataFrame) -> Transport:
    """The collective's transport over the whole run, summed over ranks: packets sent
    again by go-back-N, NAKs that asked for it, and timeouts."""
    return Transport(retransmits=int(ranks["retransmits"].sum()),
                     naks=int(ranks["naks"].sum()), timeouts=int(ranks["timeouts"].sum()))


def lossless(pauses: pl.DataFrame, info: LosslessMeta) -> Lossless:
    """A lossless fabric's pauses: how many, how long each port's queue stood paused
    (per port and class), and how fast a pause took effect against the wire time of
    one MTU frame on the bottleneck (``packet_us``)."""
    def times(ns: pl.Series) -> PauseTimes:
        return PauseTimes(p50=_us(ns, 0.5), p99=_us(ns, 0.99))

    reaction = pauses["reaction_ns"]
    paused = (pauses.group_by("port", "classid")
              .agg(pl.len().alias("pauses"), (pl.col("paused_ns").sum() / 1e6).alias("ms"))
              .sort("port", "classid"))
    return Lossless(
        lanes=info.lanes, pauses=pauses.height,
        paused_ms={f"{r['port']} {r['classid']}": PausedQueue(pauses=r["pauses"], ms=r["ms"])
                   for r in paused.iter_rows(named=True)},
        reaction_us=ReactionTimes(p50=_us(reaction, 0.5), p99=_us(reaction, 0.99),
                                  max=_num(reaction.max()) / 1e3 if pauses.height else None),
        resume_us=times(pauses["resume_ns"]), wake_us=times(pauses["wake_ns"]),
        packet_us=info.packet_us, budget_us=info.budget_us)


def late_pauses(bottleneck: Bottleneck, info: Lossless, one_queue: bool) -> list[str]:
    """A note when a lossless lane (any lane, where ports have ``one_queue``) dropped at
    the bottleneck: its pauses came too late."""
    lanes = LANES if one_queue else info.lanes
    dropped = sum(bottleneck.lanes.of(lane).drops for lane in lanes)
    if not dropped:
        return []
    return [f"{dropped} packets of lossless lanes were dropped at {bottleneck.port}: pauses "
            f"came too late there (reaction p99 {info.reaction_us.p99 or 0:.0f} us, max "
            f"{info.reaction_us.max or 0:.0f} us; the headroom above xoff allows "
            f"{info.budget_us:.0f} us)"]


def controller(decisions: pl.DataFrame, control: dict,
               transport: pl.DataFrame) -> ControllerReport:
    """What the controller did: how many decisions, what the hosts' valves let through
    per lane (mean Mbit/s), marked and dropped, how often the held hosts' senders were
    woken and their queue ceilings moved (labkit.kernel.gates), the proactive controller's mean
    absolute error in predicting a burst's start, and the CNPs the collective's
    senders received (each a DCQCN rate cut; 0 unless the scenario turns DCQCN on)."""
    valves = control["host_valves"]
    return ControllerReport(
        decisions=decisions.height, cnps=int(transport["cnps"].sum()),
        mean_rate_mbps=PerLane.by_lane(lambda lane: valves[lane]["mbps"]),
        ce_marked=PerLane.by_lane(lambda lane: valves[lane]["ce_marked"]),
        dropped=PerLane.by_lane(lambda lane: valves[lane]["dropped"]),
        prediction_error_ms=control["prediction_error_ms"], senders=control["senders"],
        marks_and_drops={valve: {lane: MarksAndDrops(ce_marked=c["ce_marked"],
                                                     dropped=c["dropped"])
                                 for lane, c in lanes.items()}
                         for valve, lanes in control["by_valve"].items()},
        wakes=control.get("wakes"), ceiling_changes=control.get("ceiling_changes"))


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


def cpu_busy(cpu: pl.DataFrame, start: int, end: int) -> float | None:
    inside = cpu.filter(pl.col("t_ns").is_between(start, end))
    return _num(inside["busy"].mean()) if inside.height else None


def _us(values: pl.Series, q: float) -> float | None:
    return None if values.is_empty() else _quantile(values, q) / 1e3


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
            sojourn_p50_us=_us(waits, 0.5), sojourn_p99_us=_us(waits, 0.99),
            latency_p99_us=_us(lat.filter(pl.col("lane") == name)["latency_ns"], 0.99),
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


AT_RATE = 0.90  # a congested window must carry this share of the link rate
AT_RATE_WINDOWS = 0.95  # ... in this share of the congested windows
# A port that is late with a dequeue (a gap longer than the packet's wire time while
# packets wait) delays every packet waiting at that moment by the lateness. The recorded
# p99 queueing time W99 is off by more than 10 % when more than 1 in 100 packets met a
# lateness over W99 / 10; a packet arriving at a random moment meets one with the share of
# the port's busy time spent in such latenesses. So a port is flagged when that share,
# over its sampled gaps, exceeds LATE_SHARE_LIMIT. Smaller latenesses add up: a port whose
# gaps summed to (1 + m) times its packets' wire times drained its queue at rate / (1 + m),
# and a packet's queueing time, the sum of the gaps ahead of it, is (1 + m) times the
# configured link's: off by more than 10 % when m exceeds SLOW_LIMIT (docs/data-model.md).
LATE_OF_SOJOURN = 0.10
LATE_SHARE_LIMIT = 0.01
SLOW_LIMIT = 0.10
GAP_MIN_PAIRS = 100  # fewer sampled pairs (a port that hardly queued): no figure


def dequeue_fidelity(gaps: pl.DataFrame, rate_mbps: float, burst_bytes: int,
                     sojourn_p99_us: float | None) -> DequeueTiming:
    """How well a port kept time while packets waited: each sampled gap between two
    dequeues against the first packet's wire time at ``rate_mbps`` (deviation = gap / wire
    time - 1; p50, p90, p99 of its absolute value, and its signed mean). Pairs in the first
    ``burst_bytes`` of a busy period are left out: HTB may send that much back to back from
    tokens saved while idle. ``late_share``: the share of the sampled busy time spent in
    latenesses (gap - wire time) over :data:`LATE_OF_SOJOURN` of ``sojourn_p99_us`` (the
    port's p99 queueing time); ``excess``: the sampled gaps' sum over the wire times' sum,
    minus 1 (the port drained its queue at rate / (1 + excess)); ``flagged`` when
    ``late_share`` exceeds :data:`LATE_SHARE_LIMIT` or ``excess`` :data:`SLOW_LIMIT`."""
    wire_ns = pl.col("bytes") * 8e3 / rate_mbps
    kept = gaps.filter(pl.col("busy_bytes") >= burst_bytes).with_columns(
        (pl.col("gap_ns") / wire_ns - 1).alias("dev"),
        (pl.col("gap_ns") - wire_ns).clip(0).alias("late_ns"))
    if kept.height < GAP_MIN_PAIRS or sojourn_p99_us is None:
        return DequeueTiming(pairs=kept.height, p50=None, p90=None, p99=None, mean=None,
                             excess=None, late_share=None, sojourn_p99_us=sojourn_p99_us,
                             flagged=False)
    dev = kept["dev"].abs()
    over = LATE_OF_SOJOURN * sojourn_p99_us * 1e3
    gap_sum = _num(kept["gap_ns"].sum())
    late_share = _num(kept.filter(pl.col("late_ns") > over)["late_ns"].sum()) / gap_sum
    excess = gap_sum / _num(kept.select(wire_ns.sum()).item()) - 1
    return DequeueTiming(
        pairs=kept.height, p50=_num(dev.quantile(0.5, interpolation="linear")),
        p90=_num(dev.quantile(0.9, interpolation="linear")),
        p99=_num(dev.quantile(0.99, interpolation="linear")), mean=_num(kept["dev"].mean()),
        excess=excess, late_share=late_share, sojourn_p99_us=sojourn_p99_us,
        flagged=late_share > LATE_SHARE_LIMIT or excess > SLOW_LIMIT)


def late_reason(d: DequeueTiming) -> str:
    """Why a flagged port (see :func:`dequeue_fidelity`) did not keep time, in words."""
    if d.excess is not None and d.excess > SLOW_LIMIT:
        return (f"while packets waited it took {d.excess:.0%} longer to send them than "
                f"its rate allows (limit {SLOW_LIMIT:.0%})")
    return (f"it was late by more than {LATE_OF_SOJOURN:.0%} of its p99 queueing time "
            f"({d.sojourn_p99_us:.0f} us) for {d.late_share:.1%} of its busy time "
            f"(limit {LATE_SHARE_LIMIT:.0%})")


def fidelity(tables: dict, policy: str, meta: SummaryMeta, start: int, end: int,
             busy: float | None) -> Fidelity:
    notes = []
    if busy is not None and busy >= CPU_BOUND_BUSY:
        notes.append(f"the machine was {busy:.0%} busy: the run was CPU-bound, so times "
                     "include waiting for a CPU, not only for the network")
    at_rate = True
    queue = tables["queue"].filter(pl.col("policy") == policy)
    for port, info in meta.ports.items():
        w = congested_windows(queue, port, start, end)
        if w.height < 5:
            continue
        share = _num((w["mbps"] >= AT_RATE * info.rate_mbps).mean())
        if share < AT_RATE_WINDOWS:
            at_rate = False
            notes.append(f"{port} had a queue but sent at {AT_RATE:.0%} of its "
                         f"{info.rate_mbps:g} Mbit/s in only {share:.0%} of 100 ms windows")
    dequeue: dict[str, DequeueTiming] = {}
    if "gaps" in tables:  # runs recorded before the gaps were measured have none
        window = pl.col("t_ns").is_between(start, end) & (pl.col("policy") == policy)
        gaps, sojourn = tables["gaps"].filter(window), tables["sojourn"].filter(window)
        for port, info in meta.ports.items():
            waits = sojourn.filter(pl.col("port") == port)["sojourn_ns"]
            dequeue[port] = dequeue_fidelity(
                gaps.filter(pl.col("port") == port), info.rate_mbps, info.burst_bytes,
                _num(waits.quantile(0.99, interpolation="linear")) / 1e3 if len(waits)
                else None)
    for port, d in dequeue.items():
        if d.flagged:
            notes.append(f"{port} did not keep time: {late_reason(d)}: its queueing times "
                         f"may be off by more than {LATE_OF_SOJOURN:.0%}")
    errors = meta.storage_errors.get(policy, [])
    if errors:
        notes.append(f"{len(errors)} storage connection(s) failed, first: {errors[0]}")
    return Fidelity(cpu_bound=busy is not None and busy >= CPU_BOUND_BUSY,
                    generator_limited=False, links_at_rate=at_rate,
                    links_kept_time=not any(d.flagged for d in dequeue.values()),
                    dequeue=dequeue, notes=tuple(notes))


def utilizations(queue: pl.DataFrame, meta: SummaryMeta, start: int, end: int
                 ) -> dict[str, float]:
    """Each bottleneck port's share of its rate used over [start, end] (one policy's)."""
    seconds = (end - start) / 1e9
    return {r["port"]: r["bytes"] * 8 / seconds / 1e6 / meta.ports[r["port"]].rate_mbps
            for r in port_utilization(queue, start, end).iter_rows(named=True)
            if r["port"] in meta.ports}


def _policy(tables: dict, meta: SummaryMeta, policy: str, ops: pl.DataFrame, start: int,
            end: int, port: str) -> PolicySummary:
    """One policy's summary over [start, end], its bottleneck figures at ``port`` (the
    run's: the same port for every policy)."""
    def of(name: str) -> pl.DataFrame:
        return tables[name].filter(pl.col("policy") == policy)

    seconds = (end - start) / 1e9
    util = utilizations(of("queue"), meta, start, end)
    info = meta.ports[port]
    control = meta.control.get(policy)
    lanes = bottleneck_lanes(of, port, info.senders, start, end,
                             control["port_ce_marks"].get(port, {}) if control else {})
    bottleneck = Bottleneck(link=info.link, port=port, rate_mbps=info.rate_mbps,
                            utilization=util.get(port, 0.0), lanes=lanes)
    busy = cpu_busy(of("cpu"), start, end)
    fid = fidelity(tables, policy, meta, start, end, busy)
    workload: Workload
    if meta.workload == "program":
        if meta.program is None:
            raise ValueError(f"run {meta.run_id}: a program's summary needs what it reported")
        workload = program(ops, of("collectives"), of("program_ops"), meta.program[policy],
                           meta.ranks, lanes.vip.mbps * 1e6 / 8 * seconds)
    elif meta.workload == "job":
        workload = job(ops, of("collectives"), meta, port)
    else:
        if meta.size_bytes is None:
            raise ValueError(f"run {meta.run_id}: an All-Reduce's summary needs its size")
        workload = allreduce(ops, meta.size_bytes, meta.ranks)
    notes = list(fid.notes)
    pauses = None
    if ll := meta.lossless:
        pauses = lossless(of("pauses"), ll)
        notes += [*ll.notes.get(policy, ()), *late_pauses(
            bottleneck, pauses, ll.layouts.get(policy) == "fifo")]
    commands = meta.commands.get(policy, ())
    notes += program_notes(workload if isinstance(workload, Program) else None)
    notes += command_notes(policy, commands)
    return PolicySummary(
        workload=workload, storage=storage(of("flows"), of("ios"), start, end),
        bottleneck=bottleneck,
        controller=controller(of("controller"), control, of("transport")) if control else None,
        cpu_busy=busy, cpu_bound=fid.cpu_bound, fidelity=replace(fid, notes=tuple(notes)),
        window_s=seconds, transport=transport(of("transport")), lossless=pauses,
        tcp=tcp(of("dctcp"), meta, start, end) if meta.tcp_control != "default" else None,
        queues=queues(of("queue"), meta, policy, start, end),
        telemetry=meta.telemetry.get(policy),
        lossy_links=meta.loss_drops.get(policy, {}),  # drops on purpose
        commands=commands)


def tcp(windows: pl.DataFrame, meta: SummaryMeta, start: int, end: int) -> Tcp:
    """The TCP senders' congestion control (``transport.tcp``): each lk_dctcp flow's
    windows that ended in the measured window."""
    inside = windows.filter(pl.col("t_ns").is_between(start, end))
    flows = {}
    for (flow,), w in inside.group_by("flow", maintain_order=True):
        flows[str(flow)] = DctcpFlow(
            host=str(w["host"][0]),
            mbps=_num(w["acked_bytes"].sum()) * 8 / ((end - start) / 1e9) / 1e6,
            windows=w.height,
            marked_share=_num((w["marked_bytes"] > 0).mean()),
            alpha_mean=_num(w["alpha"].mean()), cwnd_p50=_num(w["cwnd"].median()))
    return Tcp(control=meta.tcp_control, flows=flows)


def queues(queue: pl.DataFrame, meta: SummaryMeta, policy: str, start: int, end: int
           ) -> Queues | None:
    """The bottleneck ports' queues in full frames over the measured window, and their
    marks (None: the scenario leaves ``transport`` alone)."""
    if meta.tcp_control == "default" and meta.ecn_k_packets is None:
        return None
    marks = meta.ecn_marks.get(policy, {})
    ports = {}
    for ifname, port in meta.ports.items():
        label = f"{port.node}/{ifname}"
        frames = backlog_series(queue, policy, ifname, start, end)["backlog_bytes"]
        frames = frames / port.frame_bytes
        sampled = len(frames) > 0
        counts = marks.get(label, {})
        ports[label] = PortQueue(
            frame_bytes=port.frame_bytes,
            queue_p50_packets=round(_num(frames.median()), 1) if sampled else None,
            queue_p99_packets=round(_quantile(frames, 0.99), 1) if sampled else None,
            ect=counts.get("ect"), ce=counts.get("ce"))
    return Queues(k_packets=meta.ecn_k_packets, ports=ports)


def summarize(tables: dict[str, pl.DataFrame], meta: SummaryMeta) -> Summary:
    """A run's summary (written as its summary.json).

    ``meta`` carries what the tables do not (:class:`SummaryMeta`): scenario name, run id,
    scale factor, the workload's facts, the ring's slowest link, the bottleneck ports and
    what each policy reported besides. A program's first ``meta.warmup`` iterations are
    left out of every figure.
    """
    if warmup := meta.warmup:
        tables = {**tables,
                  "collectives": tables["collectives"].filter(pl.col("op") >= warmup),
                  "program_ops": tables["program_ops"].filter(
                      pl.col("iteration").is_null() | (pl.col("iteration") >= warmup))}
    ops = op_times(tables["collectives"])
    spans = windows(ops)
    if meta.workload == "program" and "bursts" in tables:  # its times not measurable:
        spans = windows(tables["bursts"]) | spans                # its traffic's span
    # the port the tables name, one for the run: the bottleneck port busiest over them all
    used: dict[str, float] = {}
    for p, (start, end) in spans.items():
        for port, share in utilizations(
                tables["queue"].filter(pl.col("policy") == p), meta, start, end).items():
            used[port] = used.get(port, 0.0) + share
    port = busiest_port(used, list(meta.ports))
    policies = {p: _policy(tables, meta, p, ops.filter(pl.col("policy") == p), *spans[p], port)
                for p in meta.policies if p in spans}
    base = policies["isolated"].workload if "isolated" in policies else None
    policies = {p: replace(s, workload=with_slowdowns(s.workload, base))
                for p, s in policies.items()}
    if isinstance(base, AllReduce) and base.busbw_mbps < 0.8 * meta.ring_link_mbps:
        fid = policies["isolated"].fidelity
        policies["isolated"] = replace(policies["isolated"], fidelity=replace(
            fid, generator_limited=True, notes=(
                *fid.notes,
                f"the All-Reduce alone reached {base.busbw_mbps:.0f} Mbit/s of bus bandwidth "
                f"on {meta.ring_link_mbps:g} Mbit/s links: the traffic generator, not the "
                "network, was the limit")))
    return Summary(scenario=meta.scenario, run_id=meta.run_id,
                   scale_factor=meta.scale_factor, policies=policies)


def _ratio(mine: float | None, base: float | None) -> float | None:
    return mine / base if base and mine is not None else None


def with_slowdowns(w: Workload, base: Workload | None) -> Workload:
    """``w`` with its slowdowns: its p50 and p99 over ``base``'s, the same workload under
    ``isolated`` (None without it); a program's collectives over the base's of their name."""
    w = replace(w, slowdown_p50=_ratio(w.p50_ms, base.p50_ms if base else None),
                slowdown_p99=_ratio(w.p99_ms, base.p99_ms if base else None))
    if not isinstance(w, Program):
        return w
    theirs = base.ops if isinstance(base, Program) else {}
    return replace(w, ops={
        name: replace(op, slowdown_p50=_ratio(op.p50_ms, o.p50_ms if (o := theirs.get(name))
                                              else None),
                      slowdown_p99=_ratio(op.p99_ms, o.p99_ms if o else None))
        for name, op in w.ops.items()})


def command_notes(policy: str, commands: tuple[Command, ...]) -> list[str]:
    """A note per command entry that exited with an error before the run ended."""
    return [f"command {c.name} ({c.role}) on {c.host} exited with {c.exit} before the run "
            f"ended: see agents/{policy}/commands/{c.name}"
            f"{'' if c.role == 'run' else '.serve'}.err"
            for c in commands if not c.stopped_by_labkit and c.exit != 0]


def program_notes(p: Program | None) -> list[str]:
    """What a reader of a program's results should know: where its times came from, and
    what labkit could not record."""
    if not p:
        return []
    notes = []
    if p.source == "hook":
        notes.append(f"{p.name} reported no times of its own: labkit timed its collectives "
                     "from outside its code (a start-up hook for PyTorch, MPI's profiling "
                     "interface for MPI; docs/programs.md)")
    if p.source == "traffic" and p.unmeasured:
        notes.append(f"{p.name}'s collectives are not measurable from its traffic: "
                     f"{p.unmeasured}; no times and no slowdown are given for it")
    elif p.source == "traffic":
        notes.append(f"{p.name} reported no times of its own (docs/programs.md): its "
                     "iterations and ops are the bursts of its traffic, as its hosts' NICs "
                     "sent them, cut where the gaps between them are learned to end an op")
    if p.bad_lines:
        notes.append(f"{p.bad_lines} line(s) of {p.name}'s output looked like "
                     "labkit's line protocol but were not valid: they were left out")
    if p.traffic.bursts_lost:
        notes.append(f"{p.traffic.bursts_lost} burst(s) of {p.name}'s traffic "
                     "were not kept (more than the kernel's table holds per host)")
    lingered = [str(r.rank) for r in p.ranks if r.lingered]
    stopped = [str(r.rank) for r in p.ranks if r.stopped_by_labkit and not r.lingered]
    if lingered:
        notes.append(f"rank(s) {', '.join(lingered)} of {p.name} had reported every "
                     "iteration but had not exited 15 s later: labkit stopped them")
    if stopped:
        notes.append(f"rank(s) {', '.join(stopped)} of {p.name} were still running at "
                     "the end of the run's duration: labkit stopped them")
    return notes


# --- frames for figures (labkit.ui.plots) --------------------------------------------------


def part_of_windows(collectives: pl.DataFrame, part: tuple[float, float] = (0.0, 1.0)
                    ) -> dict[str, tuple[int, int]]:
    """Each policy's window cut to ``part`` (fractions from, to of its length)."""
    return {p: (int(s + (e - s) * part[0]), int(s + (e - s) * part[1]))
            for p, (s, e) in windows(op_times(collectives)).items()}


def cdf(values: pl.Series, points: int = 400) -> tuple[list[float], list[float]]:
    """(sorted values, fraction of values at or below each): an empirical CDF, thinned to
    about ``points`` evenly spaced ranks (the first and last kept) for drawing."""
    v = values.drop_nulls().sort()
    n = len(v)
    keep = range(n) if n <= points else sorted({round(i * (n - 1) / (points - 1))
                                                 for i in range(points)})
    return [v[i] for i in keep], [(i + 1) / n for i in keep]


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
    its summary has one) adaptive control; ``isolated`` (the baseline) none."""
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


# --- collective sweeps (``labkit sweep``) ---------------------------------------------------

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


# --- lossless fabrics (labkit.model.lossless) -----------------------------------------------

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
