"""The bottleneck's story in two figures: the funnel (what each lane offered the
bottleneck port, what its queue let through and dropped) and the three stages side by side
(bottleneck, priority lanes, adaptive control: what each improves and what storage pays)."""

from __future__ import annotations

import re
from collections.abc import Callable

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from labkit.analysis import frames
from labkit.analysis.ports import lane_rates
from labkit.analysis.windows import op_times, windows
from labkit.model.abi import LANES
from labkit.model.summary import BottleneckLane
from labkit.runs.rundir import Run
from labkit.ui.plots.theme import (
    FONT_PX,
    LANE_COLORS,
    WIDTH,
    policy_color,
    policy_of,
    text_px,
    titled,
    top_margin,
    workload_of,
    wrap,
)


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def bottleneck_funnel(run: Run, policy: str = "fifo") -> go.Figure:
    """The funnel: the Mbit/s each lane offered the bottleneck port under ``policy``, what
    its queue let through and what it dropped (a Sankey, left), beside the port's p99
    sojourn, largest backlog and drops per lane under every policy (bars, right).

    A Sankey, because the story is conservation: the bands' widths are the measured
    rates, so the sources visibly add up to more than the one port's link rate, and the
    excess leaves as the drop band. The vip lane names the hosts whose stamped packets
    were sampled at the port; storage (TCP) carries no stamps, so its lane is one band."""
    b = policy_of(run, policy).bottleneck
    port = b.port
    start, end = windows(op_times(run["collectives"]))[policy]
    rates = lane_rates(run["lanes"].filter(pl.col("policy") == policy), port,
                       start, end).filter(pl.col("offered_mbps") > 0)
    senders = frames.port_senders(run["sojourn"], run["collectives"], policy, port,
                                  start, end)
    names = {"vip": (workload_of(run), "vip lane" + (f" · from {', '.join(senders)}"
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
    titled(fig, run, f"The funnel: traffic converging on {port}", "", "")
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
    top_margin(fig, 110).update_layout(barmode="group", margin_b=100 if slanted else 70,
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
    it (:func:`labkit.analysis.frames.stage_of`): what each stage improves, the collective's p99
    slowdown (its p99 in ms when the run has no isolated baseline) and vip drops at the
    bottleneck, and what storage pays for it, its goodput (with the bottleneck port's use
    on each bar). A stage without a policy in the run is left out, and a note says so."""
    frame = frames.stage_frame(run.summary)
    if frame.filter(pl.col("stage") == 1).is_empty():
        raise ValueError(f"{run.path}: no fifo policy in this run: no bottleneck stage")
    slowdown = frame["slowdown_p99"].is_not_null().all()
    shown = [stage for stage in frames.STAGES if stage in set(frame["stage"])]
    slots: list[tuple[float, dict]] = []  # x, the policy's row
    x = 0.0
    for stage in shown:
        for r in frame.filter(pl.col("stage") == stage).iter_rows(named=True):
            slots.append((x, r))
            x += 1
        x += 0.6
    title = ("Three stages: bottleneck, priority lanes, adaptive control"
             if len(shown) == len(frames.STAGES) else
             f"Stages {' and '.join(map(str, shown))} of three: "
             + ", ".join(frames.STAGES[s] for s in shown))
    fig = titled(make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07),
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
                           text=f"<b>{stage} · {frames.STAGES[stage]}</b>")
    if absent := [s for s in frames.STAGES if s not in shown]:
        fig.add_annotation(text="not in this run: " + "; ".join(
            f"{s} · {frames.STAGES[s]} ({ABSENT_STAGE[s]})" for s in absent),
            xref="paper", yref="paper", x=0, y=-0.16, xanchor="left", yanchor="top",
            showarrow=False, font={"size": 11, "color": "#555555"})
    fig.update_xaxes(tickvals=[x for x, _ in slots],
                     ticktext=[_stage_tick(r) for _, r in slots], row=3, col=1)
    top_margin(fig, 120).update_layout(barmode="overlay", margin_b=100 if absent else 80)
    return fig


ABSENT_STAGE = {1: "no fifo policy", 2: "no priority policy",
                3: "no policy with a controller"}


def _stage_tick(row: dict) -> str:
    """A stage policy's tick: a controller alone runs over FIFO ports, and says so."""
    policy = row["policy"]
    return f"{policy}<br>(FIFO ports)" if row["stage"] == 3 and "+" not in policy else policy
