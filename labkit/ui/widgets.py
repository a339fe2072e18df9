"""ipywidgets for the notebooks, one cell each.

* :func:`explorer` — over recorded runs: pick a run, policies, lanes and ports, a time window
  and a percentile, and the linked figures and tables redraw (one :class:`Panel` per view);
* :func:`sweep_explorer` — over collective sweeps: pick sweeps and a range of message sizes,
  and the busbw plot and its table redraw;
* :func:`jobs_explorer` — over a run whose jobs shared the fabric: pick policies, and each
  job's iteration CDFs and its bursts at the bottleneck redraw, each with its table;
* :func:`live_panel` — sliders, a run button and a progress bar for a short real run.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ipywidgets as w
import plotly.graph_objects as go
import polars as pl

from labkit.analysis import frames
from labkit.model import paths, scenario
from labkit.model.scenario import Scenario
from labkit.runs.rundir import Run, incomplete_path, new_run_id
from labkit.ui import plots

PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}


@dataclass(frozen=True)
class Selection:
    """What the explorer's controls pick in one run (policies and ports in the run's order)."""

    run: Run
    policies: list[str]
    lanes: list[str]
    ports: list[str]
    window: tuple[float, float]
    percentile: str


View = Callable[[Selection], tuple[go.Figure, str, pl.DataFrame]]


class Panel:
    """A plotly FigureWidget with a captioned table under it, redrawn together (``css``:
    a class on its box, for styling and for the browser test).

    A redraw puts a new FigureWidget in the box rather than editing the shown one:
    plotly 7.1's widget lost a whole in-place edit (traces and title) in 5 of 26 tries in
    a headless browser, while the table beside it, a plain widget value, followed; a new
    widget arrives whole, as the table's value does."""

    def __init__(self, figure: go.Figure, caption: str, rows: pl.DataFrame, css: str):
        self.figure = go.FigureWidget(figure)
        self.table = w.HTML()
        self.box = w.VBox([self.figure, self.table])
        self.box.add_class(css)
        self._table(caption, rows)

    def show(self, figure: go.Figure, caption: str, rows: pl.DataFrame) -> None:
        """Show ``figure`` and the table of ``rows`` instead of what the panel shows."""
        shown, self.figure = self.figure, go.FigureWidget(figure)
        self.box.children = (self.figure, self.table)
        shown.close()
        self._table(caption, rows)

    def _table(self, caption: str, rows: pl.DataFrame) -> None:
        self.table.value = f"<b>{caption}</b>" + rows._repr_html_()


def lane_table(run: Run, policies: list[str], lanes: list[str], window: tuple[float, float],
               q: float) -> pl.DataFrame:
    """Sojourn at the ``q`` quantile (µs) per policy and lane, over the part of each
    policy's window given as fractions ``window`` = (from, to)."""
    spans = frames.part_of_windows(run["collectives"], window)
    frame = frames.lane_sojourns(run["sojourn"], run.summary, spans)
    return (frame.filter(pl.col("policy").is_in(policies) & pl.col("lane").is_in(lanes))
            .group_by("policy", "lane", maintain_order=True)
            .agg(pl.col("sojourn_us").quantile(q, interpolation="linear").round(1)
                 .alias("sojourn_us"), pl.len().alias("packets"))
            .sort("policy", "lane"))


def sojourn_view(s: Selection) -> tuple[go.Figure, str, pl.DataFrame]:
    """Per-lane sojourn CDFs at the bottleneck port, and their percentile per lane."""
    return (plots.lane_sojourn(s.run, s.policies, s.lanes, s.window),
            f"sojourn at {s.percentile} (µs)",
            lane_table(s.run, s.policies, s.lanes, s.window, PERCENTILES[s.percentile]))


def queue_view(s: Selection) -> tuple[go.Figure, str, pl.DataFrame]:
    """The backlog timeline of the chosen ports, and per policy and port the backlog at
    the percentile and at most, what the port sent and what each lane lost there."""
    spans = frames.part_of_windows(s.run["collectives"], s.window)
    rows = frames.port_backlogs(s.run["queue"], s.run["lanes"],
                                  {p: spans[p] for p in s.policies}, s.ports,
                                  PERCENTILES[s.percentile])
    return (plots.queue_timeline(s.run, s.ports, s.policies, s.window),
            f"backlog at {s.percentile} of the samples and at most (KiB), Mbit/s sent, "
            "packets each lane lost", rows.with_columns(pl.col(pl.Float64).round(1)))


