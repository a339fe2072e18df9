"""The workload's part of a policy's summary: an All-Reduce's times and bus bandwidth
(after nccl-tests: algbw x 2(n-1)/n, algbw = size / mean op time), a training job's
iterations, a user's program's ops, and each one's slowdowns against ``isolated``
(the metric under a policy / the same metric under ``isolated`` in the same run).
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from labkit.analysis.windows import num, quantile
from labkit.model.summary import (
    AllReduce,
    Job,
    Program,
    ProgramOp,
    ProgramTraffic,
    Workload,
)
from labkit.model.summary_meta import ProgramReport, SummaryMeta


def allreduce(ops: pl.DataFrame, size_bytes: int, ranks: int) -> AllReduce:
    ms = ops["ms"]
    mean_s = num(ms.mean()) / 1e3
    algbw = size_bytes * 8 / mean_s / 1e6
    return AllReduce(ops=ops.height, p50_ms=quantile(ms, 0.5), p99_ms=quantile(ms, 0.99),
                     mean_ms=num(ms.mean()), algbw_mbps=algbw,
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
        p50_ms=quantile(ms, 0.5), p99_ms=quantile(ms, 0.99), mean_ms=num(ms.mean()),
        compute_ms=num(per_rank["compute_ns"].mean()) / 1e6,
        exposed_comm_ms=num(per_rank["exposed"].mean()) / 1e6,
        exposed_comm_fraction=num((per_rank["exposed"] / per_rank["t"]).mean()),
        bubble_fraction=num((per_rank["bubble_ns"] / per_rank["t"]).mean()),
        wire_wait_fraction=num((per_rank["exposed_ns"] / per_rank["t"]).mean()),
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
            info: ProgramReport, ranks: int, vip_bytes: float) -> Program:
    """The user's program (``kind: program``): its iterations (as ``ops``: one row per
    iteration, first rank's start to last rank's end), compute and exposed communication
    per rank, and each collective it reported, or that its traffic showed (``info``:
    what the run recorded of it; ``vip_bytes``: what the bottleneck's vip lane carried
    over the window). Times in ms: what each rank timed, pooled over the ranks, as the job's
    own clock would give them (from its traffic, where a rank's own span is not seen: from
    the first rank's start to the last rank's end)."""
    per_rank = collectives.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("t"))
    by_rank = info.source != "traffic"
    ms = per_rank["t"] / 1e6 if by_rank else ops["ms"]
    by_op = {}
    instances = op_instances(program_ops) if program_ops.height else program_ops
    for name in sorted(set(instances["op"])) if instances.height else ():
        mine = instances.filter(pl.col("op") == name)
        t = ((program_ops.filter(pl.col("op") == name)
              .select((pl.col("end_ns") - pl.col("start_ns")) / 1e6).to_series())
             if by_rank else mine["ms"])
        nbytes = mine["bytes"].drop_nulls()
        mean_ms = num(t.mean())
        size = int(num(nbytes.median())) if nbytes.len() else None
        alone = mine.group_by("iteration").len()["len"].max() == 1  # not overlapping others
        busbw = None
        if name == "all_reduce" and size and alone:
            algbw = size * 8 / (mean_ms / 1e3) / 1e6
            busbw = algbw * 2 * (ranks - 1) / ranks
        by_op[name] = ProgramOp(count=mine.height, p50_ms=quantile(t, 0.5),
                                p99_ms=quantile(t, 0.99), mean_ms=mean_ms, bytes=size,
                                busbw_mbps=busbw)
    seen = info.ranks
    timed = ops.height > 0
    return Program(
        name=info.name, source=info.source, iterations=ops.height, warmup=info.warmup,
        p50_ms=quantile(ms, 0.5) if timed else None,
        p99_ms=quantile(ms, 0.99) if timed else None,
        mean_ms=num(ms.mean()) if timed else None,
        compute_ms=num(per_rank["compute_ns"].mean()) / 1e6 if timed else None,
        exposed_comm_ms=num(per_rank["exposed_ns"].mean()) / 1e6 if timed else None,
        exposed_comm_fraction=(num((per_rank["exposed_ns"] / per_rank["t"]).mean())
                               if timed else None),
        ops=by_op,
        bottleneck_bytes_per_iteration=vip_bytes / ops.height if timed else None,
        traffic=ProgramTraffic(packets=sum(r.packets for r in seen),
                               bytes=sum(r.bytes for r in seen),
                               bursts_lost=info.bursts_lost),
        cpu_s=sum(r.cpu_s for r in seen), bad_lines=info.bad_lines, ranks=seen,
        unmeasured=info.unmeasured)


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
