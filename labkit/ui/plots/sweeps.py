"""The figures of sweeps and tunings: bus bandwidth and time against message size, one line
per sweep, and a tuning's cost model against the times it was fitted on."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.model.autotune import Model
from labkit.ui.plots.theme import themed

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
    return themed(fig, "All-Reduce bus bandwidth by message size", sub,
                  "message size (bytes, log scale)", "busbw (Mbit/s)")


def sweep_time(sweeps: dict[str, list[dict]], sub: str,
               colors: dict[str, str] | None = None) -> go.Figure:
    """One op's time against message size, one line per sweep, both axes logarithmic."""
    fig = _per_size(sweeps, "time_us", 1e3, colors).update_yaxes(type="log")
    return themed(fig, "All-Reduce time by message size", sub,
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
    return themed(fig, "All-Reduce cost model against the measured times", sub,
                  "message size (bytes, log scale)", "time (ms, log scale)")
