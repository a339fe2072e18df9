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

POLICY_COLORS = {"isolated": "#009E73", "fifo": "#D55E00", "priority": "#0072B2",
                 "reactive": "#56B4E9", "proactive": "#CC79A7", "state-aware": "#000000"}
LANE_COLORS = {"vip": "#0072B2", "normal": "#999999", "low": "#E69F00", "all": "#CC79A7"}
LANE_DASH = {"vip": "solid", "normal": "dot", "low": "dash", "all": "dashdot"}
PORT_DASH = ("solid", "dash", "dot", "dashdot")
FONT = "Inter, Helvetica, Arial, sans-serif"


def policy_color(policy: str) -> str:
    """A policy's colour; ``priority+reactive`` takes its controller's."""
    return POLICY_COLORS.get(policy.rpartition("+")[2], "#999999")


def subtitle(run: Run) -> str:
    """Where a figure's data came from: scenario, run id, scale factor; and the policies
    whose links did not keep time (``fidelity.links_kept_time``), if any."""
    s = run.summary
    late = [p for p, v in s["policies"].items()
            if not v.get("fidelity", {}).get("links_kept_time", True)]
    return (f"{s['scenario']} · run {s['run_id']} · 1 emulated Mbit/s = "
            f"{s['scale_factor']:g} real Mbit/s"
            + (f" · links did not keep time under {', '.join(late)}" if late else ""))


def _style(fig: go.Figure, title: str, sub: str, x: str, y: str) -> go.Figure:
    fig.update_layout(
        template="plotly_white", font={"family": FONT, "size": 13},
        title={"text": f"{title}<br><sup>{sub}</sup>"},
        xaxis_title=x, yaxis_title=y, legend_title_text="", margin={"t": 80},
    )
    return fig


def _layout(fig: go.Figure, run: Run, title: str, x: str, y: str) -> go.Figure:
    return _style(fig, title, subtitle(run), x, y)


def op_time_cdf(run: Run) -> go.Figure:
    """Distribution of All-Reduce completion times, one line per policy."""
    ops = analysis.op_times(run["collectives"])
    fig = go.Figure()
    for policy in run.summary["policies"]:
        x, y = analysis.cdf(ops.filter(pl.col("policy") == policy)["ms"])
        fig.add_scatter(x=x, y=y, mode="lines", name=policy,
                        line={"shape": "hv", "color": policy_color(policy)})
    return _layout(fig, run, "All-Reduce completion time", "completion time (ms)",
                   "fraction of ops")


def queue_timeline(run: Run, ports: list[str] | None = None, policies: list[str] | None = None,
                   window: tuple[float, float] = (0.0, 1.0)) -> go.Figure:
    """Backlog (all classes summed) at ``ports`` (default: each policy's bottleneck port)
    over the part ``window`` (fractions from, to) of each policy's ops, one line per policy
    and port (dashed by port), timed from the policy's first op."""
    first = analysis.windows(analysis.op_times(run["collectives"]))
    spans = analysis.part_of_windows(run["collectives"], window)
    fig = go.Figure()
    for policy in list(run.summary["policies"]) if policies is None else policies:
        here = ports if ports is not None else [
            run.summary["policies"][policy]["bottleneck"]["port"]]
        start, end = spans[policy]
        for i, port in enumerate(here):
            q = analysis.backlog_series(run["queue"], policy, port, start, end)
            fig.add_scatter(x=((q["t_ns"] - first[policy][0]) / 1e9).to_list(),
                            y=(q["backlog_bytes"] / 1024).to_list(), mode="lines",
                            name=policy if len(here) == 1 else f"{policy} · {port}",
                            line={"color": policy_color(policy), "width": 1.5,
                                  "dash": PORT_DASH[i % len(PORT_DASH)]})
    where = "the bottleneck port" if ports is None else ", ".join(ports) or "no port"
    return _layout(fig, run, f"Queue at {where}", "time since the first op (s)",
                   "backlog (KiB)")


def lane_sojourn(run: Run, policies: list[str] | None = None, lanes: list[str] | None = None,
                 window: tuple[float, float] = (0.0, 1.0)) -> go.Figure:
    """Time in the bottleneck queue per lane (sampled packets), one CDF per policy and lane,
    over the part ``window`` (fractions from, to) of each policy's ops."""
    spans = analysis.part_of_windows(run["collectives"], window)
    frame = analysis.lane_sojourns(run["sojourn"], run.summary, spans)
    fig = go.Figure()
    for policy in list(run.summary["policies"]) if policies is None else policies:
        for lane in ["vip", "low"] if lanes is None else lanes:
            x, y = analysis.cdf(frame.filter((pl.col("policy") == policy)
                                             & (pl.col("lane") == lane))["sojourn_us"])
            if x:
                fig.add_scatter(x=x, y=y, mode="lines", name=f"{policy} · {lane}",
                                line={"shape": "hv", "color": policy_color(policy),
                                      "dash": LANE_DASH[lane]})
    fig.update_xaxes(type="log")
    return _layout(fig, run, "Time in the bottleneck queue, per lane", "sojourn (µs, log scale)",
                   "fraction of packets")


def collective_latency(run: Run) -> go.Figure:
    """One-way latency of the collective's packets (sender's stamp to the receiver's NIC),
    one CDF per policy: what the queues along the path add, end to end."""
    spans = analysis.windows(analysis.op_times(run["collectives"]))
    cdfs = analysis.latency_cdfs(run["latency"], spans)
    fig = go.Figure()
    for policy in (p for p in run.summary["policies"] if p in cdfs):
        x, y = cdfs[policy]
        fig.add_scatter(x=x, y=y, mode="lines", name=policy,
                        line={"shape": "hv", "color": policy_color(policy)})
    fig.update_xaxes(type="log")
    return _layout(fig, run, "One-way latency of the collective's packets",
                   "latency (µs, log scale)", "fraction of packets")


