"""Several jobs sharing the fabric (docs/jobs.md): each job's part of a policy's summary
and, across policies, its slowdowns against the job alone (``isolated``) and against the
jobs together without storage (``together``).

Every figure of a job is over the part of the policy's window in which all the jobs ran:
from its start to the end of the job that finished first (``isolated`` runs them one
after another: there each job's whole run). Under ``job-priority`` it starts at the first
ranking (the jobs are fair until then, while it learns; how long that took is reported),
past each job's first op begun after it (its ranks began it as each ended the op before,
slowed while it learned): the figures are the policy's, not its learning's. A job's rows
are its hosts' (labkit's jobs do not share hosts); its packets at the bottleneck are
those carrying its DSCP, which the kernel counted apart (``job_lanes``; the
``job_sojourn`` histograms, over the policy's whole run).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace

import polars as pl

from labkit.analysis.windows import counter_delta, num, op_times, quantile
from labkit.analysis.workloads import allreduce, job, program
from labkit.model.abi import HIST_BUCKETS
from labkit.model.summary import JobAtBottleneck, Jobs, PolicySummary, SharedJob, Workload
from labkit.model.summary_meta import JobMeta, SummaryMeta

INF = 2**63 - 1  # no end: every op
BASES = ("isolated", "together")  # the job alone; the jobs together without storage


def shared_end(collectives: pl.DataFrame, hosts: Iterable[Collection[str]]) -> int:
    """When the first job to finish ended its last op (each job's rows are its ``hosts``'):
    each job ran until then."""
    ends = [collectives.filter(pl.col("host").is_in(list(h)))["end_ns"].max() for h in hosts]
    return min((int(num(e)) for e in ends if e is not None), default=INF)


@dataclass(frozen=True)
class SharedSpan:
    """The part of a policy's window its jobs' figures are over: from ``first`` (the
    policy's start, or ``ranked``, job-priority's first ranking) to ``end`` (when the
    first job to finish ended; None under ``isolated``, where each job ran alone)."""

    first: int
    end: int | None
    ranked: int | None


def shared_span(collectives: pl.DataFrame, job_ranks: pl.DataFrame,
                hosts: Iterable[Collection[str]], policy: str, start: int) -> SharedSpan:
    """The :class:`SharedSpan` of ``policy`` (its own rows of ``collectives`` and
    ``job_ranks``; each job's ``hosts``; ``start``: its window's start)."""
    end = None if policy == "isolated" else shared_end(collectives, hosts)
    ranked = int(num(job_ranks["t_ns"].min())) if job_ranks.height else None
    return SharedSpan(first=ranked or start, end=end, ranked=ranked)


def counted_ops(collectives: pl.DataFrame, hosts: Collection[str], span: SharedSpan,
                warmup: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One job's ops that count (one row per op across its ranks, :func:`op_times`): past a
    program's ``warmup`` iterations, those that began (at their first rank) in the span,
    and after a ranking not the first of them (its ranks began it as each ended the op
    before, slowed while it learned); and its ranks' rows of those ops."""
    rows = collectives.filter(pl.col("host").is_in(list(hosts)) & (pl.col("op") >= warmup))
    ops = op_times(rows).filter((pl.col("start_ns") >= span.first)
                                & (pl.col("start_ns") < (span.end or INF)))
    if span.ranked:
        ops = ops.filter(pl.col("op") > pl.col("op").min())
    return ops, rows.filter(pl.col("op").is_in(ops["op"].implode()))


def iteration_ms(kind: str, ops: pl.DataFrame, compute_ms: float) -> pl.Series:
    """A job's iterations (ms) from its ops (:func:`counted_ops`): a training job's or a
    program's op is its iteration (``kind`` job or program); an All-Reduce's runs from
    its op's start to the next one's (its op, its compute of ``compute_ms``, and whatever
    put the next one off: an ``interleave`` shift), the last its op and compute."""
    if kind in ("job", "program"):
        return ops["ms"]
    ordered = ops.sort("op")
    period = (ordered["start_ns"].shift(-1) - ordered["start_ns"]) / 1e6
    return period.fill_null(ordered["ms"].tail(1) + compute_ms).alias("ms")


def jobs_report(meta: SummaryMeta, policy: str, of: Callable[[str], pl.DataFrame],
                port: str, start: int) -> Jobs:
    """Each job of ``meta.jobs`` under ``policy`` (``of`` gives the policy's tables: each
    job's rows in ``collectives``, the kernel's per-job counters at ``port``,
    ``job-priority``'s rankings, ``interleave``'s shifts), and the GPUs' utilization over
    all of them."""
    collectives, job_ranks = of("collectives"), of("job_ranks")
    span = shared_span(collectives, job_ranks, [j.hosts for j in meta.jobs], policy, start)
    counted = _at_port(of("job_lanes"), of("histograms"), port, span.first, span.end)
    transport, shifts = of("transport"), of("job_shifts")
    each = {}
    for j in meta.jobs:  # a job with no op in the span is left out (sections: a note)
        ops, rows = counted_ops(collectives, j.hosts, span, j.meta.warmup)
        if ops.is_empty():
            continue
        mine = transport.filter(pl.col("host").is_in(j.hosts))
        own = of("program_ops").filter(
            pl.col("host").is_in(j.hosts) & (pl.col("iteration").is_null()
                                             | (pl.col("iteration") >= j.meta.warmup))) \
            if j.kind == "program" else None
        shifted = shifts.filter(pl.col("job") == j.name)["shift_ns"].sum()
        each[j.name] = replace(
            _shared(j, policy, ops, rows, own, counted.get(j.name), port),
            retransmits=int(mine["retransmits"].sum()), timeouts=int(mine["timeouts"].sum()),
            shifted_ms=num(shifted) / 1e6 if policy.partition("+")[0] == "interleave" else None)
    gpus = sum(j.gpus for j in meta.jobs)
    util = sum(each[j.name].gpu_utilization * j.gpus for j in meta.jobs if j.name in each) / gpus
    ranked = span.ranked
    return Jobs(gpu_utilization=util, each=each,
                ranked_after_ms=(ranked - start) / 1e6 if ranked else None,
                rankings=job_ranks["t_ns"].n_unique() if ranked else None)


