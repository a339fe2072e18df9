"""plotly figure builders over a recorded run, in one theme.

Colours are the Okabe-Ito colour-blind-safe palette; every axis carries its
unit; every figure's title names the scenario, the run id and the scale factor,
so a figure lifted into a blog post still says where it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from labkit.analysis import metrics
from labkit.analysis.describe import KIND_NAMES, kind_text, rate_text
from labkit.model.abi import LANES
from labkit.model.autotune import Model
from labkit.model.manifest import Provenance
from labkit.model.summary import BottleneckLane, Job, PolicySummary, Program
from labkit.runs.rundir import Run, Sweep, Tuning

POLICY_COLORS = {"isolated": "#009E73", "fifo": "#D55E00", "priority": "#0072B2",
                 "reactive": "#56B4E9", "proactive": "#CC79A7", "state-aware": "#000000"}
LANE_COLORS = {"vip": "#0072B2", "normal": "#999999", "low": "#E69F00", "all": "#CC79A7"}
LANE_DASH = {"vip": "solid", "normal": "dot", "low": "dash", "all": "dashdot"}
PHASE_COLORS = {"compute": "#009E73", "sending": "#56B4E9", "wire_wait": "#0072B2",
                "bubble": "#E69F00"}
PHASE_LABELS = {"compute": "compute", "sending": "sending/other", "wire_wait": "data on the wire",
                "bubble": "bubble"}
PORT_DASH = ("solid", "dash", "dot", "dashdot")
FONT = "Inter, Helvetica, Arial, sans-serif"


def policy_color(policy: str) -> str:
    """A policy's colour; ``priority+reactive`` takes its controller's."""
    return POLICY_COLORS.get(policy.rpartition("+")[2], "#999999")


def subtitle(run: Run) -> str:
    """Where a figure's data came from: scenario, run id, scale factor, the labkit
    revision and the machine that recorded it (:func:`recorded_by`); and the policies
    whose links did not keep time (``fidelity.links_kept_time``), if any."""
    s = run.summary
    late = [p for p, v in s.policies.items() if not v.fidelity.links_kept_time]
    return (f"{s.scenario} · run {s.run_id} · 1 emulated Mbit/s = "
            f"{s.scale_factor:g} real Mbit/s · {recorded_by(run.manifest.provenance)}"
            + (f" · links did not keep time under {', '.join(late)}" if late else ""))


def sweep_subtitle(sweep: Sweep) -> str:
    """Where a sweep's figures came from (:func:`subtitle` for a run)."""
    m = sweep.manifest
    if m is None:
        return f"{sweep.path.name} · recorded before sweeps kept a manifest"
    return (f"{m.scenario.get('name')} · sweep {m.run_id} · {m.op} ({m.algo}), {m.iters} "
            f"timed ops per size · {recorded_by(m.provenance)}")


def tuning_subtitle(tuning: Tuning) -> str:
    """Where a tuning's figures came from (:func:`subtitle` for a run)."""
    m = tuning.manifest
    return (f"{m.scenario.get('name')} · tuning {m.run_id} · fabric {tuning.model.fabric_key}"
            f" · {m.iters} timed ops per size · {recorded_by(m.provenance)}")


def recorded_by(p: Provenance) -> str:
    """labkit's revision (12 digits, ``-dirty`` kept) and the machine: CPUs and kernel."""
    rev, dash, state = p.labkit_revision.partition("-")
    cpus = f"{p.cpus} CPU{'s' if p.cpus != 1 else ''}, " if p.cpus else ""
    return f"labkit {rev[:12]}{dash}{state} · {cpus}Linux {p.kernel}"


WIDTH, HEIGHT = 960, 540  # the canvas labkit figures draws on (SVG and PNG)
FONT_PX = 13
TITLE_PX, SUB_PX = FONT_PX * 1.4, FONT_PX * 1.4 * 0.7  # plotly: title 1.4 x font, <sup> 0.7 x
TITLE_X_PX = WIDTH * 0.05  # the theme's title.x
SUB_LINE_PX = 24  # what each further subtitle line adds to the top margin
# Advance widths in em of DejaVu Sans, where Chromium falls back to for the theme's fonts
# on Debian, the widest of them: a text's width estimated before plotly.js draws it.
EM = {**dict.fromkeys("0123456789", .636), **dict.fromkeys(" .,·", .318),
      **dict.fromkeys("fjilI", .28), **dict.fromkeys("rt:;/()[]-", .39),
      **dict.fromkeys("mwMW%", .95), **dict.fromkeys("=+<>~", .84)}
EM_LOWER, EM_OTHER = .6, .72  # other lower-case letters; capitals and the rest


def text_px(text: str, size: float) -> float:
    """Estimated width in pixels of one line of plain ``text`` at font ``size``."""
    return size * sum(EM.get(c, EM_LOWER if c.islower() else EM_OTHER) for c in text)


