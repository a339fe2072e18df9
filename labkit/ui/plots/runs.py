"""A run's figures of its collective and its queues: the completion-time CDFs, the queue
at the bottleneck over time, the time packets spent in it per lane, the collective's
one-way latency, and what the valves let storage send."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from labkit.analysis import frames
from labkit.analysis.ports import backlog_series, sent_series
from labkit.analysis.windows import cdf, op_times, windows
from labkit.model.abi import LANES
from labkit.model.summary import Program
from labkit.runs.rundir import Run
from labkit.ui.plots.theme import (
    LANE_COLORS,
    LANE_DASH,
    PORT_COLORS,
    PORT_DASH,
    policy_color,
    say_empty,
    titled,
    workload_of,
)


def op_time_cdf(run: Run) -> go.Figure:
    """Distribution of the workload's completion times (All-Reduce ops, or a job's
    iterations), one line per policy."""
    ops = op_times(run["collectives"])
    warmup = _warmup(run)
    fig = go.Figure()
    for policy in run.summary.policies:
        x, y = cdf(ops.filter((pl.col("policy") == policy) & (pl.col("op") >= warmup))
                    ["ms"])
        fig.add_scatter(x=x, y=y, mode="lines", name=policy,
                        line={"shape": "hv", "color": policy_color(policy)})
    unit = "ops" if workload_of(run) == "All-Reduce" else "iterations"
    return titled(fig, run, f"{workload_of(run)} completion time", "completion time (ms)",
                  f"fraction of {unit}")


def _warmup(run: Run) -> int:
    """The first iterations a program's summary leaves out (0: none)."""
    return next((p.workload.warmup for p in run.summary.policies.values()
                 if isinstance(p.workload, Program)), 0)


EVENT_COLORS = {"down": "#D55E00"}  # a fault's band on a timeline (others: orange)


def queue_timeline(run: Run, ports: list[str] | None = None, policies: list[str] | None = None,
                   window: tuple[float, float] = (0.0, 1.0)) -> go.Figure:
    """Backlog (all classes summed) at ``ports`` (default: each policy's bottleneck port)
    over the part ``window`` (fractions from, to) of each policy's ops, one line per policy
    and port (dashed by port), timed from the policy's first op; the faults of the
    scenario's ``events`` as bands, each labelled."""
    first = windows(op_times(run["collectives"]))
    spans = frames.part_of_windows(run["collectives"], window)
    fig = go.Figure()
    named: set[str] = set()  # each fault's band, named once in the legend
    for policy in list(run.summary.policies) if policies is None else policies:
        here = ports if ports is not None else [run.summary.policies[policy].bottleneck.port]
        start, end = spans[policy]
        for i, port in enumerate(here):
            q = backlog_series(run["queue"], policy, port, start, end)
            fig.add_scatter(x=((q["t_ns"] - first[policy][0]) / 1e9).to_list(),
                            y=(q["backlog_bytes"] / 1024).to_list(), mode="lines",
                            name=policy if len(here) == 1 else f"{policy} · {port}",
                            line={"color": policy_color(policy), "width": 1.5,
                                  "dash": PORT_DASH[i % len(PORT_DASH)]})
        event_bands(fig, run["events"], policy, first[policy][0], start, end, named)
    where = "the bottleneck port" if ports is None else ", ".join(ports) or "no port"
    fig.update_yaxes(rangemode="tozero")
    return titled(fig, run, f"Queue at {where}", "time since the first op (s)",
                  "backlog (KiB)")


REROUTE_BIN_NS = 250_000_000  # a job's bursts, smoothed over a few iterations


