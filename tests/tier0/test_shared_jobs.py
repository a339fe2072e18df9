"""Several jobs in one scenario (issue 48), without the kernel: what the checker accepts
and refuses (each refusal one line naming the key, before anything is built), how each
job is given a DSCP and lanes by name, how a one-job scenario is recorded as before, and
the summary's per-job figures from tables made by hand."""

from __future__ import annotations

import copy
from dataclasses import replace

import polars as pl
import pytest

from labkit.analysis.jobs import hist_quantile_us, jobs_report
from labkit.model import scenario
from labkit.model.paths import scenario_file
from labkit.model.scenario import ScenarioError
from labkit.model.summary_meta import JobMeta, SummaryMeta
from labkit.runs.experiment import merged
from labkit.runs.result import PolicyResult

FILE = scenario_file("two-jobs")
_, DOC = scenario.read_yaml(FILE)


def _parse(**changes):
    doc = copy.deepcopy(DOC)
    doc.update(changes)
    return scenario.parse(doc, str(FILE))


def _refused(**changes) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        _parse(**changes)
    return info.value


def _traffic(*jobs: dict) -> list:
    return [*jobs, DOC["traffic"][-1]]  # and the storage entry


A = {"kind": "allreduce", "name": "a", "ranks": ["g1", "g5"], "size_bytes": "1MiB",
     "iterations": 4}
B = {**A, "name": "b", "ranks": ["g2", "g6"]}


def test_the_shipped_scenario_has_two_jobs_each_with_its_own_dscp():
    sc = _parse()
    assert sc.several and [j.name for j in sc.jobs] == ["heavy", "light"]
    assert len({j.dscp for j in sc.jobs}) == 2 and all(j.dscp for j in sc.jobs)
    assert sc.ranks == ("g1", "g2", "g5", "g6", "g3", "g4", "g7", "g8")
    with pytest.raises(ValueError, match="2 jobs"):
        _ = sc.workload
    assert sc.alone(sc.jobs[1]).workload is sc.jobs[1]


def test_a_one_job_scenario_is_recorded_as_before():
    sc = scenario.load(scenario_file("bottleneck"))
    doc = sc.to_dict()
    assert "jobs" not in doc and doc["job"] is None and doc["program"] is None
    assert list(doc)[6:8] == ["allreduce", "storage"]
    assert "dscp" not in doc["allreduce"] and "name" not in doc["allreduce"]  # as before
    assert all("job" not in rule for rule in doc["lanes"])
    assert sc.jobs[0].dscp == 0  # labkit's ranks send unmarked, as always


def test_a_job_named_twice_is_refused_with_its_key():
    err = _refused(traffic=_traffic(A, {**B, "name": "a"}))
    assert err.key == "traffic[1].name" and "named twice" in err.reason


def test_two_of_labkits_jobs_on_one_host_are_refused():
    err = _refused(traffic=_traffic(A, {**B, "ranks": ["g1", "g6"]}))
    assert err.key == "traffic[1].ranks" and "'g1'" in err.reason and "4791" in err.reason


def test_two_jobs_with_one_dscp_are_refused():
    err = _refused(traffic=_traffic({**A, "dscp": 12}, {**B, "dscp": 12}))
    assert err.key == "traffic[1].dscp" and "DSCP 12" in err.reason


def test_a_lane_for_a_job_that_does_not_exist_is_refused():
    err = _refused(lanes={"vip": [{"roce": True}], "normal": [{"job": "nobody"}]})
    assert err.key == "lanes.normal[0].job" and "no job 'nobody'" in err.reason


def test_a_lane_by_job_matches_its_dscp_and_is_tried_first():
    sc = _parse(lanes={"vip": [{"roce": True}], "normal": [{"job": "light"}]})
    light = next(j for j in sc.jobs if j.name == "light")
    assert sc.lanes[0].lane == "normal" and sc.lanes[0].dscp == light.dscp


