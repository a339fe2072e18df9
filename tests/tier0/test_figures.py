"""The figure set: analysis frames on fixtures, and byte-identical SVG from the same run."""

import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import plotly.io as pio
import polars as pl
import pytest

from labkit.analysis import frames, windows
from labkit.runs import rundir
from labkit.runs.rundir import SCHEMAS
from labkit.ui import figures, plots
from tests.conftest import require
from tests.spans import before_phases, job_run

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000


def test_cdf_is_thinned_but_keeps_both_ends():
    x, y = windows.cdf(pl.Series(range(1000, 0, -1)), points=50)
    assert (x[0], x[-1], y[-1]) == (1, 1000, 1.0)
    assert len(x) == 50 and x == sorted(x)
    assert windows.cdf(pl.Series([3, 1, 2])) == ([1, 2, 3], [1 / 3, 2 / 3, 1.0])


def _decision(t, valve, new, busy_from=None, busy_until=None, busy=None):
    return {"policy": "p", "t_ns": t, "valve": valve, "lane": "low", "old_mbps": None,
            "new_mbps": new, "old_busy_mbps": None, "new_busy_mbps": busy,
            "busy_from_ns": busy_from, "busy_until_ns": busy_until, "reason": ""}


def test_allowed_storage_sums_valves_and_applies_relayed_windows():
    rows = [_decision(0, "st1", None, busy=2.0),  # busy rate set, valve open
            _decision(10 * MS, "st1", None, 20 * MS, 40 * MS, 2.0),  # relayed window
            _decision(0, "g1", 30.0), _decision(50 * MS, "g1", None),
            _decision(0, "g9", None, busy=1.0)]  # never moved: not counted
    frame = pl.DataFrame(rows, schema=SCHEMAS["controller"])
    steps = frames.allowed_storage(frame, "p", 0, 60 * MS, 100.0, step_ns=10 * MS)
    assert steps["mbps"].to_list() == [100.0, 100.0, 32.0, 32.0, 100.0, 100.0]


def test_job_breakdown_splits_the_mean_iteration():
    job = _sample("tensor-parallel").summary
    fifo = job.policies["fifo"]
    summary = replace(job, policies={
        "fifo": replace(fifo, workload=replace(
            fifo.workload, mean_ms=100.0, compute_ms=40.0, wire_wait_fraction=0.5,
            bubble_fraction=0.1, bottleneck_bytes_per_iteration=2_000_000)),
        "isolated": _sample("bottleneck").summary.policies["isolated"]})  # an All-Reduce
    frame = frames.job_breakdown(summary)
    assert frame.row(0, named=True) == {"policy": "fifo", "compute_ms": 40.0,
                                        "wire_wait_ms": 50.0, "bubble_ms": 10.0,
                                        "bottleneck_mb": 2.0}


def test_summary_frame_has_one_row_per_policy_for_collectives_and_jobs():
    for name, busbw in (("checkpoint-burst", True), ("tensor-parallel", False)):
        run = rundir.load_run(REPO / "data/sample" / name)
        frame = frames.summary_frame(run.summary, digits=2)
        assert frame.columns == list(frames.SUMMARY_COLUMNS)
        assert frame["policy"].to_list() == list(run.summary.policies)
        assert frame["busbw_mbps"].is_not_null().all() == busbw
        assert frame["bubbles"].is_null().all() == busbw
        assert frame.filter(pl.col("policy") == "isolated")["slowdown_p99"].item() == 1.0


def test_latency_cdfs_take_each_policys_window_and_lane():
    lat = pl.DataFrame([{"policy": "a", "t_ns": t, "lane": lane, "latency_ns": 1000 * t,
                         "bytes": 1, "stamp_ns": 0, "seq": 0}
                        for t in range(10) for lane in ("vip", "low")],
                       schema=SCHEMAS["latency"])
    cdfs = frames.latency_cdfs(lat, {"a": (2, 5), "b": (0, 9)})
    assert cdfs == {"a": ([2.0, 3.0, 4.0, 5.0], [0.25, 0.5, 0.75, 1.0])}


