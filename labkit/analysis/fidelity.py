"""How faithfully a run emulated its fabric (``fidelity`` in summary.json): whether the
machine was CPU-bound, whether congested ports sent at their rate, and whether each
port kept time while packets waited (its dequeue gaps).
"""

from __future__ import annotations

import polars as pl

from labkit.analysis.ports import congested_windows
from labkit.analysis.windows import event_pairs, num, outside
from labkit.model.summary import (
    DequeueTiming,
    Fidelity,
)
from labkit.model.summary_meta import SummaryMeta

CPU_BOUND_BUSY = 0.90  # mean machine-wide CPU busy fraction that flags a run as CPU-bound


def cpu_busy(cpu: pl.DataFrame, start: int, end: int) -> float | None:
    inside = cpu.filter(pl.col("t_ns").is_between(start, end))
    return num(inside["busy"].mean()) if inside.height else None


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
    gap_sum = num(kept["gap_ns"].sum())
    late_share = num(kept.filter(pl.col("late_ns") > over)["late_ns"].sum()) / gap_sum
    excess = gap_sum / num(kept.select(wire_ns.sum()).item()) - 1
    return DequeueTiming(
        pairs=kept.height, p50=num(dev.quantile(0.5, interpolation="linear")),
        p90=num(dev.quantile(0.9, interpolation="linear")),
        p99=num(dev.quantile(0.99, interpolation="linear")), mean=num(kept["dev"].mean()),
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


def _faulted(events: pl.DataFrame | None, policy: str) -> dict[str, list[tuple[int, int]]]:
    """Per link, when a fault of the scenario's timeline had it down or at another rate:
    its port then sends below its own rate on purpose, which says nothing of fidelity."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for began, end in event_pairs(events, policy):
        if began["change"] in ("down", "rate_mbps"):
            spans.setdefault(began["link"], []).append((began["t_ns"], end))
    return spans


def fidelity(tables: dict, policy: str, meta: SummaryMeta, start: int, end: int,
             busy: float | None) -> Fidelity:
    notes = []
    if busy is not None and busy >= CPU_BOUND_BUSY:
        notes.append(f"the machine was {busy:.0%} busy: the run was CPU-bound, so times "
                     "include waiting for a CPU, not only for the network")
    at_rate = True
    queue = tables["queue"].filter(pl.col("policy") == policy)
    faulted = _faulted(tables.get("events"), policy)
    for port, info in meta.ports.items():
        w = congested_windows(outside(queue, faulted.get(info.link, [])), port, start, end)
        if w.height < 5:
            continue
        share = num((w["mbps"] >= AT_RATE * info.rate_mbps).mean())
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
                outside(gaps.filter(pl.col("port") == port), faulted.get(info.link, [])),
                info.rate_mbps, info.burst_bytes,
                num(waits.quantile(0.99, interpolation="linear")) / 1e3 if len(waits)
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
