"""The frames of a run whose jobs shared the fabric (docs/jobs.md), for its figures
(:mod:`labkit.ui.plots.shared`) and notebooks, each a polars frame with a fixed schema:
each job's rate and share at the bottleneck over time, each job's iterations as its
summary counts them, and when a policy moved its jobs (rankings, shifts). The jobs are
read from the run's manifest (:func:`labkit.analysis.frames.shared_jobs`), the iterations
defined once, in :mod:`labkit.analysis.jobs`.
"""

from __future__ import annotations

import polars as pl

from labkit.analysis.frames import RecordedRun, shared_jobs
from labkit.analysis.jobs import counted_ops, iteration_ms, shared_span
from labkit.analysis.windows import num, op_times, windows
from labkit.model.abi import LANES

JOB_SHARE_COLUMNS = pl.Schema({"policy": pl.Utf8, "port": pl.Utf8, "job": pl.Utf8,
                               "t_s": pl.Float64, "bytes": pl.Float64, "mbps": pl.Float64,
                               "share": pl.Float64})


def job_shares(run: RecordedRun, policy: str | None = None, bin_ms: float = 50.0
               ) -> pl.DataFrame:
    """Per policy (``policy``, else each whose jobs the kernel counted apart), job and
    ``bin_ms`` bin of the policy's window (``t_s``: the bin's start in seconds from its first
    op) at its bottleneck port: the job's bytes the port accepted (``job_lanes``'
    ``enqueued_bytes``, read linearly between samples), as Mbit/s, and its share of the
    jobs' bytes in the bin (null: none). Where the samples do not reach, no bins."""
    policies = run.summary.policies
    if policy is not None and policy not in policies:
        raise ValueError(f"no policy {policy!r} in this run (it has {', '.join(policies)})")
    spans, step = windows(op_times(run["collectives"])), int(bin_ms * 1e6)
    parts = []
    for name in [policy] if policy else policies:
        port = policies[name].bottleneck.port
        samples = (run["job_lanes"].filter((pl.col("policy") == name) & (pl.col("port") == port))
                   .select("job", "t_ns", pl.col("enqueued_bytes").cast(pl.Float64)).sort("t_ns"))
        if samples.is_empty() or name not in spans:
            continue
        start, end = spans[name]
        lo = max(start, int(num(samples["t_ns"].min())))
        hi = min(end, int(num(samples["t_ns"].max())))
        edges = [lo, *(t for t in range(start, hi, step) if t > lo), hi]
        at = _read_between(samples, pl.DataFrame({"t_ns": edges}))
        parts.append(
            at.sort("job", "t_ns").with_columns(
                (pl.col("total").shift(-1) - pl.col("total")).over("job").alias("bytes"),
                (pl.col("t_ns").shift(-1) - pl.col("t_ns")).over("job").alias("ns"))
            .filter(pl.col("ns") > 0)
            .select(pl.lit(name).alias("policy"), pl.lit(port).alias("port"), "job",
                    ((pl.col("t_ns") - start) / 1e9).alias("t_s"), "bytes",
                    (pl.col("bytes") * 8e3 / pl.col("ns")).alias("mbps"),
                    (pl.col("bytes") / pl.col("bytes").sum().over("t_ns")).alias("share"))
            .with_columns(pl.col("share").fill_nan(None)).sort("t_s", "job"))
    return pl.concat([p.cast(JOB_SHARE_COLUMNS) for p in parts]) if parts else pl.DataFrame(
        schema=JOB_SHARE_COLUMNS)