def test_lane_sojourns_keep_each_policys_port_and_window():
    soj = pl.DataFrame([{"policy": "a", "t_ns": t, "port": port, "lane": "vip",
                         "sojourn_ns": 1000 * t, "bytes": 1, "stamp_ns": 0, "seq": 0}
                        for t in range(10) for port in ("p1", "p2")], schema=SCHEMAS["sojourn"])
    sample = _sample("bottleneck").summary
    fifo = sample.policies["fifo"]
    summary = replace(sample, policies={
        "a": replace(fifo, bottleneck=replace(fifo.bottleneck, port="p2"))})
    frame = frames.lane_sojourns(soj, summary, {"a": (2, 5)})
    assert frame["sojourn_us"].to_list() == [2.0, 3.0, 4.0, 5.0]


def test_same_run_gives_byte_identical_svg(tmp_path):
    require(shutil.which("chromium") is not None, "needs Chromium for kaleido (make setup)")
    run = rundir.load_run(REPO / "data/sample/bottleneck")
    first = figures.write(run, tmp_path / "a")
    second = figures.write(run, tmp_path / "b")
    svgs = [p for p in first if p.suffix == ".svg"]
    assert {p.stem for p in svgs} == {"queue-timeline", "completion-cdf", "lane-sojourn",
                                      "funnel", "three-stages"}
    for p in svgs:
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name
        assert b"bottleneck" in p.read_bytes() and b"4000" in p.read_bytes()  # scenario, scale
    assert all(p.stat().st_size > 0 for p in first + second)
    with pytest.raises(FileExistsError, match="does not overwrite"):
        figures.write(run, tmp_path / "a")


def test_explorer_redraws_when_a_control_moves():
    from labkit.ui import widgets

    runs = {name: rundir.load_run(REPO / "data/sample" / name)
            for name in ("bottleneck", "checkpoint-burst")}
    box = widgets.explorer(runs)
    (which, pick, lanes, ports), (window, pct) = box.children[0].children, box.children[1].children
    table, port_table = box.children[2].children[1], box.children[3].children[1]

    def figure():  # the panels' plots as shown now: a redraw shows a new FigureWidget
        return box.children[2].children[0]

    def queue():
        return box.children[3].children[0]

    shown = figure()
    assert len(figure().data) == 5  # isolated has no low-lane packets at the bottleneck
    assert ports.options == ("leaf1-eth4", "spine1-eth0") and ports.value == ("spine1-eth0",)
    assert [t.name for t in queue().data] == ["isolated", "fifo", "priority"]
    lanes.value = ("vip",)
    assert figure() is not shown and shown.comm is None  # the one it replaced is closed
    assert len(figure().data) == 3 and all("vip" in t.name for t in figure().data)
    before = table.value, port_table.value
    pct.value = "p50"
    assert table.value != before[0] and "p50" in table.value
    assert port_table.value != before[1] and "p50" in port_table.value
    pick.value = ("fifo",)
    assert [t.name for t in figure().data] == ["fifo · vip"]
    assert [t.name for t in queue().data] == ["fifo"]
    ports.value = ("leaf1-eth4", "spine1-eth0")
    assert [t.name for t in queue().data] == ["fifo · leaf1-eth4", "fifo · spine1-eth0"]
    assert "leaf1-eth4, spine1-eth0" in queue().layout.title.text
    assert "leaf1-eth4" in port_table.value
    last = max(queue().data[1].x)
    window.value = (0.5, 1.0)
    assert min(queue().data[1].x) > 0.4 * last
    which.value = "checkpoint-burst"  # another run: its own policies, all picked
    assert "state-aware" in pick.options and len(figure().data) == 5
    assert "checkpoint-burst" in figure().layout.title.text
    # the ports its summary names for its policies (isolated's: whichever the ring alone
    # kept busiest, which can differ from the others')
    named = runs["checkpoint-burst"].summary.policies.values()
    shown_ports = tuple(sorted({p.bottleneck.port for p in named}))
    assert ports.value == shown_ports and len(queue().data) == 5 * len(shown_ports)
    assert "checkpoint-burst" in queue().layout.title.text


