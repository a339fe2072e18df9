"""Training jobs' figures: where an iteration's time goes per policy, jobs of different
parallelism side by side, each rank's iterations as they ran, and a pipeline's schedule."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from labkit.analysis import frames
from labkit.analysis.windows import num
from labkit.model.summary import Job
from labkit.runs.rundir import Run
from labkit.ui.plots.runs import event_bands
from labkit.ui.plots.theme import (
    PHASE_COLORS,
    PHASE_LABELS,
    policy_of,
    subtitle,
    themed,
    titled,
    top_margin,
    workload_of,
)


def parallelism(run: Run) -> go.Figure:
    """Where a training iteration's time goes, per policy: compute, waits for data on the
    wire, and bubbles (waits for a peer that had not sent)."""
    frame = frames.job_breakdown(run.summary)
    fig = go.Figure()
    for phase in ("compute", "wire_wait", "bubble"):
        fig.add_bar(x=frame["policy"].to_list(), y=frame[f"{phase}_ms"].to_list(),
                    name=PHASE_LABELS[phase], marker_color=PHASE_COLORS[phase])
    fig.update_layout(barmode="stack")
    return titled(fig, run, "Where an iteration's time goes", "policy",
                  "mean time per iteration (ms)")


def parallelism_comparison(runs: dict[str, Run], policy: str = "fifo") -> go.Figure:
    """Training jobs side by side (one run each): bytes per iteration across the
    bottleneck, and how much storage contention under ``policy`` slowed the iteration."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "MB per iteration across the bottleneck", f"iteration slowdown under {policy} (p50)"))
    names = list(runs)
    jobs = [_job_of(runs[n], policy) for n in names]
    fig.add_bar(x=names, y=[j.bottleneck_bytes_per_iteration / 1e6 for j in jobs],
                marker_color="#0072B2", showlegend=False, row=1, col=1)
    fig.add_bar(x=names, y=[j.slowdown_p50 for j in jobs], marker_color="#D55E00",
                showlegend=False, row=1, col=2)
    fig.update_yaxes(title_text="MB", row=1, col=1)
    fig.update_yaxes(title_text="x isolated", row=1, col=2)
    sub = " | ".join(subtitle(r) for r in runs.values())
    kinds = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return themed(fig, f"{kinds[0].upper()}{kinds[1:]} parallelism on the same fabric", sub,
                  "", "")


def _job_of(run: Run, policy: str) -> Job:
    job = policy_of(run, policy).workload
    if not isinstance(job, Job):
        raise ValueError(f"{run.path}: no training job in this run (it ran {job.KEY})")
    return job


def job_timeline(run: Run, ops: tuple[int, ...] = (0, 1),
                 policies: list[str] | None = None) -> go.Figure:
    """Per rank, the iterations ``ops`` of a training job as they ran, one panel per
    policy (shared time axis): a bar spans each rank's iteration from its measured start
    to its end, in the colour of sending and other work, and on it are the spans the rank
    recorded (``phases`` table, :func:`labkit.analysis.frames.phase_spans`): when it computed,
    waited for data on the wire and waited for a peer that had not sent (bubbles). A run
    recorded before that table has only each iteration's sums: they are laid end to end
    in that order (:func:`labkit.analysis.frames.summed_spans`), and the note says so. A dotted
    line marks the end of each iteration (its last rank)."""
    jobs = [p for p, v in run.summary.policies.items() if isinstance(v.workload, Job)]
    if not jobs:
        raise ValueError(f"{run.path}: no training job in this run (a job scenario, e.g. "
                         "topologies/tensor-parallel.yaml, records one)")
    policies = policies or jobs
    recorded = "phases" in (run.manifest.tables or ())
    fig = make_subplots(rows=len(policies), cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=[f"{p}: iteration{'s' if len(ops) > 1 else ''} "
                                        + " and ".join(str(o) for o in ops)
                                        for p in policies])
    titled(fig, run, f"Per-rank timeline of the {workload_of(run)}", "", "")
    named: set[str] = set()
    for row, policy in enumerate(policies, start=1):
        iterations = frames.iteration_phases(run["collectives"], policy, list(ops))
        spans = (frames.phase_spans(run["collectives"], run["phases"], policy, list(ops))
                 if recorded else frames.summed_spans(iterations))
        _timeline_panel(fig, row, iterations, spans)
        shown = run["collectives"].filter((pl.col("policy") == policy)
                                          & pl.col("op").is_in(list(ops)))
        t0, t1 = int(num(shown["start_ns"].min())), int(num(shown["end_ns"].max()))
        event_bands(fig, run["events"], policy, t0, t0, t1, named, per_s=1e3, row=row,
                    layer="below")  # between the ranks' bars
    fig.update_xaxes(title_text="time since the first rank started (ms)", row=len(policies),
                     col=1)
    top_margin(fig, 100).update_layout(barmode="overlay", bargap=0.25, margin_b=90)
    note = ("each bar: a rank's measured iteration, start to end; on it, when the rank "
            "computed and waited, as it recorded them" if recorded else
            "recorded before phase spans (no phases table): inside each rank's measured "
            "iteration, its recorded sums laid end to end (their order is not recorded)")
    fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=-0.2, showarrow=False,
                       xanchor="left", yanchor="top", font={"size": 11, "color": "#555555"})
    return fig


