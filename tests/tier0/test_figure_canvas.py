"""Every figure `labkit figures` draws from every shipped sample (data/sample/): no panel
without data that does not say so, no count axis below zero, and no text off its canvas
or over the title.

The figures are checked as plotly describes them, not rendered (kaleido takes seconds a
figure): the canvas is the one `labkit figures` renders (``plots.WIDTH`` x ``plots.HEIGHT``),
each text's box is placed as plotly.js places it (titles, annotations, subplot titles, a
Sankey's node labels and nodes), and its width is estimated by ``plots.text_px`` from the
widths of the font Chromium draws with here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from labkit.ui import figures, plots

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "sample"
LINE = 1.3  # plotly.js's line height, in font sizes
MARGIN = {"l": 80, "r": 80, "t": 100, "b": 80}  # plotly's defaults
SLACK = 2  # px a text may be off by before it counts


def recorded() -> list[Path]:
    """Every run, sweep and tuning shipped (a recording in progress left out)."""
    found = {f.parent for name in ("manifest.json", "sweep.json") for f in SAMPLES.rglob(name)}
    return sorted(d for d in found
                  if not any(p.startswith(".") for p in d.relative_to(SAMPLES).parts)
                  and not (d / "runs").is_dir())


@dataclass(frozen=True)
class Box:
    what: str
    x0: float
    x1: float
    y0: float  # top
    y1: float

    def overlaps(self, other: Box) -> bool:
        return (self.x0 < other.x1 - SLACK and other.x0 < self.x1 - SLACK
                and self.y0 < other.y1 - SLACK and other.y0 < self.y1 - SLACK)


class Canvas:
    """Where plotly.js puts things on a figure drawn at ``plots.WIDTH`` x ``plots.HEIGHT``."""

    def __init__(self, fig):
        self.fig, self.layout = fig, fig.layout
        self.w = self.layout.width or plots.WIDTH
        self.h = self.layout.height or plots.HEIGHT
        m = self.layout.margin
        self.m = {k: MARGIN[k] if getattr(m, k) is None else getattr(m, k) for k in MARGIN}
        self.font = self.layout.font.size or 12

    def px_x(self, frac: float) -> float:
        return self.m["l"] + frac * (self.w - self.m["l"] - self.m["r"])

    def px_y(self, frac: float) -> float:
        return self.h - self.m["b"] - frac * (self.h - self.m["t"] - self.m["b"])

    def axis(self, ref: str):
        return self.layout[ref[0] + "axis" + ref[1:]]

    def domain(self, ref: str) -> tuple[float, float]:
        return tuple(self.axis(ref).domain or (0, 1))

    def data_range(self, ref: str) -> tuple[float, float]:
        """An axis's range (log axes: in decades): its own, else plotly's autorange over
        its traces' values and its shapes (bars' half widths, 5 % around points, zero
        for ``tozero``)."""
        ax, a = self.axis(ref), ref[0]
        log = ax.type == "log"
        if ax.range:
            return tuple(ax.range)
        found, pad = [], 0.0
        for t in self.fig.data:
            if (getattr(t, a + "axis", None) or a) == ref:
                found += values(t, a)
                pad = max(pad, (t.width or 0.8) / 2 if t.type == "bar" else 0)
        found += [v for s in self.layout.shapes if (s[a + "ref"] or a) == ref
                  for v in (s[a + "0"], s[a + "1"]) if isinstance(v, int | float)]
        if log:
            found = [math.log10(v) for v in found if v > 0]
        if ax.rangemode == "tozero" and not log:
            found.append(0)
        if not found:
            return (0, 1)
        lo, hi = min(found), max(found)
        pad = pad or 0.05 * (hi - lo)
        return lo - pad, hi + pad

    def place(self, value: float, ref: str | None, axis: str) -> float:
        """Pixels from the left (``axis`` 'x') or top ('y') of a position given in ``ref``."""
        ref = ref or "paper"
        to_px = self.px_x if axis == "x" else self.px_y
        if ref == "paper":
            return to_px(value)
        if ref.endswith(" domain"):
            d0, d1 = self.domain(ref.split()[0])
            return to_px(d0 + value * (d1 - d0))
        lo, hi = self.data_range(ref)
        if self.axis(ref).type == "log":
            value = math.log10(value) if value > 0 else lo
        d0, d1 = self.domain(ref)
        return to_px(d0 + (value - lo) / ((hi - lo) or 1) * (d1 - d0))


def lines(text: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", line) for line in (text or "").split("<br>")]


def width(text: str, size: float) -> float:
    bold = 1.1 if "<b>" in (text or "") else 1.0
    return bold * max(plots.text_px(line, size) for line in lines(text))


def anchored(start: float, size: float, anchor: str) -> tuple[float, float]:
    """The span of a text ``size`` long whose ``anchor`` (left/top, center/middle,
    right/bottom) is at ``start``."""
    before = {"left": 0, "top": 0, "center": 0.5, "middle": 0.5}.get(anchor, 1)
    return start - before * size, start + (1 - before) * size


def auto_anchor(frac: float, ref: str | None, names: tuple[str, str, str]) -> str:
    """plotly.js's 'auto' anchor: by thirds of the paper, centred on data."""
    if ref in (None, "paper") or str(ref).endswith("domain"):
        return names[0] if frac < 1 / 3 else names[2] if frac > 2 / 3 else names[1]
    return names[1]