def wrap(text: str, size: float, width_px: float, sep: str = " · ") -> list[str]:
    """``text`` in lines at most ``width_px`` wide, broken only after a ``sep``."""
    lines: list[str] = []
    for part in text.split(sep):
        if lines and text_px(lines[-1] + sep + part, size) <= width_px:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def _style(fig: go.Figure, title: str, sub: str, x: str, y: str) -> go.Figure:
    subs = wrap(sub, SUB_PX, WIDTH - 2 * TITLE_X_PX)
    fig.update_layout(
        template="plotly_white", font={"family": FONT, "size": FONT_PX},
        title={"text": "<br>".join([title, *(f"<sup>{s}</sup>" for s in subs)])},
        xaxis_title=x, yaxis_title=y, legend_title_text="",
    )
    return _top(fig, 80)


def _top(fig: go.Figure, px: int) -> go.Figure:
    """The top margin ``px`` for a title of one subtitle line, and room for the others."""
    return fig.update_layout(margin_t=px + SUB_LINE_PX * (fig.layout.title.text.count("<br>")
                                                           - 1))


def _say_empty(fig: go.Figure, why: str) -> go.Figure:
    """A figure with nothing to draw says ``why`` where its plot would be, axes hidden."""
    fig.add_annotation(text=why, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 15, "color": "#555555"})
    return fig.update_xaxes(visible=False).update_yaxes(visible=False)


def _layout(fig: go.Figure, run: Run, title: str, x: str, y: str) -> go.Figure:
    return _style(fig, title, subtitle(run), x, y)


def op_time_cdf(run: Run) -> go.Figure:
    """Distribution of the workload's completion times (All-Reduce ops, or a job's
    iterations), one line per policy."""
    ops = metrics.op_times(run["collectives"])
    warmup = _warmup(run)
    fig = go.Figure()
    for policy in run.summary.policies:
        x, y = metrics.cdf(ops.filter((pl.col("policy") == policy) & (pl.col("op") >= warmup))
                            ["ms"])
        fig.add_scatter(x=x, y=y, mode="lines", name=policy,
                        line={"shape": "hv", "color": policy_color(policy)})
    unit = "ops" if _workload(run) == "All-Reduce" else "iterations"
    return _layout(fig, run, f"{_workload(run)} completion time", "completion time (ms)",
                   f"fraction of {unit}")


def _warmup(run: Run) -> int:
    """The first iterations a program's summary leaves out (0: none)."""
    return next((p.workload.warmup for p in run.summary.policies.values()
                 if isinstance(p.workload, Program)), 0)


def queue_timeline(run: Run, ports: list[str] | None = None, policies: list[str] | None = None,
                   window: tuple[float, float] = (0.0, 1.0)) -> go.Figure:
    """Backlog (all classes summed) at ``ports`` (default: each policy's bottleneck port)
    over the part ``window`` (fractions from, to) of each policy's ops, one line per policy
    and port (dashed by port), timed from the policy's first op."""
    first = metrics.windows(metrics.op_times(run["collectives"]))
    spans = metrics.part_of_windows(run["collectives"], window)
    fig = go.Figure()
    for policy in list(run.summary.policies) if policies is None else policies:
        here = ports if ports is not None else [run.summary.policies[policy].bottleneck.port]
        start, end = spans[policy]
        for i, port in enumerate(here):
            q = metrics.backlog_series(run["queue"], policy, port, start, end)
            fig.add_scatter(x=((q["t_ns"] - first[policy][0]) / 1e9).to_list(),
                            y=(q["backlog_bytes"] / 1024).to_list(), mode="lines",
                            name=policy if len(here) == 1 else f"{policy} · {port}",
                            line={"color": policy_color(policy), "width": 1.5,
                                  "dash": PORT_DASH[i % len(PORT_DASH)]})
    where = "the bottleneck port" if ports is None else ", ".join(ports) or "no port"
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, run, f"Queue at {where}", "time since the first op (s)",
                   "backlog (KiB)")


def lane_sojourn(run: Run, policies: list[str] | None = None, lanes: list[str] | None = None,
                 window: tuple[float, float] = (0.0, 1.0)) -> go.Figure:
    """Time in the bottleneck queue per lane (sampled packets), one CDF per policy and lane,
    over the part ``window`` (fractions from, to) of each policy's ops. ``lanes`` default:
    vip and low, or the lanes sampled when neither was (a run of TCP flows: normal)."""
    spans = metrics.part_of_windows(run["collectives"], window)
    frame = metrics.lane_sojourns(run["sojourn"], run.summary, spans)
    fig = go.Figure()
    sampled = [lane for lane in LANES if lane in set(frame["lane"])]
    if lanes is None:
        lanes = [lane for lane in sampled if lane in ("vip", "low")] or sampled
    for policy in list(run.summary.policies) if policies is None else policies:
        for lane in lanes:
            x, y = metrics.cdf(frame.filter((pl.col("policy") == policy)
                                             & (pl.col("lane") == lane))["sojourn_us"])
            if x:
                fig.add_scatter(x=x, y=y, mode="lines", name=f"{policy} · {lane}",
                                line={"shape": "hv", "color": policy_color(policy),
                                      "dash": LANE_DASH[lane]})
    fig.update_xaxes(type="log").update_layout(showlegend=True)  # one line: which lane
    _layout(fig, run, "Time in the bottleneck queue, per lane", "sojourn (µs, log scale)",
            "fraction of packets")
    return fig if fig.data else _say_empty(fig, "no packets sampled at the bottleneck port"
                                           + (f" in the {' or '.join(lanes)} lane" if sampled
                                              else ""))