def test_port_backlogs_sum_classes_over_each_policys_span():
    queue = pl.DataFrame([{"policy": "a", "t_ns": t * MS, "port": port, "classid": cls,
                           "lane": "all", "bytes": 1000 * t, "packets": t, "drops": 0,
                           "overlimits": 0, "backlog_bytes": 1024 * t, "backlog_packets": t}
                          for t in range(11)
                          for port, cls in (("p1", "1:10"), ("p1", "1:30"), ("p2", "1:1"))],
                         schema=SCHEMAS["queue"])
    lanes = pl.DataFrame([{"policy": "a", "t_ns": t * MS, "port": "p1", "lane": lane,
                           "offered_packets": 0, "offered_bytes": 0, "enqueued_packets": 0,
                           "enqueued_bytes": 0, "dropped_packets": t if lane == "low" else 0,
                           "dropped_bytes": 0}
                          for t in range(11) for lane in ("vip", "normal", "low")],
                         schema=SCHEMAS["lanes"])
    frame = frames.port_backlogs(queue, lanes, {"a": (2 * MS, 6 * MS)}, ["p1"], 0.5)
    assert frame.columns == list(frames.PORT_BACKLOG_COLUMNS)
    assert frame.row(0, named=True) == {  # two classes of 1 KiB x t each, t in 2..6 ms
        "policy": "a", "port": "p1", "backlog_kib": 8.0, "max_kib": 12.0,
        "mbps": 16.0, "vip_drops": 0, "normal_drops": 0, "low_drops": 4}
    assert frame.height == 1
    assert frames.port_backlogs(queue, lanes, {}, ["p1"], 0.5).is_empty()


def test_queue_timeline_draws_the_chosen_ports_over_the_window():
    from labkit.ui import plots

    run = rundir.load_run(REPO / "data/sample/bottleneck")
    whole = plots.queue_timeline(run)
    assert [t.name for t in whole.data] == list(run.summary.policies)
    assert "the bottleneck port" in whole.layout.title.text
    half = plots.queue_timeline(run, ["leaf1-eth4", "spine1-eth0"], ["fifo"], (0.5, 1.0))
    assert [t.name for t in half.data] == ["fifo · leaf1-eth4", "fifo · spine1-eth0"]
    assert [t.line.dash for t in half.data] == ["solid", "dash"]
    fifo = whole.data[1].x
    assert min(half.data[1].x) > 0.4 * max(fifo) and max(half.data[1].x) == max(fifo)
    assert not plots.queue_timeline(run, [], ["fifo"]).data


def test_every_figure_names_the_revision_and_the_machine_that_recorded_it():
    run = _sample("bottleneck")
    p = run.manifest.provenance
    sub = plots.subtitle(run)
    assert f"labkit {p.labkit_revision[:12]}" in sub
    assert f"{p.cpus} CPUs, Linux {p.kernel}" in sub
    dirty = replace(p, labkit_revision="0123456789abcdef0123-dirty", cpus=1)
    assert plots.recorded_by(dirty) == f"labkit 0123456789ab-dirty · 1 CPU, Linux {p.kernel}"
    title = plots.queue_timeline(run).layout.title.text  # the subtitle wrapped to fit
    assert sub in title.replace("</sup><br><sup>", " · ")


