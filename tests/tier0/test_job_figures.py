"""The figures of a run whose jobs shared the fabric (labkit.analysis.jobframes,
labkit.ui.plots.shared): their frames against the summary's own per-job numbers and the
kernel's counters, on fixtures and on the shipped two-jobs sample; the figures drawn from
them. Byte-identical SVG: test_figures.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from labkit.analysis import frames, jobframes
from labkit.analysis.jobs import shared_end
from labkit.analysis.windows import counter_delta, op_times, quantile, windows
from labkit.runs import rundir
from labkit.runs.rundir import SCHEMAS
from labkit.ui import figures, plots

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000
HEAVY, LIGHT = ("g1", "g2", "g5", "g6"), ("g3", "g4", "g7", "g8")


@pytest.fixture(scope="module")
def run() -> rundir.Run:
    return rundir.load_run(REPO / "data/sample/two-jobs")


def test_the_jobs_and_their_hosts_come_from_the_manifest(run):
    assert frames.shared_jobs(run.manifest.scenario) == (
        frames.SharedJobEntry("heavy", "allreduce", HEAVY, 300.0),
        frames.SharedJobEntry("light", "allreduce", LIGHT, 425.0))
    training = {"parallelism": "data", "ranks": ["g1", "g5"], "name": "dp", "compute_ms": 9}
    assert frames.shared_jobs({"jobs": [training]}) == (  # a job's entry has no kind
        frames.SharedJobEntry("dp", "job", ("g1", "g5"), 0.0),)
    one = rundir.load_run(REPO / "data/sample/bottleneck")
    assert frames.shared_jobs(one.manifest.scenario) == ()


def test_iterations_are_the_ones_the_summary_counts(run):
    frame = jobframes.job_iterations(run)
    assert frame.schema == jobframes.JOB_ITERATION_COLUMNS
    for policy, p in run.summary.policies.items():
        for job, j in p.jobs.each.items():
            ms = frame.filter((pl.col("policy") == policy) & (pl.col("job") == job))
            assert ms.height == j.iterations, (policy, job)
            it = ms["iteration_ms"]
            assert quantile(it, 0.5) == pytest.approx(j.iteration_p50_ms), (policy, job)
            assert quantile(it, 0.99) == pytest.approx(j.iteration_p99_ms), (policy, job)
            if j.shifted_ms is None:  # a shift makes one iteration long on purpose
                assert it.mean() == pytest.approx(j.iteration_p50_ms, rel=0.1)  # in reason
    alone = frame.filter(pl.col("policy") == "isolated")
    ops = op_times(run["collectives"].filter((pl.col("policy") == "isolated")
                                             & pl.col("host").is_in(LIGHT)))
    # from one op's start to the next one's; the last, its op and its 425 ms of compute
    light = alone.filter(pl.col("job") == "light")["iteration_ms"]
    ops = ops.sort("op")
    starts = ops["start_ns"].to_list()
    periods = [(b - a) / 1e6 for a, b in zip(starts, starts[1:], strict=False)]
    assert light.to_list() == pytest.approx([*periods, ops["ms"][-1] + 425.0])
    assert min(periods) >= float(ops["ms"].min()) + 425.0 - 1  # op, then its compute


def test_shares_add_up_to_the_kernels_counts_and_the_summarys_shares(run):
    shares = jobframes.job_shares(run)
    assert shares.schema == jobframes.JOB_SHARE_COLUMNS
    assert "isolated" not in set(shares["policy"])  # each job alone: not counted apart
    spans = windows(op_times(run["collectives"]))
    for policy, p in run.summary.policies.items():
        if policy == "isolated":
            continue
        start, end = spans[policy]
        mine = shares.filter(pl.col("policy") == policy)
        assert set(mine["port"]) == {p.bottleneck.port}
        counted = counter_delta(run["job_lanes"].filter(
            (pl.col("policy") == policy) & (pl.col("port") == p.bottleneck.port)),
            ["job"], ["enqueued_bytes"], start, end)
        for job, grown in counted.iter_rows():  # the samples nearest the window's ends
            total = mine.filter(pl.col("job") == job)["bytes"].sum()
            assert total == pytest.approx(grown, rel=0.01), (policy, job)
        first = (p.jobs.ranked_after_ms or 0.0) / 1e3  # the summary's part of the window
        last = (shared_end(run["collectives"].filter(pl.col("policy") == policy),
                           [HEAVY, LIGHT]) - start) / 1e9
        part = mine.filter(pl.col("t_s").is_between(first, last, closed="left"))
        for job, j in p.jobs.each.items():
            b = j.bottleneck
            own = part.filter(pl.col("job") == job)["bytes"].sum()
            assert own == pytest.approx(b.bytes, rel=0.01), (policy, job)
            assert own / part["bytes"].sum() == pytest.approx(b.share, abs=0.005)
    fair = shares.filter(pl.col("policy") == "fair")
    sent = fair.drop_nulls("share").group_by("t_s").agg(pl.col("share").sum())["share"]
    assert sent.to_list() == pytest.approx([1.0] * sent.len())  # in every bin with bytes
    assert fair.filter(pl.col("share").is_null())["bytes"].to_list() == [0.0] * (
        fair.height - 2 * sent.len())  # the others: no bytes, no share
    with pytest.raises(ValueError, match="no policy 'calm'"):
        jobframes.job_shares(run, "calm")


def _lanes(rows: list[tuple[int, str, int]]) -> pl.DataFrame:
    return pl.DataFrame([{"policy": "fair", "t_ns": t * MS, "port": port, "job": job,
                          "enqueued_packets": 0, "enqueued_bytes": b, "dropped_packets": 0,
                          "dropped_bytes": 0}
                         for t, job, b in rows for port in ("spine1-eth0", "leaf1-eth4")],
                        schema=SCHEMAS["job_lanes"])


def test_shares_read_the_counters_between_samples_in_bins_of_the_window(run):
    """Samples every 30 ms, bins of 50 ms from the first op (0) to the last's end (200):
    a counter is read on the line between the samples either side of each bin's edge."""
    rows = [(t, "heavy", 1000 * t) for t in range(0, 211, 30)]  # 1000 B/ms throughout
    rows += [(t, "light", 3000 * max(0, t - 90)) for t in range(0, 211, 30)]  # from 90 ms
    collectives = pl.DataFrame(
        [{"policy": "fair", "op": 0, "rank": r, "host": h, "start_ns": 0, "end_ns": 200 * MS,
          "wrong": 0, "compute_ns": 0, "exposed_ns": 0, "bubble_ns": 0}
         for r, h in enumerate(HEAVY)], schema=SCHEMAS["collectives"])
    fair = {"fair": run.summary.policies["fair"]}
    fake = replace(run, summary=replace(run.summary, policies=fair),
                   tables={**run.tables, "collectives": collectives,
                           "job_lanes": _lanes(rows)})
    frame = jobframes.job_shares(fake)
    assert frame["t_s"].unique(maintain_order=True).to_list() == pytest.approx([0, .05, .1, .15])
    heavy = frame.filter(pl.col("job") == "heavy")
    assert heavy["bytes"].to_list() == pytest.approx([50_000] * 4)
    assert heavy["mbps"].to_list() == pytest.approx([8.0] * 4)  # 1 MB/s
    light = frame.filter(pl.col("job") == "light")
    assert light["bytes"].to_list() == pytest.approx([0, 30_000, 150_000, 150_000])
    assert light["share"].to_list() == pytest.approx([0.0, 0.375, 0.75, 0.75])
    assert heavy["bytes"].sum() == 1000 * 200  # the counter's growth over the window
    lone = replace(fake, tables={**fake.tables, "job_lanes": _lanes(rows).clear()})
    assert jobframes.job_shares(lone).is_empty()