def reroutes(run: Run) -> go.Figure:
    """A routed fabric's answer to a failed link (``fabric.routing: bgp``): what each
    bottleneck port sent (its qdisc's byte counters, per 250 ms), one line per port, for
    each policy whose routes moved; the faults as bands, and a dashed line where the last
    router's routes had moved off the link (``converged_ms``) and where the last came back
    (``restored_ms``)."""
    first = windows(op_times(run["collectives"]))
    spans = frames.part_of_windows(run["collectives"])
    fig = go.Figure()
    named: set[str] = set()
    policies = [p for p, v in run.summary.policies.items() if v.reroutes]
    hops = frames.port_hops(run.manifest.scenario) if run.manifest else {}
    for policy in policies:
        start, end = spans[policy]
        t0 = first[policy][0]
        for i, port in enumerate(frames.watched_ports(run["queue"].filter(
                pl.col("policy") == policy))):
            s = sent_series(run["queue"], policy, port, start, end, REROUTE_BIN_NS)
            hop = hops.get(port, port)
            fig.add_scatter(x=((s["t_ns"] - t0) / 1e9).to_list(), y=s["mbps"].to_list(),
                            mode="lines", name=hop if len(policies) == 1 else
                            f"{policy} · {hop}",
                            line={"color": PORT_COLORS[i % len(PORT_COLORS)], "width": 1.5,
                                  "dash": PORT_DASH[policies.index(policy) % len(PORT_DASH)]})
        event_bands(fig, run["events"], policy, t0, start, end, named)
        ups = run["events"].filter((pl.col("policy") == policy) & (pl.col("change") == "down")
                                   & (pl.col("state") == "end"))
        for r in run.summary.policies[policy].reroutes or ():
            down_ns = start + int(r.at_s * 1e9)
            up = ups.filter((pl.col("event") == r.event) & (pl.col("t_ns") > down_ns))["t_ns"]
            if r.converged_ms is not None:
                _route_mark(fig, (down_ns - t0) / 1e9 + r.converged_ms / 1e3,
                            f"routes moved: {r.converged_ms:.0f} ms")
            if len(up) and r.restored_ms is not None:
                _route_mark(fig, (int(up.min()) - t0) / 1e9 + r.restored_ms / 1e3,  # type: ignore[arg-type]
                            f"back: {r.restored_ms:.0f} ms")
    if not policies:
        say_empty(fig, "no route moved: the fabric is not routed (fabric.routing: bgp), "
                       "or no link went down")
    fig.update_yaxes(rangemode="tozero")
    return titled(fig, run, "The bottleneck ports as BGP routes around a failed link",
                  "time since the first op (s)", "sent (Mbit/s)")


def _route_mark(fig: go.Figure, x: float, text: str) -> None:
    """A dashed line at ``x`` (s), labelled: when routes moved or came back."""
    fig.add_vline(x=x, line_dash="dash", line_width=1, line_color="#555",
                  annotation_text=text, annotation_position="top right")


def event_bands(fig: go.Figure, events: pl.DataFrame, policy: str, t0: int, start: int,
                end: int, named: set[str], per_s: float = 1.0, row: int | None = None,
                layer: str = "above") -> None:
    """The faults of ``policy``'s timeline (its ``events`` rows) over [start, end] as
    bands on ``fig`` (x: seconds since ``t0`` times ``per_s``; ``row``: a subplot's;
    ``layer``: over the traces or under them), each named once in the legend (``named``:
    the labels named so far)."""
    where = {"row": row, "col": 1} if row else {}
    for x0, x1, change, label in frames.event_spans(events, policy, t0, start, end):
        color = EVENT_COLORS.get(change, "#E69F00")
        fig.add_vrect(x0=x0 * per_s, x1=x1 * per_s, line_width=0, fillcolor=color,
                      opacity=0.15 if layer == "above" else 0.35, layer=layer, **where)
        if label not in named:
            named.add(label)
            fig.add_scatter(x=[None], y=[None], mode="markers", name=label,
                            marker={"symbol": "square", "size": 12, "color": color,
                                    "opacity": 0.4}, **where)