def title_box(c: Canvas) -> Box:
    title = c.layout.title
    size = title.font.size or c.font * 1.4
    rows = lines(title.text)
    w = max(plots.text_px(row, size if i == 0 else size * 0.7) for i, row in enumerate(rows))
    x0 = (title.x if title.x is not None else 0.05) * c.w
    h = len(rows) * LINE * size
    return Box(f"title {rows[0]!r}", x0, x0 + w, c.m["t"] / 2 - h / 2, c.m["t"] / 2 + h / 2)


def annotation_boxes(c: Canvas) -> list[Box]:
    boxes = []
    for a in c.layout.annotations:
        size = (a.font.size if a.font else None) or c.font
        w, h = width(a.text, size), len(lines(a.text)) * LINE * size
        x, y = c.place(a.x, a.xref, "x") + (a.xshift or 0), c.place(a.y, a.yref, "y") - (
            a.yshift or 0)
        xa = a.xanchor if a.xanchor not in (None, "auto") else auto_anchor(
            a.x, a.xref, ("left", "center", "right"))
        ya = a.yanchor if a.yanchor not in (None, "auto") else auto_anchor(
            a.y, a.yref, ("bottom", "middle", "top"))
        (x0, x1), (y0, y1) = anchored(x, w, xa), anchored(y, h, ya)
        boxes.append(Box(f"annotation {lines(a.text)[0]!r}", x0, x1, y0, y1))
    return boxes