CONTROL_ROWS = (("run", "policies", "lanes", "ports"), ("window", "percentile"))


def run_controls(runs: dict[str, Run]) -> dict[str, w.ValueWidget]:
    """The explorer's controls by name: run, policies, lanes, ports, window, percentile
    (policies and ports get their options from :func:`fit_controls`)."""
    return {
        "run": w.Dropdown(options=list(runs), description="run"),
        "policies": w.SelectMultiple(description="policies"),
        "lanes": w.SelectMultiple(options=["vip", "normal", "low"], value=("vip", "low"),
                                  description="lanes"),
        "ports": w.SelectMultiple(description="ports"),
        "window": w.FloatRangeSlider(value=(0.0, 1.0), min=0.0, max=1.0, step=0.05,
                                     description="window", readout_format=".0%"),
        "percentile": w.Dropdown(options=list(PERCENTILES), value="p99",
                                 description="percentile"),
    }


def fit_controls(controls: dict[str, w.ValueWidget], run: Run) -> None:
    """Offer ``run``'s policies (all picked) and the ports it watched (its bottleneck
    ports picked)."""
    policies = tuple(run.summary.policies)
    controls["policies"].options, controls["policies"].value = policies, policies
    controls["ports"].options = frames.watched_ports(run["queue"])
    controls["ports"].value = tuple(sorted({p.bottleneck.port
                                            for p in run.summary.policies.values()}))


def selection(runs: dict[str, Run], controls: dict[str, w.ValueWidget]) -> Selection:
    """What ``controls`` pick now."""
    run = runs[controls["run"].value]
    return Selection(
        run, [p for p in run.summary.policies if p in controls["policies"].value],
        list(controls["lanes"].value),
        [p for p in controls["ports"].options if p in controls["ports"].value],
        controls["window"].value, controls["percentile"].value)


def explorer(runs: dict[str, Run] | Run, views: tuple[tuple[View, str], ...] = (
        (sojourn_view, "lk-sojourn"), (queue_view, "lk-queue"))) -> w.VBox:
    """Run and policy pickers, lane and port filters, a time-window slider and a percentile
    selector over recorded runs, linked to one :class:`Panel` per view (by default the
    per-lane sojourn CDFs and the queue timeline of the chosen ports, each with its table)."""
    runs = runs if isinstance(runs, dict) else {runs.summary.scenario: runs}
    controls = run_controls(runs)
    fit_controls(controls, runs[controls["run"].value])
    first = selection(runs, controls)
    panels = [(Panel(*view(first), css), view) for view, css in views]
    refitting = False

    def redraw(*_):
        if not refitting:
            now = selection(runs, controls)
            for panel, view in panels:
                panel.show(*view(now))

    def new_run(*_):
        nonlocal refitting
        refitting = True  # one redraw for the new run, not one per control it changes
        try:
            fit_controls(controls, runs[controls["run"].value])
        finally:
            refitting = False
        redraw()

    for name, control in controls.items():
        control.observe(new_run if name == "run" else redraw, names="value")
    box = w.VBox([*(w.HBox([controls[name] for name in row]) for row in CONTROL_ROWS),
                  *(panel.box for panel, _ in panels)])
    box.add_class("lk-explorer")
    return box