def test_sweeps_load_pick_and_tabulate(tmp_path):
    sweeps = rundir.load_sweeps(REPO / "data/sample/sweeps")
    assert list(sweeps) == ["halving_doubling", "halving_doubling-deep",
                            "halving_doubling-lossless", "ring", "ring-lossy", "tree"]
    picked = frames.pick_sweeps(sweeps, ["ring-lossy", "ring"], (262144, 1048576))
    assert list(picked) == ["ring-lossy", "ring"]
    assert [r["size"] for r in picked["ring"]] == [262144, 1048576]
    frame = frames.sweep_frame(picked)
    assert frame.columns == list(frames.SWEEP_COLUMNS) and frame.height == 4
    assert frame["sweep"].to_list() == ["ring-lossy"] * 2 + ["ring"] * 2
    with pytest.raises(rundir.RunDataError, match="no sweep"):
        rundir.load_sweeps(tmp_path)


def test_sweep_explorer_redraws_and_keeps_each_sweeps_colour():
    from labkit.ui import widgets

    box = widgets.sweep_explorer(rundir.load_sweeps(REPO / "data/sample/sweeps"), "sub")
    (names, sizes), table = box.children[0].children, box.children[1].children[1]

    def figure():  # the plot as shown now
        return box.children[1].children[0]

    colour = {t.name: t.line.color for t in figure().data}
    assert len(colour) == 6 and len(set(colour.values())) == 6 and figure().layout.shapes
    names.value = ("ring-lossy", "ring")  # drawn in the sweeps' order, in their own colours
    assert [(t.name, t.line.color) for t in figure().data] == [
        ("ring", colour["ring"]), ("ring-lossy", colour["ring-lossy"])]
    sizes.value = (262144, 1048576)
    assert all(t.x == (262144, 1048576) for t in figure().data)
    assert table.value.count("<td>262144</td>") == 2 and "<td>65536</td>" not in table.value
    names.value = ()
    assert not figure().data and not figure().layout.shapes and not figure().layout.annotations
    assert widgets.size_label(65536) == "64 KiB" and widgets.size_label(4 << 20) == "4 MiB"


def test_jobs_explorer_redraws_both_panels_for_the_policies_picked():
    from labkit.ui import widgets

    run = rundir.load_run(REPO / "data/sample/two-jobs")
    box = widgets.jobs_explorer(run)
    (policies,) = box.children[0].children
    cdfs, bursts = box.children[1], box.children[2]
    assert policies.value == widgets.JOBS_PICKED  # the run has all four
    assert {t.name for t in cdfs.children[0].data} == {
        "isolated (alone)", "fair", "job-priority", "interleave"}
    def cell(text: str) -> str:  # a string in a polars table's HTML
        return f"<td>&quot;{text}&quot;</td>"

    assert cell("isolated") not in bursts.children[1].value  # each alone: not counted
    policies.value = ("interleave", "fair")  # drawn in the run's order
    assert [t.name for t in cdfs.children[0].data] == ["fair", "interleave"] * 2
    assert cdfs.children[1].value.count(cell("fair")) == 2
    assert cell("job-priority") not in cdfs.children[1].value
    assert {"heavy", "light"} <= {t.name for t in bursts.children[0].data}
    policies.value = ("isolated",)  # the job alone has no bursts together
    assert [t.name for t in cdfs.children[0].data] == ["isolated (alone)"] * 2
    assert not bursts.children[0].data and "shape: (0, 5)" in bursts.children[1].value


def test_lane_table_quantiles_follow_the_window():
    from labkit.ui import widgets

    run = rundir.load_run(REPO / "data/sample/bottleneck")
    whole = widgets.lane_table(run, ["fifo"], ["vip"], (0.0, 1.0), 0.5)
    half = widgets.lane_table(run, ["fifo"], ["vip"], (0.0, 0.5), 0.5)
    assert whole["packets"][0] > half["packets"][0] > 0


def test_live_panel_says_why_it_cannot_run_and_builds_valid_scenarios(tmp_path):
    from labkit.ui import widgets

    assert "needs root" in widgets.cannot_run_live(euid=1000)
    sc = widgets.live_scenario(REPO / "topologies/bottleneck.yaml", 0.5, "1M", 4)
    assert sc.allreduce.ranks == ("g1", "g2", "g5", "g6")  # both leaves: the ring crosses
    assert sc.allreduce.size_bytes == 1 << 20 and sc.storage[0].offered_load == 0.5
    job = widgets.live_scenario(REPO / "topologies/tensor-parallel.yaml", 1.0, "64K", 2).job
    assert job.ranks == ("g1", "g5") and dict(job.params)["activation_bytes"] == 65536


