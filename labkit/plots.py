"""plotly figure builders over a recorded run, in one theme.

Colours are the Okabe-Ito colour-blind-safe palette; every axis carries its
unit; every figure's title names the scenario, the run id and the scale factor,
so a figure lifted into a blog post still says where it came from.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from labkit import analysis
from labkit.rundir import Run

POLICY_COLORS = {"isolated": "#009E73", "fifo": "#D55E00", "priority": "#0072B2"}
LANE_COLORS = {"vip": "#0072B2", "normal": "#999999", "low": "#E69F00", "all": "#CC79A7"}
FONT = "Inter, Helvetica, Arial, sans-serif"


def _layout(fig: go.Figure, run: Run, title: str, x: str, y: str) -> go.Figure:
    s = run.summary
    fig.update_layout(
        template="plotly_white", font={"family": FONT, "size": 13},
        title={"text": f"{title}<br><sup>{s['scenario']} · run {s['run_id']} · 1 emulated "
                       f"Mbit/s = {s['scale_factor']:g} real Mbit/s</sup>"},
        xaxis_title=x, yaxis_title=y, legend_title_text="", margin={"t": 80},
    )
    return fig


def op_time_cdf(run: Run) -> go.Figure:
    """Distribution of All-Reduce completion times, one line per policy."""
    ops = analysis.op_times(run["collectives"])
    fig = go.Figure()
    for policy in run.summary["policies"]:
        ms = ops.filter(pl.col("policy") == policy)["ms"].sort()
        fig.add_scatter(x=ms.to_list(), y=[(i + 1) / len(ms) for i in range(len(ms))],
                        mode="lines", line={"shape": "hv", "color": POLICY_COLORS.get(policy)},
                        name=policy)
    return _layout(fig, run, "All-Reduce completion time", "completion time (ms)",
                   "fraction of ops")


def queue_timeline(run: Run, port: str | None = None) -> go.Figure:
    """Backlog at the bottleneck port over each policy's window, one line per policy."""
    fig = go.Figure()
    spans = analysis.windows(analysis.op_times(run["collectives"]))
    for policy, p in run.summary["policies"].items():
        name = port or p["bottleneck"]["port"]
        start, end = spans[policy]
        q = (run["queue"].filter((pl.col("policy") == policy) & (pl.col("port") == name)
                                 & pl.col("t_ns").is_between(start, end))
             .group_by("t_ns").agg(pl.col("backlog_bytes").sum()).sort("t_ns"))
        fig.add_scatter(x=((q["t_ns"] - start) / 1e9).to_list(),
                        y=(q["backlog_bytes"] / 1024).to_list(), mode="lines", name=policy,
                        line={"color": POLICY_COLORS.get(policy), "width": 1.5})
    return _layout(fig, run, f"Queue at the bottleneck port{f' {port}' if port else ''}",
                   "time since the first op (s)", "backlog (KiB)")
