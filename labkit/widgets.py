"""ipywidgets for the notebooks, one cell each.

* :func:`explorer` — over a recorded run: pick policies and lanes, a time window and a
  percentile, and the linked figure and table redraw;
* :func:`live_panel` — sliders, a run button and a progress bar for a short real run.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import ipywidgets as w
import plotly.graph_objects as go
import polars as pl
import yaml

from labkit import analysis, plots, scenario
from labkit.rundir import RUNS_DIR, Run, new_run_id
from labkit.scenario import Scenario

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


def explorer(runs: dict[str, Run] | Run) -> w.VBox:
    """Run and policy pickers, a lane filter, a time-window slider and a percentile
    selector, linked to the per-lane sojourn CDFs (a plotly FigureWidget, redrawn in place)
    and a table of the chosen percentile."""
    runs = runs if isinstance(runs, dict) else {runs.summary["scenario"]: runs}
    which = w.Dropdown(options=list(runs), description="run")
    pick = w.SelectMultiple(description="policies")
    lanes = w.SelectMultiple(options=["vip", "normal", "low"], value=("vip", "low"),
                             description="lanes")
    window = w.FloatRangeSlider(value=(0.0, 1.0), min=0.0, max=1.0, step=0.05,
                                description="window", readout_format=".0%")
    pct = w.Dropdown(options=list(PERCENTILES), value="p99", description="percentile")
    first = runs[which.value]
    figure = go.FigureWidget(plots.lane_sojourn(first, list(first.summary["policies"])))
    table = w.HTML()

    def redraw(*_):
        run = runs[which.value]
        chosen = [p for p in run.summary["policies"] if p in pick.value]
        fresh = plots.lane_sojourn(run, chosen, list(lanes.value), window.value)
        with figure.batch_update():
            figure.data = []
            figure.add_traces(list(fresh.data))
            figure.update_layout(title_text=fresh.layout.title.text)
        rows = lane_table(run, chosen, list(lanes.value), window.value, PERCENTILES[pct.value])
        table.value = f"<b>sojourn at {pct.value} (µs)</b>" + rows._repr_html_()

    def new_run(*_):
        policies = tuple(runs[which.value].summary["policies"])
        pick.options = policies
        pick.value = policies  # observed: redraws

    which.observe(new_run, names="value")
    for control in (pick, lanes, window, pct):
        control.observe(redraw, names="value")
    new_run()
    return w.VBox([w.HBox([which, pick, lanes]), w.HBox([window, pct]), figure, table])


LIVE_POLICIES = ("isolated", "fifo", "priority")
LIVE_SECONDS = 3  # per policy: three policies, fabrics included, in about 20 s
SIZES = {"64K": "64KiB", "256K": "256KiB", "1M": "1MiB", "2M": "2MiB", "4M": "4MiB"}
JOB_SIZES = ("activation_bytes", "tokens_bytes", "gradient_bytes")  # a job's message size


def cannot_run_live(euid: int | None = None) -> str | None:
    """Why a live run cannot start on this machine, in plain words (None: it can)."""
    from labkit.runner import not_ready

    return not_ready(euid)


def live_scenario(base: Path, storage_load: float, size: str, hosts: int) -> Scenario:
    """``base`` with the sliders' values: the collective (or training job) over the first
    ``hosts`` GPU hosts (half behind each leaf, as far as they go), ``size`` per message,
    storage at ``storage_load`` x the bottleneck. Parsed as if it were ``base`` itself, so
    paths in it (controllers, kinds, a classifier) stay relative to ``base``."""
    doc = yaml.safe_load(base.read_text())
    gpus = doc["fabric"]["hosts"]["gpu"]
    leaves = list(gpus.values())
    ranks = [h for pair in zip(*leaves, strict=False) for h in pair][:hosts]
    for entry in doc["traffic"]:
        if entry["kind"] in ("allreduce", "job"):
            entry["ranks"] = sorted(ranks, key=lambda h: int(h[1:]))
            sized = [k for k in ("size_bytes", *JOB_SIZES) if k in entry]
            entry[sized[0]] = SIZES[size]
        elif entry["kind"] == "storage":
            entry["offered_load"] = storage_load
    doc["name"] = f"{doc['name']}-live"
    return scenario.parse(doc, str(base))


def live_panel(base: Path, policies: tuple[str, ...] = LIVE_POLICIES,
               runs_dir: Path | None = None) -> w.VBox:
    """Sliders for storage load, message size and GPU hosts, a run button and a progress
    bar: a short real run (about 20 s) of ``base`` under ``policies``, recorded like any
    run (in ``runs_dir``, default data/runs), then its completion-time CDFs and queue.
    Says plainly why when this machine cannot run it."""
    load = w.FloatSlider(value=1.2, min=0.2, max=2.0, step=0.1, description="storage load")
    size = w.SelectionSlider(options=list(SIZES), value="2M", description="message")
    hosts = w.IntSlider(value=8, min=2, max=8, description="GPU hosts")
    button = w.Button(description="run", button_style="primary")
    bar = w.IntProgress(value=0, min=0, max=100, description="idle")
    status = w.HTML()
    figures = w.Output()

    def run_it(_):
        reason = cannot_run_live()
        if reason:
            status.value = f"<b>cannot run here:</b> {reason}"
            return
        button.disabled, bar.value, bar.description = True, 0, "running"
        threading.Thread(target=_live_run, daemon=True,
                         args=(base, policies, load.value, size.value, hosts.value, bar,
                               status, figures, button, runs_dir or RUNS_DIR)).start()

    button.on_click(run_it)
    return w.VBox([w.HBox([load, size, hosts]), w.HBox([button, bar]), status, figures])


def _live_run(base, policies, load, size, hosts, bar, status, figures, button,
              runs_dir: Path) -> None:
    """The run, in this kernel (a thread), the bar moved by its real progress: each policy
    is an equal share, its fabric a tenth of it, its ops (or its seconds) the rest."""
    from labkit import runner

    started = time.monotonic()
    running_since: dict[str, float] = {}

    def show(p: runner.Progress) -> None:
        done = list(policies).index(p.policy)
        part = 0.0
        if p.stage == "running":
            since = running_since.setdefault(p.policy, time.monotonic())
            part = 0.1 + 0.9 * min(1.0, max(p.done / p.total,
                                            (time.monotonic() - since) / LIVE_SECONDS))
        elif p.stage == "done":
            part = 1.0
        bar.value = min(99, int((done + part) / len(policies) * 100))
        bar.description = f"{p.policy} {p.stage}"

    try:
        run = runner.run(live_scenario(base, load, size, hosts), policies,
                         duration=LIVE_SECONDS, on_progress=show,
                         out=runs_dir / new_run_id(f"{base.stem}-live"))
    except Exception as exc:  # shown in the panel: a thread has no one else to tell
        status.value = f"<b>the run failed:</b> {exc}"
        bar.description = "failed"
        button.disabled = False
        return
    bar.value, bar.description = 100, "done"
    figures.outputs = ()
    for fig in (plots.op_time_cdf(run), plots.queue_timeline(run)):
        figures.append_display_data(fig)
    status.value = f"recorded in {run.path} ({time.monotonic() - started:.0f} s)"
    button.disabled = False