def test_html_needs_no_internet(tmp_path):
    run = rundir.load_run(REPO / "data/sample/bottleneck")
    written = figures.write(run, tmp_path, images=False)
    page = written[0].read_text()
    assert "cdn.plot.ly" not in page and 'src="plotly.min.js"' in page
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000


def test_without_chromium_only_html_is_written(tmp_path):
    run = rundir.load_run(REPO / "data/sample/pipeline-parallel")
    written = figures.write(run, tmp_path, images=False)
    assert {p.suffix for p in written} == {".html"} and all(p.exists() for p in written)
    assert "parallelism" in {p.stem for p in written}  # a job run adds its breakdown


def _sample(name: str) -> rundir.Run:
    return rundir.load_run(REPO / "data/sample" / name)


def test_figure_set_adds_funnel_stages_and_timeline_where_the_run_has_the_data():
    sets = {name: [n for n, _ in figures.figure_set(_sample(name))]
            for name in ("bottleneck", "checkpoint-burst", "tensor-parallel")}
    assert {"funnel", "three-stages"} <= set(sets["bottleneck"])  # fifo + priority
    assert "job-timeline" not in sets["bottleneck"]
    assert {"funnel", "three-stages"} <= set(sets["checkpoint-burst"])  # fifo + controllers
    assert {"funnel", "job-timeline"} <= set(sets["tensor-parallel"])
    assert "three-stages" not in sets["tensor-parallel"]  # isolated and fifo only


NEW_FIGURES = [("checkpoint-burst", "three-stages"), ("tensor-parallel", "job-timeline"),
               ("two-jobs", "job-bursts"), ("two-jobs", "job-iteration-cdf")]
SPANS = "pipeline-parallel with spans"  # job_run's: the job timeline as the ranks recorded it


@pytest.fixture(scope="module")
def rendered_twice(tmp_path_factory):
    """Each figure tested on its own below, written twice by ``figures.write`` (into "a",
    then "b"): {(sample, figure): (run, files written into "a")}. All in one Chromium for the
    module (kaleido's sync server), where a figure's rendering takes a fraction of a second
    and a Chromium's start seconds; that a fresh Chromium, as each ``labkit figures`` starts,
    gives the same bytes is test_same_run_gives_byte_identical_svg's (a session a format)."""
    require(shutil.which("chromium") is not None, "needs Chromium for kaleido (make setup)")
    import kaleido

    todo = {(sample, name): _sample(sample) for sample, name in NEW_FIGURES}
    todo[SPANS, "job-timeline"] = job_run(_sample("pipeline-parallel"), TRANSFER_NS)
    root = tmp_path_factory.mktemp("svg")
    # the browser's options as plotly hands them to the Chromium it starts for each call
    # (which the server, already started, then says it ignores)
    kopts = {k: v for k in ("plotlyjs", "mathjax", "headers")
             if (v := getattr(pio.defaults, k, None))}
    kaleido.start_sync_server(silence_warnings=True, **kopts)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The kopts argument is ignored", UserWarning)
            written = {}
            for (sample, name), run in todo.items():
                out = root / f"{sample}-{name}".replace(" ", "-")
                written[sample, name] = (run, figures.write(run, out / "a", only={name}))
                figures.write(run, out / "b", only={name})
        return written
    finally:
        kaleido.stop_sync_server(silence_warnings=True)


def _same_svg_twice(rendered_twice, sample: str, name: str) -> tuple[rundir.Run, bytes]:
    """The run and its figure's SVG, after checking the second writing's is the same."""
    run, first = rendered_twice[sample, name]
    assert sorted(p.name for p in first) == [f"{name}.html", f"{name}.png", f"{name}.svg"]
    svg = first[0].with_suffix(".svg")
    assert svg.read_bytes() == (svg.parent.parent / "b" / svg.name).read_bytes()
    return run, svg.read_bytes()