def size_label(size_bytes: int) -> str:
    """A message size as people write it: 64 KiB, 4 MiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size_bytes >= 1 << shift and size_bytes % (1 << shift) == 0:
            return f"{size_bytes >> shift} {unit}"
    return f"{size_bytes} B"


def sweep_explorer(sweeps: dict[str, list[dict]], sub: str) -> w.VBox:
    """A sweep picker and a message-size range over collective sweeps (``labkit sweep``
    records, by name), linked to the busbw plot and a table of the chosen rows; ``sub``
    is the figure's subtitle (where the sweeps ran, the scale)."""
    names = w.SelectMultiple(options=list(sweeps), value=tuple(sweeps), description="sweeps")
    sizes = sorted({r["size"] for rows in sweeps.values() for r in rows})
    span = w.SelectionRangeSlider(options=[(size_label(s), s) for s in sizes],
                                  index=(0, len(sizes) - 1), description="sizes")
    colors = plots.sweep_colors(list(sweeps))

    def view() -> tuple[go.Figure, str, pl.DataFrame]:
        chosen = frames.pick_sweeps(sweeps, [n for n in sweeps if n in names.value],
                                      span.value)
        return (plots.sweep_busbw(chosen, sub, colors), "per sweep and message size",
                frames.sweep_frame(chosen).with_columns(pl.col(pl.Float64).round(1)))

    panel = Panel(*view(), "lk-sweeps")
    for control in (names, span):
        control.observe(lambda _: panel.show(*view()), names="value")
    box = w.VBox([w.HBox([names, span]), panel.box])
    box.add_class("lk-explorer")
    return box


JOBS_PICKED = ("isolated", "fair", "job-priority", "interleave")  # jobs_explorer's start
ITERATION_COLUMNS = ("policy", "job", "iterations", "p50_ms", "p99_ms", "slowdown_p50",
                     "slowdown_p99", "gpu_utilization", "gpu_utilization_all")
SHARE_COLUMNS = ("policy", "job", "bottleneck_share", "bottleneck_drops", "sojourn_p99_us")


def jobs_views(run: Run, policies: list[str]) -> tuple[tuple[go.Figure, str, pl.DataFrame],
                                                       tuple[go.Figure, str, pl.DataFrame]]:
    """What :func:`jobs_explorer` shows for ``policies`` (in the run's order): each job's
    iteration CDFs with its iterations' table, and each job's bursts at the bottleneck
    (the policies whose jobs the kernel counted there) with their shares of it."""
    rows = frames.jobs_frame(run.summary, digits=3).filter(pl.col("policy").is_in(policies))
    counted = rows.filter(pl.col("bottleneck_share").is_not_null())
    at_port = [p for p in policies if p in set(counted["policy"].to_list())]
    return ((plots.job_iteration_cdfs(run, policies),
             "each job's iterations (ms), slowdowns against the job alone, GPU utilization "
             "(the job's; all: the policy's, weighted by GPUs)",
             rows.select(ITERATION_COLUMNS)),
            (plots.job_bursts(run, at_port),
             "each job's share of the jobs' bytes at the bottleneck port, its packets "
             "dropped there and their p99 time in its queue (µs)",
             counted.select(SHARE_COLUMNS)))


def jobs_explorer(run: Run, picked: tuple[str, ...] = JOBS_PICKED) -> w.VBox:
    """A policy picker over a run whose jobs shared the fabric (docs/jobs.md), linked to
    two panels (:class:`Panel`): each job's iteration-time CDFs per policy (``isolated``, the
    job alone, dashed) with each job's iterations, slowdowns and GPU utilization; and the
    jobs' bursts at the bottleneck, a panel per picked policy the kernel counted them
    apart in, with each job's share of the port. ``picked``: the policies picked first
    (those the run has)."""
    with_jobs = tuple(p for p, s in run.summary.policies.items() if s.jobs is not None)
    policies = w.SelectMultiple(options=with_jobs, description="policies",
                                value=tuple(p for p in with_jobs if p in picked) or with_jobs)
    first = jobs_views(run, list(policies.value))
    panels = (Panel(*first[0], "lk-job-cdfs"), Panel(*first[1], "lk-job-bursts"))

    def redraw(_) -> None:
        views = jobs_views(run, [p for p in with_jobs if p in policies.value])
        for panel, view in zip(panels, views, strict=True):
            panel.show(*view)

    policies.observe(redraw, names="value")
    box = w.VBox([w.HBox([policies]), *(panel.box for panel in panels)])
    box.add_class("lk-explorer")
    return box