def valve_timeline(run: Run, policy: str, seconds: float = 5.0) -> go.Figure:
    """What the valves let storage send over the first seconds of ``policy``'s ops, with
    the ops shaded and the bottleneck queue beside it: what the controller did, and when."""
    ops = analysis.op_times(run["collectives"]).filter(pl.col("policy") == policy).sort("start_ns")
    start = ops["start_ns"].min()
    end = start + int(seconds * 1e9)
    fig = go.Figure()
    for s_ns, e_ns in zip(ops["start_ns"], ops["end_ns"], strict=True):
        if s_ns < end:
            fig.add_vrect(x0=(s_ns - start) / 1e9, x1=(min(e_ns, end) - start) / 1e9,
                          fillcolor=LANE_COLORS["vip"], opacity=0.10, line_width=0)
    bneck = run.summary["policies"][policy]["bottleneck"]
    allowed = analysis.allowed_storage(run["controller"], policy, start, end, bneck["rate_mbps"])
    fig.add_scatter(x=((allowed["t_ns"] - start) / 1e9).to_list(), y=allowed["mbps"].to_list(),
                    mode="lines", line={"shape": "hv", "color": "#000000", "width": 1.5},
                    name="storage allowed by the valves (Mbit/s)")
    q = analysis.backlog_series(run["queue"], policy, bneck["port"], start, end)
    fig.add_scatter(x=((q["t_ns"] - start) / 1e9).to_list(),
                    y=(q["backlog_bytes"] / 1024).to_list(),
                    mode="lines", name=f"backlog at {bneck['port']} (KiB)", yaxis="y2",
                    line={"color": LANE_COLORS["low"], "width": 1})
    fig.update_layout(xaxis_range=[0, seconds], yaxis_rangemode="tozero",
                      yaxis2={"title": "backlog (KiB)", "overlaying": "y", "side": "right",
                              "showgrid": False, "rangemode": "tozero"},
                      legend={"orientation": "h", "y": -0.2})
    return _layout(fig, run, f"Valves under {policy} (shaded: All-Reduce ops)",
                   "time since the first op (s)", "storage allowed (Mbit/s)")


def parallelism(run: Run) -> go.Figure:
    """Where a training iteration's time goes, per policy: compute, waits for data on the
    wire, and bubbles (waits for a peer that had not sent)."""
    frame = analysis.job_breakdown(run.summary)
    fig = go.Figure()
    for column, label, color in (("compute_ms", "compute", "#009E73"),
                                 ("wire_wait_ms", "data on the wire", "#0072B2"),
                                 ("bubble_ms", "bubble", "#E69F00")):
        fig.add_bar(x=frame["policy"].to_list(), y=frame[column].to_list(), name=label,
                    marker_color=color)
    fig.update_layout(barmode="stack")
    return _layout(fig, run, "Where an iteration's time goes", "policy",
                   "mean time per iteration (ms)")


def parallelism_comparison(runs: dict[str, Run], policy: str = "fifo") -> go.Figure:
    """Training jobs side by side (one run each): bytes per iteration across the
    bottleneck, and how much storage contention under ``policy`` slowed the iteration."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "MB per iteration across the bottleneck", f"iteration slowdown under {policy} (p50)"))
    names = list(runs)
    jobs = [runs[n].summary["policies"][policy]["job"] for n in names]
    fig.add_bar(x=names, y=[j["bottleneck_bytes_per_iteration"] / 1e6 for j in jobs],
                marker_color="#0072B2", showlegend=False, row=1, col=1)
    fig.add_bar(x=names, y=[j["slowdown_p50"] for j in jobs], marker_color="#D55E00",
                showlegend=False, row=1, col=2)
    fig.update_yaxes(title_text="MB", row=1, col=1)
    fig.update_yaxes(title_text="x isolated", row=1, col=2)
    sub = " | ".join(subtitle(r) for r in runs.values())
    return _style(fig, "Tensor vs pipeline parallelism on the same fabric", sub, "", "")


SWEEP_PALETTE = ("#0072B2", "#009E73", "#CC79A7", "#D55E00", "#E69F00", "#56B4E9")


def sweep_colors(names: list[str]) -> dict[str, str]:
    """A colour per sweep name, in order: pass the colours of all the sweeps to keep each
    one's colour when only some are drawn."""
    return {n: SWEEP_PALETTE[i % len(SWEEP_PALETTE)] for i, n in enumerate(names)}


def sweep_busbw(sweeps: dict[str, list[dict]], sub: str,
                colors: dict[str, str] | None = None) -> go.Figure:
    """Bus bandwidth against message size, one line per sweep (``labkit sweep`` records),
    with the link rate the busbw can at most reach."""
    colors = colors or sweep_colors(list(sweeps))
    fig = go.Figure()
    for name, rows in sweeps.items():
        fig.add_scatter(x=[r["size"] for r in rows], y=[r["busbw_mbps"] for r in rows],
                        mode="lines+markers", name=name, line={"color": colors[name]})
    links = [r["link_mbps"] for rows in sweeps.values() for r in rows]
    if links:
        fig.add_hline(y=min(links), line_dash="dot",
                      annotation_text=f"link rate {min(links):g} Mbit/s")
    fig.update_xaxes(type="log")
    return _style(fig, "All-Reduce bus bandwidth by message size", sub,
                  "message size (bytes, log scale)", "busbw (Mbit/s)")