@pytest.mark.parametrize("sample, name", NEW_FIGURES)
def test_new_figures_give_byte_identical_svg(rendered_twice, sample, name):
    # bottleneck's funnel and three-stages: test_same_run_gives_byte_identical_svg
    run, svg = _same_svg_twice(rendered_twice, sample, name)
    assert run.summary.run_id.encode() in svg


def test_stage_of_sorts_policies_into_the_three_stages():
    assert [frames.stage_of(p, False) for p in ("isolated", "fifo", "priority")] == [None, 1, 2]
    assert {frames.stage_of(p, False) for p in ("reactive", "priority+state-aware",
                                                  "fifo+proactive")} == {3}
    assert frames.stage_of("calm", True) == 3  # a user's controller, by its summary


def test_funnel_shows_the_summarys_rates_delays_and_drops():
    run = _sample("bottleneck")
    fig = plots.bottleneck_funnel(run)
    sankey = next(t for t in fig.data if t.type == "sankey")
    lanes = run.summary.policies["fifo"].bottleneck.lanes
    labels = list(sankey.node.label)
    through = next(i for i, label in enumerate(labels) if label.startswith("through"))
    into_queue = [v for t, v in zip(sankey.link.target, sankey.link.value, strict=True)
                  if t == through]
    assert into_queue == pytest.approx([lanes.vip.mbps, lanes.low.mbps])
    assert f"{lanes.vip.drops + lanes.low.drops} packets" in labels[through + 1]
    assert any("from g8" in label for label in labels)  # the ring's hop across the port
    assert "spine1-eth0" in fig.layout.title.text
    bars = {(t.name, t.yaxis): t.y for t in fig.data if t.type == "bar"}
    at_port = [p.bottleneck.lanes for p in run.summary.policies.values()]
    for lane in ("vip", "low"):
        p99 = [None if (v := lanes.of(lane).sojourn_p99_us) is None else v / 1e3
               for lanes in at_port]
        assert list(bars[f"{lane} lane", "y"]) == p99
        assert list(bars[f"{lane} lane", "y3"]) == [lanes.of(lane).drops for lanes in at_port]


def test_three_stages_show_each_stages_measured_figures():
    for sample, missing in (("checkpoint-burst", "priority lanes"),
                            ("bottleneck", "adaptive control")):
        run = _sample(sample)
        fig = plots.three_stages(run)
        frame = frames.summary_frame(run.summary)
        for axis, column in (("y", "slowdown_p99"), ("y2", "vip_drops"),
                             ("y3", "storage_mbps")):
            shown = {t.name: t.y[0] for t in fig.data if t.yaxis == axis}
            expected = dict(frame.filter(pl.col("policy") != "isolated")
                            .select("policy", column).iter_rows())
            assert shown == expected, (sample, column)
        notes = [a.text for a in fig.layout.annotations]  # the absent stage: a note, no band
        assert [n for n in notes if "not in this run" in n and missing in n] == [notes[-1]]
        assert not any(f"· {missing}</b>" in n for n in notes)
    run = _sample("bottleneck")
    run.summary = replace(run.summary, policies={
        name: p for name, p in run.summary.policies.items() if name != "fifo"})
    with pytest.raises(ValueError, match="no fifo"):
        plots.three_stages(run)


def _iteration_bars(fig, run: rundir.Run, policy: str) -> tuple[pl.DataFrame, dict]:
    """The collectives rows a job timeline draws, and its traces by name."""
    rows = run["collectives"].filter(pl.col("policy") == policy).sort("op", "rank")
    return rows, {t.name: t for t in fig.data}