def test_marks_are_the_rankings_and_shifts_where_they_happened(run):
    marks = jobframes.job_marks(run)
    assert marks.schema == jobframes.JOB_MARK_COLUMNS
    ranked = marks.filter(pl.col("what") == "ranking")
    prio = run.summary.policies["job-priority"].jobs
    assert ranked.rows() == [("job-priority", pytest.approx(prio.ranked_after_ms / 1e3),
                              "ranking", "light in vip, heavy in normal")]
    shifts = marks.filter(pl.col("what") == "shift")
    assert set(shifts["policy"]) == {"interleave"} and shifts["t_s"].is_sorted()
    put_off = sum(int(t.split("+")[1].removesuffix(" ms")) for t in shifts["text"])
    each = run.summary.policies["interleave"].jobs.each
    assert put_off == pytest.approx(each["light"].shifted_ms, abs=1.0)
    assert all(t.startswith("light ") for t in shifts["text"])


def test_interleave_takes_turns_where_fair_sends_both_at_once(run):
    """The interleaving picture, in the sample's numbers: after interleave's last shift,
    bins where both jobs send are far rarer than under fair over the same seconds."""
    shares = jobframes.job_shares(run)
    after = jobframes.job_marks(run).filter(pl.col("policy") == "interleave")["t_s"].max()

    def both(policy: str) -> float:
        busy = (shares.filter((pl.col("policy") == policy) & (pl.col("t_s") > after))
                .group_by("t_s").agg((pl.col("mbps") > 10).all().alias("both")))
        return busy["both"].mean()

    assert both("interleave") < 0.25 * both("fair")