def sankey_boxes(c: Canvas) -> tuple[list[Box], list[str]]:
    """Each node and its label, as plotly.js lays out a Sankey of fixed node positions
    (``x``, ``y`` their centres; a column: the nodes of one ``x``), and the labels that
    run into the next column's nodes."""
    boxes: list[Box] = []
    spilled: list[str] = []
    for t in (t for t in c.fig.data if t.type == "sankey" and t.node.x):
        n, (dx0, dx1), (dy0, dy1) = t.node, t.domain.x or (0, 1), t.domain.y or (0, 1)
        left, top = c.px_x(dx0), c.px_y(dy1)
        dw, dh = c.px_x(dx1) - left, c.px_y(dy0) - top
        flows_in, flows_out = [0.0] * len(n.x), [0.0] * len(n.x)
        for s, d, v in zip(t.link.source, t.link.target, t.link.value, strict=True):
            flows_out[s] += v
            flows_in[d] += v
        value = [max(a, b) for a, b in zip(flows_in, flows_out, strict=True)]
        shown = [i for i, v in enumerate(value) if v > 0]
        columns = sorted({n.x[i] for i in shown})
        pad, thick = n.pad or 20, n.thickness or 20
        ky = min((dh - pad * (sum(n.x[i] == x for i in shown) - 1))
                 / sum(value[i] for i in shown if n.x[i] == x) for x in columns)
        for i in shown:
            cx, cy, h = left + n.x[i] * dw, top + n.y[i] * dh, value[i] * ky
            boxes.append(Box(f"sankey node {lines(n.label[i])[0]!r}", cx, cx,
                             cy - h / 2, cy + h / 2))
            w, lh = width(n.label[i], c.font), len(lines(n.label[i])) * LINE * c.font
            col = columns.index(n.x[i])
            if n.x[i] < 0.5:  # label to the right, up to the next column's nodes
                x0, x1 = cx + thick / 2 + 4, cx + thick / 2 + 4 + w
                limit = left + columns[col + 1] * dw - thick / 2
                spill = x1 - limit
            else:
                x0, x1 = cx - thick / 2 - 4 - w, cx - thick / 2 - 4
                spill = (left + columns[col - 1] * dw + thick / 2) - x0
            what = f"sankey label {lines(n.label[i])[0]!r}"
            if spill > SLACK:
                spilled.append(f"{what} runs {spill:.0f} px into the next nodes")
            boxes.append(Box(what, x0, x1, cy - lh / 2, cy + lh / 2))
    return boxes, spilled


def off_canvas(fig) -> list[str]:
    c = Canvas(fig)
    nodes, problems = sankey_boxes(c)
    title, others = title_box(c), annotation_boxes(c) + nodes
    problems += [f"{b.what} is off the canvas ({b.x0:.0f}..{b.x1:.0f} x {b.y0:.0f}..{b.y1:.0f}"
                f" of {c.w} x {c.h})" for b in (title, *others)
                if b.x0 < -SLACK or b.y0 < -SLACK or b.x1 > c.w + SLACK or b.y1 > c.h + SLACK]
    problems += [f"{b.what} overlaps the {title.what}" for b in others if b.overlaps(title)]
    problems += [f"{b.what} reaches above the plot, into the title"
                 for b in others if b.what.startswith("sankey node") and b.y0 < c.m["t"] - 1]
    return problems


def panels(c: Canvas) -> list[tuple[str, str]]:
    """(x, y) of every cartesian panel: each x axis and the y axis it is anchored to."""
    keys = [k for k in c.layout.to_plotly_json() if re.fullmatch(r"xaxis\d*", k)] or ["xaxis"]
    return [("x" + k[5:], c.layout[k].anchor or "y" + k[5:]) for k in keys]


def values(trace, axis: str) -> list[float]:
    return [v for v in (trace[axis] if trace[axis] is not None else ())
            if isinstance(v, int | float)]


def empty_panels(fig) -> list[str]:
    """Panels with no data that do not say so with a text inside them."""
    c, problems = Canvas(fig), []
    notes = annotation_boxes(c)
    for x, y in panels(c):
        on = [t for t in fig.data if t.type in ("scatter", "bar")
              and (t.xaxis or "x", t.yaxis or "y") == (x, y)]
        if any(values(t, "x" if t.orientation == "h" else "y") for t in on):
            continue
        (x0, x1), (y0, y1) = c.domain(x), c.domain(y)
        inside = Box("panel", c.px_x(x0), c.px_x(x1), c.px_y(y1), c.px_y(y0))
        if not any(n.overlaps(inside) for n in notes):
            problems.append(f"panel {x}/{y} is empty and does not say why")
    problems += [f"a Sankey with no flow ({t.name})" for t in fig.data
                 if t.type == "sankey" and not any(v > 0 for v in t.link.value or ())]
    return problems