def test_policies_for_several_jobs_need_several_jobs():
    err = _refused(traffic=_traffic(A), policies=["isolated", "job-priority"])
    assert err.key == "policies" and "job-priority" in err.reason


def test_a_job_dscp_avoids_the_lane_rules_dscps():
    sc = _parse(lanes={"vip": [{"roce": True}, {"dscp": 26}]})
    assert 26 not in {j.dscp for j in sc.jobs}


def test_isolated_runs_of_each_job_merge_into_one_policy():
    one, two = PolicyResult("isolated", "fifo"), PolicyResult("isolated", "fifo")
    one.events_lost, two.events_lost = 2, 3
    one.loss_drops, two.loss_drops = {"x": 1}, {"x": 2, "y": 1}
    one.aborted, two.orchestrator_cpu_share = True, 0.5
    one.ecn_marks, two.ecn_marks = {"p": {"marked": 1}}, {"p": {"marked": 2, "ect": 4}}
    both = merged("isolated", [one, two])
    assert (both.events_lost, both.loss_drops, both.aborted,
            both.orchestrator_cpu_share) == (5, {"x": 3, "y": 1}, True, 0.5)
    assert both.ecn_marks == {"p": {"marked": 3, "ect": 4}}


def test_a_log2_histogram_quantile_falls_inside_its_bucket():
    rows = pl.DataFrame({"bucket": [10, 20], "count": [99, 1]})
    assert hist_quantile_us(rows, 0.5) == pytest.approx(2**10 * 1.5 / 1e3, rel=0.02)
    assert 2**20 / 1e3 <= hist_quantile_us(rows, 0.999) <= 2**21 / 1e3
    assert hist_quantile_us(rows.clear(), 0.5) is None


def _meta(jobs: tuple[JobMeta, ...]) -> SummaryMeta:
    return SummaryMeta(scenario="s", run_id="r", scale_factor=1, policies=("fair",),
                       workload="allreduce", ranks=2, ring_link_mbps=100, ports={},
                       size_bytes=1 << 20, jobs=jobs)


def test_each_job_is_measured_while_both_ran_and_utilization_weighs_gpus():
    inner = _meta(())
    jobs = (JobMeta("a", "allreduce", ("g1", "g2"), 10, 2, 100.0, inner),
            JobMeta("b", "allreduce", ("g3", "g4", "g5", "g6"), 12, 4, 0.0, inner))
    ms = 1_000_000
    rows = [(op, r, h, op * 200 * ms, op * 200 * ms + 100 * ms)
            for op in range(5) for r, h in enumerate(("g1", "g2"))]
    rows += [(op, r, h, op * 50 * ms, op * 50 * ms + 50 * ms)
             for op in range(8) for r, h in enumerate(("g3", "g4", "g5", "g6"))]
    collectives = pl.DataFrame(rows, schema=["op", "rank", "host", "start_ns", "end_ns"],
                               orient="row").with_columns(
        pl.lit(0).alias("wrong"), pl.lit(0).alias("compute_ns"), pl.lit("fair").alias("policy"))
    lanes = pl.DataFrame({"t_ns": [0, 0, 400 * ms, 400 * ms], "port": ["p"] * 4,
                          "job": ["a", "b", "a", "b"], "enqueued_packets": [0, 0, 10, 30],
                          "enqueued_bytes": [0, 0, 1000, 3000], "dropped_packets": [0, 0, 0, 2]})
    empty = pl.DataFrame(schema={"kind": pl.Utf8, "port": pl.Utf8, "lane": pl.Utf8,
                                 "bucket": pl.Int64, "count": pl.Int64})
    transport = pl.DataFrame({"host": ["g1", "g3"], "retransmits": [0, 7],
                              "timeouts": [0, 1]})
    tables = {"collectives": collectives, "job_lanes": lanes, "histograms": empty,
              "job_ranks": pl.DataFrame(schema={"t_ns": pl.Int64}), "transport": transport,
              "job_shifts": pl.DataFrame(schema={"job": pl.Utf8, "shift_ns": pl.Int64})}
    report = jobs_report(_meta(jobs), "fair", tables.__getitem__, "p", 0)
    b = report.each["b"]
    assert b.iterations == 8 and report.each["a"].iterations == 2  # b ended at 400 ms
    assert report.each["a"].gpu_utilization == pytest.approx(0.5)  # 100 ms of 200
    assert b.gpu_utilization == 0.0
    assert report.gpu_utilization == pytest.approx((0.5 * 2 + 0 * 4) / 6)
    assert b.bottleneck and b.bottleneck.share == pytest.approx(0.75)
    assert b.bottleneck.dropped_packets == 2
    assert (b.retransmits, b.timeouts, b.shifted_ms) == (7, 1, None)