def test_bursts_draw_each_jobs_rate_a_panel_a_policy_and_the_marks(run):
    fig = plots.job_bursts(run)
    assert [a.text for a in fig.layout.annotations][:3] == ["fair", "job-priority",
                                                            "interleave"]
    assert "spine1-eth0" in fig.layout.title.text and "two-jobs" in fig.layout.title.text
    shares = jobframes.job_shares(run)
    drawn = [t for t in fig.data if t.stackgroup]
    assert [(t.name, t.xaxis) for t in drawn] == [(j, x) for x in ("x", "x2", "x3")
                                                  for j in ("heavy", "light")]
    light = shares.filter((pl.col("policy") == "interleave") & (pl.col("job") == "light"))
    assert list(drawn[5].y) == light["mbps"].to_list()
    assert drawn[0].fillcolor != drawn[1].fillcolor
    notes = [a.text for a in fig.layout.annotations]
    shifts = run["job_shifts"].sort("t_ns")
    assert shifts.height, "interleave shifted no job in this recording"
    first = f"{shifts['job'][0]} +{round(shifts['shift_ns'][0] / 1e6)} ms"
    assert "light in vip, heavy in normal" in notes and first in notes
    lines = [s for s in fig.layout.shapes if s.x0 == s.x1]  # the marks
    rankings = run["job_ranks"].filter(pl.col("policy") == "job-priority")["t_ns"].n_unique()
    assert [s.line.dash for s in lines] == ["dash"] * rankings + ["dot"] * shifts.height
    only = plots.job_bursts(run, ["together"])
    assert [t.name for t in only.data if t.stackgroup] == ["heavy", "light"]
    with pytest.raises(ValueError, match="no policy 'calm'"):
        plots.job_bursts(run, ["calm"])


def test_iteration_cdfs_draw_a_panel_a_job_and_a_line_a_policy(run):
    fig = plots.job_iteration_cdfs(run)
    assert [a.text for a in fig.layout.annotations] == ["heavy", "light"]
    per_job = {x: [t for t in fig.data if t.xaxis == x] for x in ("x", "x2")}
    for traces in per_job.values():
        assert len(traces) == len(run.summary.policies) and all(t.y[-1] == 1.0
                                                                 for t in traces)
    alone = per_job["x"][0]
    assert alone.name == "isolated (alone)" and alone.line.dash == "dash"
    heavy = run.summary.policies["fair"].jobs.each["heavy"]
    fair = next(t for t in per_job["x"] if t.name == "fair")
    assert max(fair.x) == pytest.approx(
        jobframes.job_iterations(run).filter((pl.col("policy") == "fair")
                                             & (pl.col("job") == "heavy"))["iteration_ms"].max())
    assert len(fair.x) == heavy.iterations
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.range == fig.layout.xaxis2.range


def test_a_run_of_several_jobs_gets_both_figures_and_one_job_neither(run):
    names = [n for n, _ in figures.figure_set(run)]
    assert {"job-bursts", "job-iteration-cdf"} <= set(names)
    one = [n for n, _ in figures.figure_set(rundir.load_run(REPO / "data/sample/bottleneck"))]
    assert not {"job-bursts", "job-iteration-cdf"} & set(one)