def below_zero(fig) -> list[str]:
    """Panels whose y axis plotly would extend below zero although nothing there is:
    autoranged, linear, with no rangemode that stops at 0, over bars that are all 0 or
    points that are all one value >= 0 (plotly draws one value v from v - 1 to v + 1)."""
    c, problems = Canvas(fig), []
    for x, y in panels(c):
        ax = c.axis(y)
        on = [t for t in fig.data if t.type in ("scatter", "bar") and t.orientation != "h"
              and (t.xaxis or "x", t.yaxis or "y") == (x, y)]
        ys = [v for t in on for v in values(t, "y")]
        if (not ys or min(ys) < 0 or ax.range or ax.type in ("log", "category")
                or ax.rangemode in ("tozero", "nonnegative")):
            continue
        if max(ys) == 0 or (min(ys) == max(ys) and not any(t.type == "bar" for t in on)):
            problems.append(f"panel {x}/{y}: values from 0 up, drawn from below 0")
    return problems


@pytest.mark.parametrize("path", recorded(), ids=lambda p: str(p.relative_to(SAMPLES)))
def test_every_figure_of_every_sample_has_data_and_fits_its_canvas(path):
    drawn = 0
    for name, build in figures.figure_set(figures.load(path)):
        fig = build()
        problems = empty_panels(fig) + below_zero(fig) + off_canvas(fig)
        assert not problems, f"{path.relative_to(SAMPLES)}: {name}: " + "; ".join(problems)
        drawn += 1
    assert drawn >= 2


def test_the_checks_catch_what_they_are_for():
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1)
    fig.add_bar(x=["fifo"], y=[0], row=1, col=1)
    fig.update_layout(title_text="t<br><sup>" + "a long subtitle " * 12 + "</sup>")
    assert empty_panels(fig) == ["panel x2/y2 is empty and does not say why"]
    assert below_zero(fig) == ["panel x/y: values from 0 up, drawn from below 0"]
    assert any("off the canvas" in p for p in off_canvas(fig))
    fig.add_annotation(text="no packets sampled", x=0.5, y=0.5, xref="x2 domain",
                       yref="y2 domain", showarrow=False)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_layout(title_text="t<br><sup>a short subtitle</sup>")
    assert empty_panels(fig) == below_zero(fig) == off_canvas(fig) == []
    sankey = go.Figure(go.Sankey(
        arrangement="fixed", node={"label": ["other traffic · normal lane", "port", "out"],
                                   "x": [0.001, 0.4, 0.999], "y": [0.5, 0.5, 0.2]},
        link={"source": [0, 1], "target": [1, 2], "value": [1.0, 1.0]}))
    sankey.update_layout(title_text="t", margin={"t": 80}, width=500)
    assert any("runs" in p and "into the next nodes" in p for p in off_canvas(sankey))
    assert any("above the plot" in p for p in off_canvas(sankey))


def test_a_sweep_and_a_tuning_are_drawn_against_size_and_a_tuning_reports_its_model():
    import contextlib
    import io

    from labkit.ui import cli

    sweep = figures.load(SAMPLES / "sweeps/ring")
    drawn = {name: build() for name, build in figures.figure_set(sweep)}
    assert list(drawn) == ["busbw", "time"]
    sizes = [r["size"] for r in sweep.rows]
    assert list(drawn["time"].data[0].x) == sizes and drawn["time"].layout.xaxis.type == "log"
    assert list(drawn["time"].data[0].y) == [r["time_us"] / 1e3 for r in sweep.rows]
    assert list(drawn["busbw"].data[0].y) == [r["busbw_mbps"] for r in sweep.rows]
    tuning = figures.load(SAMPLES / "tune/leaf-spine")
    model = dict(figures.figure_set(tuning))["model"]()
    by_name = {t.name: t for t in model.data}
    fit = tuning.model.fits["ring"]
    line = by_name[f"ring model (rms error {fit.rms_rel_error:.1%})"]
    assert line.x[0] == min(sizes) and line.y[0] == pytest.approx(fit.predict(min(sizes)) * 1e3)
    assert len(by_name["tree measured"].x) == len(tuning.sweeps["tree"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["report", str(SAMPLES / "tune/leaf-spine")]) == 0
    assert "time = alpha + size / beta" in out.getvalue()
    assert "auto at 65536 B: ring:" in out.getvalue()