LIVE_POLICIES = ("isolated", "fifo", "priority")
LIVE_SECONDS = 3  # per policy: three policies, fabrics included, in about 20 s
SIZES = {"64K": "64KiB", "256K": "256KiB", "1M": "1MiB", "2M": "2MiB", "4M": "4MiB"}
JOB_SIZES = ("activation_bytes", "tokens_bytes", "gradient_bytes")  # a job's message size


def cannot_run_live(euid: int | None = None) -> str | None:
    """Why a live run cannot start on this machine, in plain words (None: it can)."""
    from labkit.runs.runner import not_ready

    return not_ready(euid=euid)


def live_scenario(base: Path, storage_load: float, size: str, hosts: int) -> Scenario:
    """``base`` with the sliders' values: the collective (or training job) over the first
    ``hosts`` GPU hosts (half behind each leaf, as far as they go), ``size`` per message,
    storage at ``storage_load`` x the bottleneck. Parsed as if it were ``base`` itself, so
    paths in it (controllers, kinds, a classifier) stay relative to ``base``."""
    _, doc = scenario.read_yaml(base)
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
    stop = w.Button(description="stop", disabled=True,
                    tooltip="end the run now: its fabric is torn down, what it recorded kept")
    bar = w.IntProgress(value=0, min=0, max=100, description="idle")
    status = w.HTML()
    figures = w.Output()
    stopping = threading.Event()

    def run_it(_):
        reason = cannot_run_live()
        if reason:
            status.value = f"<b>cannot run here:</b> {html.escape(reason)}"
            return
        stopping.clear()
        button.disabled, stop.disabled, bar.value, bar.description = True, False, 0, "running"
        threading.Thread(target=_live_run, daemon=True,
                         args=(base, policies, load.value, size.value, hosts.value, bar,
                               status, figures, (button, stop), stopping,
                               runs_dir or paths.current().runs)).start()

    def stop_it(_):
        stopping.set()
        stop.disabled, bar.description = True, "stopping"

    button.on_click(run_it)
    stop.on_click(stop_it)
    return w.VBox([w.HBox([load, size, hosts]), w.HBox([button, stop, bar]), status, figures])


def _live_run(base, policies, load, size, hosts, bar, status, figures, buttons,
              stopping: threading.Event, runs_dir: Path) -> None:
    """The run, in this kernel (a thread), the bar moved by its real progress: each policy
    is an equal share, its fabric a tenth of it, its ops (or its seconds) the rest. The
    stop button ends it at its next step, as Ctrl-C would (torn down, marked interrupted)."""
    from labkit.runs import runner

    started = time.monotonic()
    running_since: dict[str, float] = {}
    button, stop = buttons

    def show(p: runner.Progress) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt  # the run's own path for an interrupt, in this thread
        done = list(policies).index(p.policy)
        part = 0.0
        if p.stage == "running":
            since = running_since.setdefault(p.policy, time.monotonic())
            part = 0.1 + 0.9 * min(1.0, max(p.done / p.total if p.total else 0.0,
                                            (time.monotonic() - since) / LIVE_SECONDS))
        elif p.stage == "done":
            part = 1.0
        bar.value = min(99, int((done + part) / len(policies) * 100))
        bar.description = f"{p.policy} {p.stage}"

    out = runs_dir / new_run_id(f"{base.stem}-live")
    try:
        run = runner.run(live_scenario(base, load, size, hosts), policies,
                         duration=LIVE_SECONDS, on_progress=show, out=out)
    except KeyboardInterrupt:
        status.value = html.escape(f"stopped: everything it built was torn down; what it "
                                   f"recorded is in {incomplete_path(out)}")
        bar.description, button.disabled, stop.disabled = "stopped", False, True
        return
    except Exception as exc:  # shown in the panel: a thread has no one else to tell
        status.value = f"<b>the run failed:</b> {html.escape(str(exc))}"  # text, not markup
        bar.description, button.disabled, stop.disabled = "failed", False, True
        return
    stop.disabled = True
    bar.value, bar.description = 100, "done"
    figures.outputs = ()
    for fig in (plots.op_time_cdf(run), plots.queue_timeline(run)):
        figures.append_display_data(fig)
    status.value = html.escape(f"recorded in {run.path} ({time.monotonic() - started:.0f} s)")
    button.disabled = False