def _rank_label() -> pl.Expr:
    return pl.format("{} · rank {}", "host", "rank").alias("label")


def _timeline_panel(fig: go.Figure, row: int, iterations: pl.DataFrame,
                    spans: pl.DataFrame) -> None:
    """One policy's panel of :func:`job_timeline`: the iterations as bars in the colour of
    sending and other work, each phase's spans over them, the iterations' ends."""
    layers = [("sending", iterations)] + [(phase, spans.filter(pl.col("phase") == phase))
                                          for phase in frames.SPAN_PHASES]
    for phase, f in layers:
        f = f.with_columns(_rank_label())
        fig.add_bar(orientation="h", y=f["label"].to_list(),
                    x=(f["end_ms"] - f["start_ms"]).to_list(), base=f["start_ms"].to_list(),
                    name=PHASE_LABELS[phase], legendgroup=phase, showlegend=row == 1,
                    marker={"color": PHASE_COLORS[phase],
                            "line": {"width": 0 if phase == "sending" else 0.4,
                                     "color": "#ffffff"}},
                    customdata=f["op"].to_list(),
                    hovertemplate=f"%{{y}} · iteration %{{customdata}}<br>"
                                  f"{PHASE_LABELS[phase]}: %{{x:.2f}} ms from "
                                  f"%{{base:.1f}} ms<extra></extra>",
                    row=row, col=1)
    for end in iterations.group_by("op").agg(pl.col("end_ms").max()).sort("op")["end_ms"]:
        fig.add_vline(x=end, line_dash="dot", line_color="#555555", line_width=1,
                      row=row, col=1)
    fig.update_yaxes(autorange="reversed", row=row, col=1)


def stage_schedule(busy_ns: tuple, stages: list[str], title: str, sub: str) -> go.Figure:
    """A pipeline's iteration as its plans run (:mod:`labkit.model.traffic.timeline`): one row
    per stage, a bar for each compute phase; the gaps between bars are the bubbles."""
    fig = go.Figure()
    for i, spans in enumerate(busy_ns):
        fig.add_bar(y=[stages[i]] * len(spans), x=[(b - a) / 1e6 for a, b in spans],
                    base=[a / 1e6 for a, _ in spans], orientation="h", showlegend=False,
                    marker={"color": "#009E73", "line": {"color": "white", "width": 1}},
                    hovertemplate="%{base:.1f}-%{x:.1f} ms<extra></extra>")
    fig.update_layout(barmode="overlay", bargap=0.3)
    fig.update_yaxes(autorange="reversed")
    return themed(fig, title, sub, "time in the iteration (ms)", "stage (host)")