def lane_sojourn(run: Run, policies: list[str] | None = None, lanes: list[str] | None = None,
                 window: tuple[float, float] = (0.0, 1.0)) -> go.Figure:
    """Time in the bottleneck queue per lane (sampled packets), one CDF per policy and lane,
    over the part ``window`` (fractions from, to) of each policy's ops. ``lanes`` default:
    vip and low, or the lanes sampled when neither was (a run of TCP flows: normal)."""
    spans = frames.part_of_windows(run["collectives"], window)
    frame = frames.lane_sojourns(run["sojourn"], run.summary, spans)
    fig = go.Figure()
    sampled = [lane for lane in LANES if lane in set(frame["lane"])]
    if lanes is None:
        lanes = [lane for lane in sampled if lane in ("vip", "low")] or sampled
    for policy in list(run.summary.policies) if policies is None else policies:
        for lane in lanes:
            x, y = cdf(frame.filter((pl.col("policy") == policy)
                                     & (pl.col("lane") == lane))["sojourn_us"])
            if x:
                fig.add_scatter(x=x, y=y, mode="lines", name=f"{policy} · {lane}",
                                line={"shape": "hv", "color": policy_color(policy),
                                      "dash": LANE_DASH[lane]})
    fig.update_xaxes(type="log").update_layout(showlegend=True)  # one line: which lane
    titled(fig, run, "Time in the bottleneck queue, per lane", "sojourn (µs, log scale)",
           "fraction of packets")
    return fig if fig.data else say_empty(fig, "no packets sampled at the bottleneck port"
                                          + (f" in the {' or '.join(lanes)} lane" if sampled
                                             else ""))


def collective_latency(run: Run) -> go.Figure:
    """One-way latency of the collective's packets (sender's stamp to the receiver's NIC),
    one CDF per policy: what the queues along the path add, end to end."""
    spans = windows(op_times(run["collectives"]))
    cdfs = frames.latency_cdfs(run["latency"], spans)
    fig = go.Figure()
    for policy in (p for p in run.summary.policies if p in cdfs):
        x, y = cdfs[policy]
        fig.add_scatter(x=x, y=y, mode="lines", name=policy,
                        line={"shape": "hv", "color": policy_color(policy)})
    fig.update_xaxes(type="log")
    return titled(fig, run, "One-way latency of the collective's packets",
                  "latency (µs, log scale)", "fraction of packets")


def valve_timeline(run: Run, policy: str, seconds: float = 5.0) -> go.Figure:
    """What the valves let storage send over the first seconds of ``policy``'s ops, with
    the ops shaded, the bottleneck queue beside it and the faults of the scenario's
    ``events`` as bands: what the controller did, and when."""
    ops = op_times(run["collectives"]).filter(pl.col("policy") == policy).sort("start_ns")
    start = ops["start_ns"].min()
    if not isinstance(start, int):
        raise ValueError(f"{run.path}: no ops under {policy}: no valve timeline")
    end = start + int(seconds * 1e9)
    fig = go.Figure()
    for s_ns, e_ns in zip(ops["start_ns"], ops["end_ns"], strict=True):
        if s_ns < end:
            fig.add_vrect(x0=(s_ns - start) / 1e9, x1=(min(e_ns, end) - start) / 1e9,
                          fillcolor=LANE_COLORS["vip"], opacity=0.10, line_width=0)
    bneck = run.summary.policies[policy].bottleneck
    allowed = frames.allowed_storage(run["controller"], policy, start, end, bneck.rate_mbps)
    fig.add_scatter(x=((allowed["t_ns"] - start) / 1e9).to_list(), y=allowed["mbps"].to_list(),
                    mode="lines", line={"shape": "hv", "color": "#000000", "width": 1.5},
                    name="storage allowed by the valves (Mbit/s)")
    q = backlog_series(run["queue"], policy, bneck.port, start, end)
    fig.add_scatter(x=((q["t_ns"] - start) / 1e9).to_list(),
                    y=(q["backlog_bytes"] / 1024).to_list(),
                    mode="lines", name=f"backlog at {bneck.port} (KiB)", yaxis="y2",
                    line={"color": LANE_COLORS["low"], "width": 1})
    event_bands(fig, run["events"], policy, start, start, end, set())
    fig.update_layout(xaxis_range=[0, seconds], yaxis_rangemode="tozero",
                      yaxis2={"title": "backlog (KiB)", "overlaying": "y", "side": "right",
                              "showgrid": False, "rangemode": "tozero"},
                      legend={"orientation": "h", "y": -0.2})
    return titled(fig, run, f"Valves under {policy} (shaded: All-Reduce ops)",
                  "time since the first op (s)", "storage allowed (Mbit/s)")