def test_two_programs_each_get_a_dscp_and_a_vip_rule():
    sc = scenario.load(scenario_file("two-ddp"))
    wide, deep = sc.programs
    assert {wide.dscp, deep.dscp} == {26, 10} and sc.several
    vip = {r.dscp for r in sc.lanes if r.lane == "vip" and r.dscp is not None}
    assert {wide.dscp, deep.dscp} <= vip


def test_a_program_beside_another_job_on_one_host_is_refused():
    _, doc = scenario.read_yaml(scenario_file("two-ddp"))
    doc["traffic"][1]["ranks"] = ["g1", "g4", "g7", "g8"]
    with pytest.raises(ScenarioError) as info:
        scenario.parse(doc, "two-ddp.yaml")
    assert info.value.key == "traffic[1].ranks" and "hosts of its own" in info.value.reason


def test_one_program_alone_carries_dscp_26_as_always():
    sc = scenario.load(scenario_file("pytorch-ddp"))
    assert sc.program and sc.program.dscp == 26


def test_policies_asked_for_beside_the_file_are_checked_against_its_jobs():
    one = scenario.load(scenario_file("bottleneck"))
    with pytest.raises(ScenarioError, match="shares the fabric between jobs"):
        scenario.check_policies(["job-priority"], "bottleneck.yaml", sc=one)
    ddp = scenario.load(scenario_file("two-ddp"))
    with pytest.raises(ScenarioError, match="program of yours"):
        scenario.check_policies(["interleave"], "two-ddp.yaml", sc=ddp)
    assert scenario.check_policies(["job-weights", "job-priority"], "two-ddp.yaml", sc=ddp)
    mixed = replace(ddp, jobs=(ddp.jobs[0], one.jobs[0]))
    with pytest.raises(ScenarioError, match="not both at once"):
        scenario.check_policies(["job-priority"], "two-ddp.yaml", sc=mixed)


def test_labkit_serve_refuses_several_programs():
    from labkit.ui.serve import user_code

    assert user_code(scenario.load(scenario_file("two-ddp"))) is not None


def test_auto_with_several_jobs_and_a_dscp_a_rule_owns_are_refused():
    err = _refused(traffic=_traffic({**A, "algo": "auto"}, B))
    assert err.key == "traffic[1]" and "algo: auto" in err.reason
    err = _refused(traffic=_traffic({**A, "dscp": 12}, B),
                   lanes={"vip": [{"roce": True}], "low": [{"dscp": 12}]})
    assert "lanes.low" in err.reason


def test_the_launchers_lines_are_read_whole_however_they_arrive():
    import os

    from labkit.traffic.opsteps import PipeLines

    r, w = os.pipe()
    lines = PipeLines(r)
    os.write(w, b"SHIFT 3 100\nEN")
    assert lines.read() == ["SHIFT 3 100"]
    os.write(w, b"D\n")
    assert lines.read() == ["END"]
    os.close(w)
    assert lines.read() is None
    os.close(r)
