"""ipywidgets over a recorded run: pick policies and lanes, a time window and a
percentile, and the linked figures and table below redraw.

Notebooks stay thin: ``widgets.explorer(run)`` is one cell.
"""

from __future__ import annotations

import ipywidgets as w
import plotly.graph_objects as go
import polars as pl

from labkit import analysis, plots
from labkit.rundir import Run

PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}


def lane_table(run: Run, policies: list[str], lanes: list[str], window: tuple[float, float],
               q: float) -> pl.DataFrame:
    """Sojourn at the ``q`` quantile (µs) per policy and lane, over the part of each
    policy's window given as fractions ``window`` = (from, to)."""
    spans = analysis.part_of_windows(run["collectives"], window)
    frame = analysis.lane_sojourns(run["sojourn"], run.summary, spans)
    return (frame.filter(pl.col("policy").is_in(policies) & pl.col("lane").is_in(lanes))
            .group_by("policy", "lane", maintain_order=True)
            .agg(pl.col("sojourn_us").quantile(q, interpolation="linear").round(1)
                 .alias("sojourn_us"), pl.len().alias("packets"))
            .sort("policy", "lane"))


def explorer(run: Run) -> w.VBox:
    """Policy and lane pickers, a time-window slider and a percentile selector, linked to
    the per-lane sojourn CDFs (a plotly FigureWidget, redrawn in place) and a table of the
    chosen percentile."""
    policies = list(run.summary["policies"])
    pick = w.SelectMultiple(options=policies, value=tuple(policies), description="policies")
    lanes = w.SelectMultiple(options=["vip", "normal", "low"], value=("vip", "low"),
                             description="lanes")
    window = w.FloatRangeSlider(value=(0.0, 1.0), min=0.0, max=1.0, step=0.05,
                                description="window", readout_format=".0%")
    pct = w.Dropdown(options=list(PERCENTILES), value="p99", description="percentile")
    figure = go.FigureWidget(plots.lane_sojourn(run, policies, list(lanes.value)))
    table = w.HTML()

    def redraw(*_):
        chosen = [p for p in policies if p in pick.value]
        fresh = plots.lane_sojourn(run, chosen, list(lanes.value), window.value)
        with figure.batch_update():
            figure.data = []
            figure.add_traces(list(fresh.data))
        rows = lane_table(run, chosen, list(lanes.value), window.value, PERCENTILES[pct.value])
        table.value = f"<b>sojourn at {pct.value} (µs)</b>" + rows._repr_html_()

    for control in (pick, lanes, window, pct):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([pick, lanes]), w.HBox([window, pct]), figure, table])