def test_job_timeline_falls_back_to_the_sums_for_runs_recorded_before_phases():
    run = before_phases(_sample("tensor-parallel"))
    job = run.summary.policies["fifo"].workload
    fig = plots.job_timeline(run, ops=tuple(range(job.iterations)), policies=["fifo"])
    rows, by_phase = _iteration_bars(fig, run, "fifo")
    assert list(by_phase) == ["sending/other", "compute", "data on the wire", "bubble"]
    t0 = rows["start_ns"].min()
    starts = ((rows["start_ns"] - t0) / 1e6).to_list()
    spans = (rows["end_ns"] - rows["start_ns"]) / 1e6
    bars, first, last = by_phase["sending/other"], by_phase["compute"], by_phase["bubble"]
    assert list(bars.base) == pytest.approx(starts) and list(bars.x) == pytest.approx(spans)
    assert list(first.base) == pytest.approx(starts)  # the sums, laid from the start
    ends = [b + w for b, w in zip(last.base, last.x, strict=True)]
    assert ends == pytest.approx(((rows["end_ns"] - t0) / 1e6).to_list())  # measured end
    assert sum(first.x) / len(first.x) == pytest.approx(job.compute_ms)
    assert (pl.Series(last.x) / spans).mean() == pytest.approx(job.bubble_fraction)
    assert (pl.Series(by_phase["data on the wire"].x) / spans).mean() == pytest.approx(
        job.wire_wait_fraction)
    for sample in ("tensor-parallel", "pipeline-parallel"):
        note = plots.job_timeline(before_phases(_sample(sample))).layout.annotations[-1].text
        assert "recorded before phase spans" in note and "order is not recorded" in note
    with pytest.raises(ValueError, match="no training job"):
        plots.job_timeline(_sample("bottleneck"))


TRANSFER_NS = {"isolated": 3 * MS, "fifo": 12 * MS}  # a message's time on the wire


def test_job_timeline_draws_each_ranks_recorded_spans():
    """A pipeline job's virtual ranks (tests/spans.py) recorded through the agents'
    results path: the figure draws their spans where they happened, a staircase."""
    run = job_run(_sample("pipeline-parallel"), TRANSFER_NS)
    fig = plots.job_timeline(run, policies=["fifo"])
    rows, by_phase = _iteration_bars(fig, run, "fifo")
    assert list(by_phase) == ["sending/other", "compute", "data on the wire", "bubble"]
    assert "as it recorded them" in fig.layout.annotations[-1].text
    t0 = rows["start_ns"].min()
    assert list(by_phase["sending/other"].base) == pytest.approx(
        ((rows["start_ns"] - t0) / 1e6).to_list())
    phases = run["phases"].filter((pl.col("policy") == "fifo") & pl.col("op").is_in([0, 1]))
    for phase, name, column in (("compute", "compute", "compute_ns"),
                                ("wire_wait", "data on the wire", "exposed_ns"),
                                ("bubble", "bubble", "bubble_ns")):
        spans = phases.filter(pl.col("phase") == phase).sort("op", "rank", "start_ns")
        trace = by_phase[name]
        assert list(trace.base) == pytest.approx(((spans["start_ns"] - t0) / 1e6).to_list())
        assert sum(trace.x) == pytest.approx(rows[column].sum() / 1e6)  # adds up to the sums
    compute = by_phase["compute"]
    first = {}  # each rank's first compute in iteration 0
    for y, base, op in zip(compute.y, compute.base, compute.customdata, strict=True):
        if op == 0:
            first.setdefault(y, base)
    starts = [first[f"g{r + 1} · rank {r}"] for r in range(8)]
    assert starts[0] == 0 and starts == sorted(set(starts))  # a staircase
    bubbles = [y for y, base in zip(by_phase["bubble"].y, by_phase["bubble"].base,
                                    strict=True) if base == 0]
    assert bubbles == [f"g{r + 1} · rank {r}" for r in range(1, 8)]  # idle until reached


def test_job_timeline_with_spans_gives_byte_identical_svg(rendered_twice):
    run, svg = _same_svg_twice(rendered_twice, SPANS, "job-timeline")
    assert b"as it recorded them" in svg and run.summary.run_id.encode() in svg
