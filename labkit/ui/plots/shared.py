"""The figures of a run whose jobs shared the fabric (docs/jobs.md): each job's bursts at
the bottleneck over time, a panel per policy (the interleaving picture: under ``fair`` the
jobs' bursts meet, under ``interleave`` they take turns), with job-priority's rankings and
interleave's shifts marked; and each job's iteration times, a CDF per policy beside the
job alone. Training jobs of a one-job run: :mod:`.jobs`."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from labkit.analysis import frames, jobframes
from labkit.analysis.windows import cdf, num
from labkit.runs.rundir import Run
from labkit.ui.plots.theme import policy_color, policy_of, say_empty, titled, top_margin

JOB_PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")
BURST_POLICIES = ("fair", "job-priority", "interleave")  # job_bursts' panels by default
MARK_DASH = {"ranking": "dash", "shift": "dot"}
MARK_NAMES = {"ranking": "job-priority ranks the jobs", "shift": "interleave puts a job off"}
LOG_TICKS = (1, 1.5, 2, 3, 4, 5, 6, 7, 8)  # a log axis's labelled values in each decade


def job_colors(run: Run) -> dict[str, str]:
    """Each job's colour (Okabe-Ito, in the scenario's order of jobs)."""
    jobs = frames.shared_jobs(run.manifest.scenario)
    return {j.name: JOB_PALETTE[i % len(JOB_PALETTE)] for i, j in enumerate(jobs)}


def job_bursts(run: Run, policies: list[str] | None = None, bin_ms: float = 50.0
               ) -> go.Figure:
    """Each job's Mbit/s into the bottleneck port's queue over each policy's ops
    (:func:`labkit.analysis.jobframes.job_shares`, ``bin_ms`` bins, stacked: the top is
    what the jobs sent together; above the link's rate, dotted, the queue grows), a panel
    per policy (default: those of :data:`BURST_POLICIES` in the run, else every one whose
    jobs the kernel counted apart); job-priority's rankings (dashed) and interleave's
    shifts (dotted) marked where they happened."""
    shares = jobframes.job_shares(run, bin_ms=bin_ms)
    counted = shares["policy"].unique().to_list()
    if policies is None:
        policies = ([p for p in BURST_POLICIES if p in counted]
                    or [p for p in run.summary.policies if p in counted])
    ports = sorted({policy_of(run, p).bottleneck.port for p in policies})
    title = f"Each job's traffic into the bottleneck port {', '.join(ports)}"
    if not policies:
        fig = titled(go.Figure(), run, title, "", "")
        return say_empty(fig, "the kernel did not count the jobs apart in this run")
    fig = make_subplots(rows=len(policies), cols=1, shared_xaxes=True, vertical_spacing=0.09,
                        subplot_titles=policies)
    titled(fig, run, title, "", "")
    colors, marks = job_colors(run), jobframes.job_marks(run)
    for row, policy in enumerate(policies, start=1):
        mine = shares.filter(pl.col("policy") == policy)
        for job, color in colors.items():
            f = mine.filter(pl.col("job") == job)
            fig.add_scatter(x=f["t_s"].to_list(), y=f["mbps"].to_list(), mode="lines",
                            stackgroup=f"row{row}", name=job, legendgroup=job,
                            showlegend=row == 1, fillcolor=color,
                            line={"shape": "hv", "width": 0.5, "color": color},
                            hovertemplate=f"{job}: %{{y:.1f}} Mbit/s at %{{x:.2f}} s"
                                          "<extra></extra>", row=row, col=1)
        if mine.is_empty():
            fig.add_annotation(text=f"the kernel did not count {policy}'s jobs apart",
                               xref=f"x{row if row > 1 else ''} domain",
                               yref=f"y{row if row > 1 else ''} domain", x=0.5, y=0.5,
                               showarrow=False, font={"size": 13, "color": "#555555"})
            continue
        rate = run.summary.policies[policy].bottleneck.rate_mbps
        fig.add_hline(y=rate, line_dash="dot", line_color="#555555", line_width=1,
                      row=row, col=1)
        if row == 1:  # the line's name, once
            fig.add_scatter(x=[None], y=[None], mode="lines", name=f"link rate ({rate:g})",
                            line={"dash": "dot", "color": "#555555", "width": 1})
        for m in marks.filter(pl.col("policy") == policy).iter_rows(named=True):
            fig.add_vline(x=m["t_s"], line_dash=MARK_DASH[m["what"]], line_color="#000000",
                          line_width=1.2, annotation_text=m["text"],
                          annotation_position="top right", annotation_font_size=10,
                          row=row, col=1)
        for what in marks.filter(pl.col("policy") == policy)["what"].unique(maintain_order=True):
            fig.add_scatter(x=[None], y=[None], mode="lines", name=MARK_NAMES[what],
                            line={"dash": MARK_DASH[what], "color": "#000000", "width": 1.2})
        fig.update_yaxes(title_text="Mbit/s", rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="time since the policy's first op (s)", row=len(policies),
                     col=1)
    return top_margin(fig, 110)


def job_iteration_cdfs(run: Run, policies: list[str] | None = None) -> go.Figure:
    """Each job's iteration times (:func:`labkit.analysis.jobframes.job_iterations`: those
    its summary counts), a panel per job, a CDF per policy in ``policies`` (default: every
    one) in the policy's colour; ``isolated``, the job alone, dashed: the reference. Log
    scale: a slowdown is the same distance whatever the job's own time."""
    iterations = jobframes.job_iterations(run)
    jobs = [j.name for j in frames.shared_jobs(run.manifest.scenario)]
    policies = list(run.summary.policies) if policies is None else policies
    title = "Each job's iteration times, per policy"
    if not jobs:
        return say_empty(titled(go.Figure(), run, title, "", ""),
                         "one job in this run: its completion-time CDF is the figure")
    fig = make_subplots(rows=1, cols=len(jobs), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=jobs)
    titled(fig, run, title, "", "")
    ms = iterations.filter(pl.col("policy").is_in(policies))["iteration_ms"]
    lo, hi = (0.97 * num(ms.min()), 1.03 * num(ms.max())) if ms.len() else (1.0, 1e3)
    ticks = [v * 10 ** e for e in range(6) for v in LOG_TICKS if lo <= v * 10 ** e <= hi]
    for col, job in enumerate(jobs, start=1):
        for policy in policies:
            ms = iterations.filter((pl.col("policy") == policy)
                                   & (pl.col("job") == job))["iteration_ms"]
            if ms.is_empty():
                continue
            x, y = cdf(ms)
            alone = policy == "isolated"
            fig.add_scatter(x=x, y=y, mode="lines", name="isolated (alone)" if alone else policy,
                            legendgroup=policy, showlegend=col == 1,
                            line={"shape": "hv", "color": policy_color(policy),
                                  "dash": "dash" if alone else "solid",
                                  "width": 2.5 if alone else 1.5},
                            hovertemplate=f"{policy}: %{{x:.0f}} ms, %{{y:.2f}}<extra></extra>",
                            row=1, col=col)
        fig.update_xaxes(title_text="iteration time (ms, log scale)", type="log",
                         range=[math.log10(lo), math.log10(hi)], tickvals=ticks, row=1,
                         col=col)  # one range for every job: their times side by side
    fig.update_yaxes(title_text="fraction of iterations", range=[0, 1.02], row=1, col=1)
    return top_margin(fig, 110)