def _read_between(samples: pl.DataFrame, at: pl.DataFrame) -> pl.DataFrame:
    """Each job's running total (``samples``: ``job, t_ns, enqueued_bytes``, sorted by
    time) at each time of ``at`` (``t_ns``, within the samples' span), read on the straight
    line between the samples either side: ``job, t_ns, total``."""
    before = samples.rename({"t_ns": "t0", "enqueued_bytes": "b0"})
    after = samples.rename({"t_ns": "t1", "enqueued_bytes": "b1"})
    both = (at.join(samples.select("job").unique(), how="cross").sort("t_ns")  # both sorted:
            .join_asof(before, left_on="t_ns", right_on="t0", by="job", strategy="backward",
                       check_sortedness=False)  # polars cannot check it within each job
            .join_asof(after, left_on="t_ns", right_on="t1", by="job", strategy="forward",
                       check_sortedness=False))
    part = (pl.col("t_ns") - pl.col("t0")) / (pl.col("t1") - pl.col("t0"))
    return both.select("job", "t_ns", (pl.col("b0") + pl.when(pl.col("t1") > pl.col("t0"))
                                       .then((pl.col("b1") - pl.col("b0")) * part)
                                       .otherwise(0.0)).alias("total"))


JOB_ITERATION_COLUMNS = pl.Schema({"policy": pl.Utf8, "job": pl.Utf8, "op": pl.Int64,
                                   "iteration_ms": pl.Float64})


def job_iterations(run: RecordedRun) -> pl.DataFrame:
    """Per policy, job and iteration its summary counts (:func:`labkit.analysis.jobs.
    counted_ops`: the part of the window all the jobs ran in), the iteration's time (ms,
    :func:`labkit.analysis.jobs.iteration_ms`): what each job's p50 and p99 are of."""
    jobs, spans = shared_jobs(run.manifest.scenario), windows(op_times(run["collectives"]))
    parts = []
    for policy in (p for p in run.summary.policies if p in spans):
        mine = run["collectives"].filter(pl.col("policy") == policy)
        span = shared_span(mine, run["job_ranks"].filter(pl.col("policy") == policy),
                           [j.hosts for j in jobs], policy, spans[policy][0])
        for j in jobs:
            ops, _ = counted_ops(mine, j.hosts, span, j.warmup)
            parts.append(ops.select(pl.lit(policy).alias("policy"), pl.lit(j.name).alias("job"),
                                    "op").with_columns(
                iteration_ms(j.kind, ops, j.compute_ms).alias("iteration_ms")))
    return pl.concat([p.cast(JOB_ITERATION_COLUMNS) for p in parts]) if parts else \
        pl.DataFrame(schema=JOB_ITERATION_COLUMNS)


JOB_MARK_COLUMNS = pl.Schema({"policy": pl.Utf8, "t_s": pl.Float64, "what": pl.Utf8,
                              "text": pl.Utf8})


def job_marks(run: RecordedRun) -> pl.DataFrame:
    """When a policy moved its jobs, in seconds from its first op: job-priority's
    rankings (``what`` ranking; ``text``: each job's lane, the top lane first) and
    interleave's shifts (``shift``: the job and how long its op was put off)."""
    lane = pl.col("lane").replace_strict({n: i for i, n in enumerate(LANES)}, default=9)
    ranked = (run["job_ranks"].sort("t_ns", lane).group_by("policy", "t_ns", maintain_order=True)
              .agg(pl.format("{} in {}", "job", "lane").str.join(", ").alias("text"))
              .select("policy", "t_ns", pl.lit("ranking").alias("what"), "text"))
    shifts = run["job_shifts"].sort("t_ns").select(
        "policy", "t_ns", pl.lit("shift").alias("what"),
        pl.format("{} +{} ms", "job", (pl.col("shift_ns") / 1e6).round(0).cast(pl.Int64))
        .alias("text"))
    starts = {p: s for p, (s, _) in windows(op_times(run["collectives"])).items()}
    marks = pl.concat([ranked, shifts]).filter(pl.col("policy").is_in(list(starts)))
    return marks.select(
        "policy", ((pl.col("t_ns") - pl.col("policy").replace_strict(starts)) / 1e9)
        .alias("t_s"), "what", "text").cast(JOB_MARK_COLUMNS)