def _shared(j: JobMeta, policy: str, ops: pl.DataFrame, rows: pl.DataFrame,
            program_ops: pl.DataFrame | None, counted: JobAtBottleneck | None, port: str
            ) -> SharedJob:
    """One job's figures from its ops (one row per op across ranks) and its ranks' rows
    (a program's: and its own ops)."""
    work: Workload
    iteration = iteration_ms(j.kind, ops, j.compute_ms)
    if j.kind in ("job", "program"):
        if j.kind == "job":
            work = job(ops, rows, j.meta, port)
        else:
            if j.meta.program is None or program_ops is None:
                raise ValueError(f"job {j.name}: a program's summary needs what it reported")
            work = program(ops, rows, program_ops, j.meta.program[policy], len(j.hosts),
                           counted.bytes if counted else 0)
        per_rank = rows.select(pl.col("compute_ns") / (pl.col("end_ns") - pl.col("start_ns")))
        util = num(per_rank.to_series().mean()) if rows.height else 0.0
    else:
        if j.meta.size_bytes is None:
            raise ValueError(f"job {j.name}: an All-Reduce's summary needs its size")
        work = allreduce(ops, j.meta.size_bytes, len(j.hosts))
        util = num((j.compute_ms / iteration).mean())
    return SharedJob(workload=work, gpus=j.gpus, iterations=ops.height,
                     iteration_p50_ms=quantile(iteration, 0.5),
                     iteration_p99_ms=quantile(iteration, 0.99), gpu_utilization=util,
                     bottleneck=counted, retransmits=0, timeouts=0)


def _at_port(job_lanes: pl.DataFrame, histograms: pl.DataFrame, port: str, start: int,
             end: int | None) -> dict[str, JobAtBottleneck]:
    """Each job's packets at ``port`` over [start, end] (None: to its last sample)."""
    mine = job_lanes.filter(pl.col("port") == port)
    if mine.is_empty():
        return {}
    last = int(num(mine["t_ns"].max())) if end is None else end
    grown = counter_delta(mine, ["job"], ["enqueued_packets", "enqueued_bytes",
                                          "dropped_packets"], start, last)
    total = num(grown["enqueued_bytes"].sum()) or 1.0
    return {r["job"]: JobAtBottleneck(
        packets=r["enqueued_packets"], bytes=r["enqueued_bytes"],
        dropped_packets=r["dropped_packets"], share=r["enqueued_bytes"] / total,
        sojourn_p99_us=hist_quantile_us(histograms.filter(
            (pl.col("kind") == "job_sojourn") & (pl.col("port") == port)
            & (pl.col("lane") == r["job"])), 0.99))
        for r in grown.iter_rows(named=True)}


def hist_quantile_us(buckets: pl.DataFrame, q: float) -> float | None:
    """The ``q`` quantile (µs) of a log2 histogram's rows (``bucket`` b counts values in
    [2^b, 2^(b+1)) ns), spread evenly over the bucket it falls in; None if empty."""
    counts = [0] * HIST_BUCKETS
    for r in buckets.iter_rows(named=True):
        counts[r["bucket"]] += r["count"]
    total, seen = sum(counts), 0
    for b, n in enumerate(counts):
        if total and n and seen + n >= q * total:
            return 2 ** b * (1 + (q * total - seen) / n) / 1e3
        seen += n
    return None


def with_job_slowdowns(policies: dict[str, PolicySummary]) -> dict[str, PolicySummary]:
    """Each policy's jobs with their slowdowns (iteration p50 and p99) against the same
    job under ``isolated`` and under ``together``, where the run has them."""
    out = {}
    for name, s in policies.items():
        if s.jobs is None:
            out[name] = s
            continue
        each = {}
        for job_name, j in s.jobs.each.items():
            alone, together = (_base(policies.get(base), job_name) for base in BASES)
            each[job_name] = replace(
                j, slowdown_p50=_ratio(j.iteration_p50_ms, alone, 50),
                slowdown_p99=_ratio(j.iteration_p99_ms, alone, 99),
                together_slowdown_p50=_ratio(j.iteration_p50_ms, together, 50),
                together_slowdown_p99=_ratio(j.iteration_p99_ms, together, 99))
        out[name] = replace(s, jobs=replace(s.jobs, each=each))
    return out


def _base(policy: PolicySummary | None, job: str) -> SharedJob | None:
    return policy.jobs.each.get(job) if policy and policy.jobs else None


def _ratio(mine: float, base: SharedJob | None, q: int) -> float | None:
    theirs = (base.iteration_p50_ms if q == 50 else base.iteration_p99_ms) if base else None
    return mine / theirs if theirs else None