def collective_latency(run: Run) -> go.Figure:
    """One-way latency of the collective's packets (sender's stamp to the receiver's NIC),
    one CDF per policy: what the queues along the path add, end to end."""
    spans = metrics.windows(metrics.op_times(run["collectives"]))
    cdfs = metrics.latency_cdfs(run["latency"], spans)
    fig = go.Figure()
    for policy in (p for p in run.summary.policies if p in cdfs):
        x, y = cdfs[policy]
        fig.add_scatter(x=x, y=y, mode="lines", name=policy,
                        line={"shape": "hv", "color": policy_color(policy)})
    fig.update_xaxes(type="log")
    return _layout(fig, run, "One-way latency of the collective's packets",
                   "latency (µs, log scale)", "fraction of packets")


def valve_timeline(run: Run, policy: str, seconds: float = 5.0) -> go.Figure:
    """What the valves let storage send over the first seconds of ``policy``'s ops, with
    the ops shaded and the bottleneck queue beside it: what the controller did, and when."""
    ops = metrics.op_times(run["collectives"]).filter(pl.col("policy") == policy).sort("start_ns")
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
    allowed = metrics.allowed_storage(run["controller"], policy, start, end, bneck.rate_mbps)
    fig.add_scatter(x=((allowed["t_ns"] - start) / 1e9).to_list(), y=allowed["mbps"].to_list(),
                    mode="lines", line={"shape": "hv", "color": "#000000", "width": 1.5},
                    name="storage allowed by the valves (Mbit/s)")
    q = metrics.backlog_series(run["queue"], policy, bneck.port, start, end)
    fig.add_scatter(x=((q["t_ns"] - start) / 1e9).to_list(),
                    y=(q["backlog_bytes"] / 1024).to_list(),
                    mode="lines", name=f"backlog at {bneck.port} (KiB)", yaxis="y2",
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
    frame = metrics.job_breakdown(run.summary)
    fig = go.Figure()
    for phase in ("compute", "wire_wait", "bubble"):
        fig.add_bar(x=frame["policy"].to_list(), y=frame[f"{phase}_ms"].to_list(),
                    name=PHASE_LABELS[phase], marker_color=PHASE_COLORS[phase])
    fig.update_layout(barmode="stack")
    return _layout(fig, run, "Where an iteration's time goes", "policy",
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
    return _style(fig, f"{kinds[0].upper()}{kinds[1:]} parallelism on the same fabric", sub,
                  "", "")


SWEEP_PALETTE = ("#0072B2", "#009E73", "#CC79A7", "#D55E00", "#E69F00", "#56B4E9")


def sweep_colors(names: list[str]) -> dict[str, str]:
    """A colour per sweep name, in order: pass the colours of all the sweeps to keep each
    one's colour when only some are drawn."""
    return {n: SWEEP_PALETTE[i % len(SWEEP_PALETTE)] for i, n in enumerate(names)}


def _per_size(sweeps: dict[str, list[dict]], column: str, scale: float = 1.0,
              colors: dict[str, str] | None = None) -> go.Figure:
    """``column`` (÷ ``scale``) against message size, one line per sweep, sizes on a log
    axis."""
    colors = colors or sweep_colors(list(sweeps))
    fig = go.Figure()
    for name, rows in sweeps.items():
        fig.add_scatter(x=[r["size"] for r in rows], y=[r[column] / scale for r in rows],
                        mode="lines+markers", name=name, line={"color": colors[name]})
    return fig.update_xaxes(type="log")


def sweep_busbw(sweeps: dict[str, list[dict]], sub: str,
                colors: dict[str, str] | None = None) -> go.Figure:
    """Bus bandwidth against message size, one line per sweep (``labkit sweep`` records),
    with the link rate the busbw can at most reach."""
    fig = _per_size(sweeps, "busbw_mbps", colors=colors)
    links = [r["link_mbps"] for rows in sweeps.values() for r in rows]
    if links:
        fig.add_hline(y=min(links), line_dash="dot",
                      annotation_text=f"link rate {min(links):g} Mbit/s")
    fig.update_yaxes(rangemode="tozero")
    return _style(fig, "All-Reduce bus bandwidth by message size", sub,
                  "message size (bytes, log scale)", "busbw (Mbit/s)")


def sweep_time(sweeps: dict[str, list[dict]], sub: str,
               colors: dict[str, str] | None = None) -> go.Figure:
    """One op's time against message size, one line per sweep, both axes logarithmic."""
    fig = _per_size(sweeps, "time_us", 1e3, colors).update_yaxes(type="log")
    return _style(fig, "All-Reduce time by message size", sub,
                  "message size (bytes, log scale)", "time (ms, log scale)")


def tuning_model(model: Model, sweeps: dict[str, list[dict]], sub: str) -> go.Figure:
    """A tuning's cost model ``time = alpha + size / beta`` per algorithm (lines) against
    the times it was fitted on (markers: every timed row), both axes logarithmic."""
    colors = sweep_colors(list(sweeps))
    fig = go.Figure()
    low, high = min(model.sizes), max(model.sizes)
    grid = [round(low * (high / low) ** (i / 48)) for i in range(49)]
    for algo, rows in sweeps.items():
        fig.add_scatter(x=[r["size"] for r in rows], y=[r["time_us"] / 1e3 for r in rows],
                        mode="markers", name=f"{algo} measured", legendgroup=algo,
                        marker={"color": colors[algo], "size": 7})
        if algo in model.fits:
            fit = model.fits[algo]
            fig.add_scatter(x=grid, y=[fit.predict(size) * 1e3 for size in grid],
                            mode="lines", legendgroup=algo,
                            name=f"{algo} model (rms error {fit.rms_rel_error:.1%})",
                            line={"color": colors[algo], "width": 1.5})
    fig.update_xaxes(type="log").update_yaxes(type="log")
    return _style(fig, "All-Reduce cost model against the measured times", sub,
                  "message size (bytes, log scale)", "time (ms, log scale)")


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _workload(run: Run) -> str:
    """What the collective lanes carry in this run: a training job, the user's program or
    the All-Reduce."""
    w = next(iter(run.summary.policies.values())).workload
    if isinstance(w, Job):
        return f"{w.parallelism}-parallel job"
    return f"your program {w.name}" if isinstance(w, Program) else "All-Reduce"


def _policy_of(run: Run, policy: str) -> PolicySummary:
    policies = run.summary.policies
    if policy not in policies:
        raise ValueError(f"{run.path}: no policy {policy!r} in this run "
                         f"(it has {', '.join(policies)})")
    return policies[policy]


def _job_of(run: Run, policy: str) -> Job:
    job = _policy_of(run, policy).workload
    if not isinstance(job, Job):
        raise ValueError(f"{run.path}: no training job in this run (it ran {job.KEY})")
    return job


def bottleneck_funnel(run: Run, policy: str = "fifo") -> go.Figure:
    """The funnel: the Mbit/s each lane offered the bottleneck port under ``policy``, what
    its queue let through and what it dropped (a Sankey, left), beside the port's p99
    sojourn, largest backlog and drops per lane under every policy (bars, right).

    A Sankey, because the story is conservation: the bands' widths are the measured
    rates, so the sources visibly add up to more than the one port's link rate, and the
    excess leaves as the drop band. The vip lane names the hosts whose stamped packets
    were sampled at the port; storage (TCP) carries no stamps, so its lane is one band."""
    b = _policy_of(run, policy).bottleneck
    port = b.port
    start, end = metrics.windows(metrics.op_times(run["collectives"]))[policy]
    rates = metrics.lane_rates(run["lanes"].filter(pl.col("policy") == policy), port,
                                start, end).filter(pl.col("offered_mbps") > 0)
    senders = metrics.port_senders(run["sojourn"], run["collectives"], policy, port,
                                    start, end)
    names = {"vip": (_workload(run), "vip lane" + (f" · from {', '.join(senders)}"
                                                   if senders else "")),
             "normal": ("other traffic", "normal lane"), "low": ("storage", "low lane")}
    lanes = rates["lane"].to_list()
    through, dropped = len(lanes) + 1, len(lanes) + 2
    labels = [_label([*names[lane], f"{mbps:.1f} Mbit/s offered"], SOURCE_LABEL_PX)
              for lane, mbps in zip(lanes, rates["offered_mbps"], strict=True)]
    labels += [f"{port}<br>{b.link}<br>{b.rate_mbps:g} Mbit/s link",
               f"through the queue<br>{rates['enqueued_mbps'].sum():.1f} Mbit/s",
               f"dropped<br>{rates['dropped_packets'].sum()} packets"]
    source, target, value, color = [], [], [], []
    for i, r in enumerate(rates.iter_rows(named=True)):
        for src, dst, mbps in ((i, len(lanes), r["offered_mbps"]),
                               (len(lanes), through, r["enqueued_mbps"]),
                               (len(lanes), dropped, r["dropped_mbps"])):
            if mbps > 0:
                source.append(src)
                target.append(dst)
                value.append(mbps)
                color.append(_rgba(LANE_COLORS[r["lane"]], 0.45))
    fig = make_subplots(
        rows=3, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.12,
        vertical_spacing=0.09,
        specs=[[{"type": "domain", "rowspan": 3}, {}], [None, {}], [None, {}]],
        subplot_titles=(f"under {policy}, in Mbit/s", "p99 time in the queue",
                        "largest backlog", "drops"))
    fig.add_sankey(
        node={"label": labels, "pad": 18, "thickness": 16, "line": {"width": 0},
              "x": [0.001] * len(lanes) + [0.4, 0.999, 0.999],
              "y": [*_stacked(rates["offered_mbps"].to_list()), 0.5,
                    *_stacked([float(rates[c].sum()) for c in ("enqueued_mbps",
                                                                "dropped_mbps")])],
              "color": [LANE_COLORS[lane] for lane in lanes]
              + [policy_color(policy), "#999999", "#000000"]},
        link={"source": source, "target": target, "value": value, "color": color},
        arrangement="fixed", valueformat=".1f", valuesuffix=" Mbit/s", row=1, col=1)
    policies = list(run.summary.policies)
    at_port = [p.bottleneck.lanes for p in run.summary.policies.values()]
    shown = [lane for lane in LANES if any(lanes.of(lane).packets for lanes in at_port)]
    panels: tuple[tuple[Callable[[BottleneckLane], float | None], float], ...] = (
        (lambda s: s.sojourn_p99_us, 1e3), (lambda s: s.max_backlog_bytes, 1024),
        (lambda s: s.drops, 1))
    for row, (figure, per_unit) in enumerate(panels, start=1):
        for lane in shown:
            y = [figure(lanes.of(lane)) for lanes in at_port]
            fig.add_bar(x=policies, y=[None if v is None else v / per_unit for v in y],
                        name=f"{lane} lane", marker_color=LANE_COLORS[lane],
                        legendgroup=lane, showlegend=row == 1, row=row, col=2)
    _layout(fig, run, f"The funnel: traffic converging on {port}", "", "")
    fig.update_yaxes(type="log", dtick=1, title_text="ms (log)", row=1, col=2)
    fig.update_yaxes(title_text="KiB", rangemode="tozero", row=2, col=2)
    fig.update_yaxes(title_text="packets", rangemode="tozero", row=3, col=2)
    fig.update_xaxes(showticklabels=False, row=1, col=2)
    fig.update_xaxes(showticklabels=False, row=2, col=2)
    ticks = [re.sub(r"([-+])", r"\1<br>", p) for p in policies]
    slanted = max(text_px(line, 11) for t in ticks for line in t.split("<br>")) > (
        BARS_PX / len(policies) - 6)  # policies' names that would run into each other
    fig.update_xaxes(tickangle=-35 if slanted else 0, tickfont={"size": 11},
                     tickvals=policies, ticktext=ticks, row=3, col=2)
    _top(fig, 110).update_layout(barmode="group", margin_b=100 if slanted else 70,
                                 legend={"orientation": "h", "x": 1, "xanchor": "right",
                                         "y": -0.2 if slanted else -0.1, "yanchor": "top"})
    return fig


# the width a source's label has before the port's node: the Sankey's share of the plot
# (column 1 of 2, 0.58 of it less the spacing), 0.4 of that, less the node and a gap
SOURCE_LABEL_PX = (WIDTH - 160) * 0.58 * (1 - 0.12) * 0.4 - 16 - 12
BARS_PX = (WIDTH - 160) * 0.42 * (1 - 0.12)  # the width of the bars' column


def _label(parts: list[str], width_px: float) -> str:
    """A Sankey node's label: ``parts`` one to a line, each wrapped to ``width_px``."""
    return "<br>".join(line for part in parts for line in wrap(part, FONT_PX, width_px, " "))


def _stacked(values: list[float]) -> list[float]:
    """Centres (0 top, 1 bottom) of Sankey nodes of ``values`` stacked in one column in
    order: each node inside the column, whatever its share."""
    total = sum(values) or 1.0
    ends = [sum(values[:i + 1]) / total for i in range(len(values))]
    return [end - v / total / 2 for end, v in zip(ends, values, strict=True)]


def three_stages(run: Run) -> go.Figure:
    """The three stages side by side, each with the policies of this run that stand for
    it (:func:`labkit.analysis.metrics.stage_of`): what each stage improves, the collective's p99
    slowdown (its p99 in ms when the run has no isolated baseline) and vip drops at the
    bottleneck, and what storage pays for it, its goodput (with the bottleneck port's use
    on each bar). A stage without a policy in the run is left out, and a note says so."""
    frame = metrics.stage_frame(run.summary)
    if frame.filter(pl.col("stage") == 1).is_empty():
        raise ValueError(f"{run.path}: no fifo policy in this run: no bottleneck stage")
    slowdown = frame["slowdown_p99"].is_not_null().all()
    shown = [stage for stage in metrics.STAGES if stage in set(frame["stage"])]
    slots: list[tuple[float, dict]] = []  # x, the policy's row
    x = 0.0
    for stage in shown:
        for r in frame.filter(pl.col("stage") == stage).iter_rows(named=True):
            slots.append((x, r))
            x += 1
        x += 0.6
    title = ("Three stages: bottleneck, priority lanes, adaptive control"
             if len(shown) == len(metrics.STAGES) else
             f"Stages {' and '.join(map(str, shown))} of three: "
             + ", ".join(metrics.STAGES[s] for s in shown))
    fig = _layout(make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07),
                  run, title, "", "")
    panels = (("slowdown_p99", "p99 slowdown") if slowdown else ("p99_ms", "p99 (ms)"),
               ("vip_drops", "vip drops"), ("storage_mbps", "storage Mbit/s"))
    for row, (column, axis_title) in enumerate(panels, start=1):
        tallest = max((r[column] or 0 for _, r in slots), default=0) or 1
        for x, r in slots:
            used = column == "storage_mbps"
            fig.add_bar(x=[x], y=[r[column]], width=0.7, name=r["policy"],
                        text=f"port<br>{r['bottleneck_used']:.0%} used" if used else None,
                        textangle=0, insidetextanchor="end", constraintext="none",
                        cliponaxis=False, textfont={"size": 11},
                        textposition="inside" if (r[column] or 0) > tallest / 3 else "outside",
                        marker_color=policy_color(r["policy"]), showlegend=False,
                        row=row, col=1)
        fig.update_yaxes(title_text=axis_title, rangemode="tozero", row=row, col=1)
    if slowdown:
        fig.add_hline(y=1, line_dash="dot", annotation_text="isolated = 1", row=1, col=1)
    for stage in shown:
        xs = [x for x, r in slots if r["stage"] == stage]
        fig.add_vrect(x0=min(xs) - 0.5, x1=max(xs) + 0.5, fillcolor="#000000",
                      opacity=0.04 * stage, line_width=0, row="all", col=1)
        fig.add_annotation(x=sum(xs) / len(xs), y=1.0, xref="x", yref="paper", yshift=6,
                           yanchor="bottom", showarrow=False,
                           text=f"<b>{stage} · {metrics.STAGES[stage]}</b>")
    if absent := [s for s in metrics.STAGES if s not in shown]:
        fig.add_annotation(text="not in this run: " + "; ".join(
            f"{s} · {metrics.STAGES[s]} ({ABSENT_STAGE[s]})" for s in absent),
            xref="paper", yref="paper", x=0, y=-0.16, xanchor="left", yanchor="top",
            showarrow=False, font={"size": 11, "color": "#555555"})
    fig.update_xaxes(tickvals=[x for x, _ in slots],
                     ticktext=[_stage_tick(r) for _, r in slots], row=3, col=1)
    _top(fig, 120).update_layout(barmode="overlay", margin_b=100 if absent else 80)
    return fig


ABSENT_STAGE = {1: "no fifo policy", 2: "no priority policy",
                3: "no policy with a controller"}


def _stage_tick(row: dict) -> str:
    """A stage policy's tick: a controller alone runs over FIFO ports, and says so."""
    policy = row["policy"]
    return f"{policy}<br>(FIFO ports)" if row["stage"] == 3 and "+" not in policy else policy


def job_timeline(run: Run, ops: tuple[int, ...] = (0, 1),
                 policies: list[str] | None = None) -> go.Figure:
    """Per rank, the iterations ``ops`` of a training job as they ran, one panel per
    policy (shared time axis): a bar spans each rank's iteration from its measured start
    to its end, in the colour of sending and other work, and on it are the spans the rank
    recorded (``phases`` table, :func:`labkit.analysis.metrics.phase_spans`): when it computed,
    waited for data on the wire and waited for a peer that had not sent (bubbles). A run
    recorded before that table has only each iteration's sums: they are laid end to end
    in that order (:func:`labkit.analysis.metrics.summed_spans`), and the note says so. A dotted
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
    _layout(fig, run, f"Per-rank timeline of the {_workload(run)}", "", "")
    for row, policy in enumerate(policies, start=1):
        iterations = metrics.iteration_phases(run["collectives"], policy, list(ops))
        spans = (metrics.phase_spans(run["collectives"], run["phases"], policy, list(ops))
                 if recorded else metrics.summed_spans(iterations))
        _timeline_panel(fig, row, iterations, spans)
    fig.update_xaxes(title_text="time since the first rank started (ms)", row=len(policies),
                     col=1)
    _top(fig, 100).update_layout(barmode="overlay", bargap=0.25, margin_b=90)
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
                                          for phase in metrics.SPAN_PHASES]
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
    return _style(fig, title, sub, "time in the iteration (ms)", "stage (host)")


def victim_io(runs: dict[str, Run], entry: str = "victim", policy: str = "fifo") -> go.Figure:
    """CDFs of one storage entry's I/O completion times under ``policy``, one line per run
    (``runs``: a name for each, e.g. lossy and lossless): congestion spreading, as the
    victim of a paused fabric sees it."""
    spans = {name: metrics.windows(metrics.op_times(run["collectives"]))[policy]
             for name, run in runs.items()}
    cdfs = metrics.io_latency_cdfs({name: run["ios"] for name, run in runs.items()}, spans,
                                    entry, policy)
    fig = go.Figure()
    for i, (name, (x, y)) in enumerate(cdfs.items()):
        fig.add_scatter(x=x, y=y, mode="lines", name=name,
                        line={"shape": "hv", "dash": PORT_DASH[i % len(PORT_DASH)],
                              "color": policy_color(policy)})
    return _style(fig, f"I/O completion time of {entry} under {policy}", runs_subtitle(runs),
                  "I/O completion time (ms)", "fraction of I/Os")


def runs_subtitle(runs: dict[str, Run]) -> str:
    """Where a figure drawn from several runs of one scenario came from (:func:`subtitle`
    for one run)."""
    first = next(iter(runs.values()))
    return (f"{first.summary.scenario} · runs "
            f"{', '.join(r.summary.run_id for r in runs.values())} · 1 emulated Mbit/s = "
            f"{first.summary.scale_factor:g} real Mbit/s · "
            f"{recorded_by(first.manifest.provenance)}")


NODE_COLORS = {"gpu": "#0072B2", "storage": "#E69F00", "router": "#000000",
               "nvswitch": "#009E73"}
LINK_STYLES = {"bottleneck": ("bottleneck link", "#D55E00", 4, "solid"),
               "link": ("link", "#999999", 2, "solid"), "nvlink": ("NVLink", "#009E73", 2, "dot")}


def fabric_map(desc: dict) -> go.Figure:
    """A scenario's fabric (:func:`labkit.analysis.describe.fabric`) in tiers: upper
    routers, leaves, hosts (NVLink switches below their GPUs); bottleneck links stand out,
    and hovering shows ports, addresses and rates."""
    pos = _tiers(desc["nodes"])
    scale = desc["scale_factor"]
    fig = go.Figure()
    for style, (name, color, width, dash) in LINK_STYLES.items():
        links = [k for k in desc["links"] if style == (
            "bottleneck" if k["bottleneck"] else "nvlink" if k["kind"] == "nvlink" else "link")]
        if not links:
            continue
        ends = [[pos[e["node"]] for e in k["ends"]] for k in links]
        fig.add_scatter(x=[p[0] for a, b in ends for p in (a, b, (None, None))],
                        y=[p[1] for a, b in ends for p in (a, b, (None, None))],
                        mode="lines", name=name, hoverinfo="skip",
                        line={"color": color, "width": width, "dash": dash})
        fig.add_scatter(x=[(a[0] + b[0]) / 2 for a, b in ends],
                        y=[(a[1] + b[1]) / 2 for a, b in ends], mode="markers",
                        showlegend=False, marker={"size": 14, "color": color, "opacity": 0},
                        hovertext=[_link_hover(k, scale) for k in links], hoverinfo="text")
    for kind, color in NODE_COLORS.items():
        nodes = [n for n in desc["nodes"] if (n["role"] or n["kind"]) == kind]
        if not nodes:
            continue
        fig.add_scatter(x=[pos[n["name"]][0] for n in nodes],
                        y=[pos[n["name"]][1] for n in nodes], mode="markers+text",
                        name=KIND_NAMES[kind], text=[n["name"] for n in nodes],
                        textposition="top center" if kind == "router" else "bottom center",
                        marker={"size": 18 if kind == "router" else 14, "color": color,
                                "symbol": "square" if kind == "router" else "circle"},
                        hovertext=[_node_hover(n) for n in nodes], hoverinfo="text")
    alike: dict[str, list[str]] = {}  # bottlenecks of one rate and buffer together
    for b in desc["bottlenecks"]:
        alike.setdefault(f"{rate_text(b['rate_mbps'], scale)}, {b['buffer_kb']} KiB buffer",
                         []).append(b["link"])
    sub = " · ".join([desc["file"], f"{len(desc['nodes'])} nodes, {len(desc['links'])} links",
                      *(f"bottleneck {', '.join(names)}: {what}" for what, names in alike.items())])
    _style(fig, f"Fabric of {desc['scenario']}", sub, "", "")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig.update_layout(hovermode="closest", hoverlabel={"align": "left"})


def _tiers(nodes: list[dict]) -> dict[str, tuple[float, float]]:
    """Where each node is drawn: ``y`` its level; hosts in a row grouped by router, a leaf
    or NVLink switch above or below its hosts, other routers spread over the width."""
    hosts = [n for n in nodes if n["kind"] == "host"]
    order = [n["name"] for n in nodes if n["kind"] == "router"]
    row = sorted(hosts, key=lambda n: order.index(n["router"]))
    pos, x = {}, 0.0
    for before, n in zip([None, *row], row, strict=False):
        if before:  # a wider gap between two routers' hosts
            x += 1.0 if n["router"] == before["router"] else 1.6
        pos[n["name"]] = (x, 0.0)
    levels: dict[int, list[dict]] = {}
    for n in nodes:
        if n["kind"] != "host":
            levels.setdefault(n["level"], []).append(n)
    for level, group in levels.items():
        for i, n in enumerate(group):
            under = [pos[h["name"]][0] for h in hosts if n["name"] in (h["router"], h["server"])]
            pos[n["name"]] = (sum(under) / len(under) if under else
                              x * (i + 0.5) / len(group), float(level))
    return pos


def _link_hover(link: dict, scale: float) -> str:
    a, b = link["ends"]
    return (f"<b>{link['name']}</b>{' · bottleneck' if link['bottleneck'] else ''}<br>"
            f"{a['ifname']} {a['address']} ↔ {b['ifname']} {b['address']}<br>"
            f"{rate_text(link['rate_mbps'], scale)} · MTU {link['mtu']} · "
            f"buffer {link['buffer_kb']} KiB per port"
            + (f" · loses {link['loss_percent']:g} %" if link["loss_percent"] else ""))


def _node_hover(node: dict) -> str:
    return f"<b>{node['name']}</b> · {kind_text(node)}<br>" + "<br>".join(
        f"{p['ifname']} {p['address']} → {p['peer']}" for p in node["ports"])


DCTCP_COLORS = ("#0072B2", "#D55E00", "#009E73")  # one per run


def dctcp_queue(runs: dict[str, Run], policy: str = "fifo",
                seconds: tuple[float, float] = (1.0, 7.0), zoom_s: float = 0.5) -> go.Figure:
    """The queue at each run's busiest bottleneck port in full frames (``runs``: a name for
    each, e.g. DCTCP and TCP): above, all of them over ``seconds`` of their ops (from
    their start); below, the run that marks at K over its first ``zoom_s`` of them, with
    what the DCTCP paper's analysis predicts for its N lk_dctcp flows: the queue peaks at
    ``Q_max = K + N`` and swings ``A = ½·√(2N(C·RTT + K))`` below it (C·RTT, the path's
    own packets in flight, taken as 0: the emulated links have no propagation delay)."""
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.14,
                        subplot_titles=("all runs", "the run that marks at K, closer"))
    marking: tuple[int, int] | None = None  # the marking run's K and N
    for i, (name, run) in enumerate(runs.items()):
        p = _policy_of(run, policy)
        port = p.bottleneck.port
        ports = p.queues.ports if p.queues else {}
        frame = next((q.frame_bytes for label, q in ports.items() if label.endswith(f"/{port}")),
                     1514)  # a standard frame, for a run recorded without transport
        start = metrics.windows(metrics.op_times(run["collectives"]))[policy][0]
        spans = [seconds]
        if p.queues and p.queues.k_packets and p.tcp:
            spans.append((seconds[0], seconds[0] + zoom_s))
            marking = (p.queues.k_packets,
                       sum(1 for f in p.tcp.flows.values() if f.windows >= 100))
        for row, (a, b) in enumerate(spans, start=1):
            q = metrics.backlog_series(run["queue"], policy, port, start + int(a * 1e9),
                                       start + int(b * 1e9))
            fig.add_scatter(x=((q["t_ns"] - start) / 1e9).to_list(),
                            y=(q["backlog_bytes"] / frame).to_list(), mode="lines",
                            name=name, showlegend=row == 1, row=row, col=1,
                            line={"width": 1.5, "color": DCTCP_COLORS[i % len(DCTCP_COLORS)]})
    if marking:
        k, n = marking
        q_max, amplitude = k + n, 0.5 * (2 * n * k) ** 0.5
        fig.add_hrect(y0=q_max - amplitude, y1=q_max, line_width=0, fillcolor="#0072B2",
                      opacity=0.12, row=2, col=1, annotation_position="top left",
                      annotation_text=f"Q_max = K + N = {q_max}, A = {amplitude:.1f}")
        fig.add_hline(y=k, line={"dash": "dot", "color": "#555555"}, row=2, col=1,
                      annotation_text=f"K = {k}", annotation_position="bottom right")
    fig = _style(fig, "The queue at the bottleneck port", runs_subtitle(runs), "", "")
    fig.update_xaxes(title_text="time since the first op (s)", row=2, col=1)
    fig.update_yaxes(title_text="queue (full frames)")
    return fig.update_layout(height=620)
