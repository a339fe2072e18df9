"""labkit calibrate's logic: scaled scenarios, a run's faults, and which factors it tries."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.analysis import calibration as calibrate
from labkit.model import scenario
from labkit.model.summary import DequeueTiming, Summary

REPO = Path(__file__).resolve().parents[2]


def test_a_scaled_scenario_is_the_same_experiment_faster():
    sc = scenario.load(REPO / "topologies/bottleneck.yaml")
    x4 = calibrate.scaled(sc, 4)
    assert [link.rate_mbps for link in x4.fabric.links] == \
        [link.rate_mbps * 4 for link in sc.fabric.links]
    assert x4.allreduce.compute_ms == sc.allreduce.compute_ms / 4
    assert x4.allreduce.size_bytes == sc.allreduce.size_bytes
    assert x4.scale_factor == sc.scale_factor / 4
    assert x4.name == "bottleneck-x4" and x4.sha256 == ""  # not the file any more
    assert x4.storage == sc.storage  # offered loads are shares of the bottleneck already
    assert calibrate.bottleneck_rate(x4) == 400
    assert calibrate.scaled(sc, 1) is sc


def test_a_job_scales_its_compute_times_only():
    sc = scenario.load(REPO / "topologies/pipeline-parallel.yaml")
    half = calibrate.scaled(sc, 0.5)
    before, after = dict(sc.job.params), dict(half.job.params)
    assert after["stage_compute_ms"] == before["stage_compute_ms"] * 2
    assert after["activation_bytes"] == before["activation_bytes"]
    assert after["microbatches"] == before["microbatches"]


def _summary() -> Summary:
    return Summary.from_json(json.loads((REPO / "data/sample/bottleneck/summary.json")
                                        .read_text()))


def test_a_faithful_run_has_no_faults_and_each_fault_is_named():
    summary = _summary()
    assert calibrate.faults(summary) == []
    iso, fifo = summary.policies["isolated"], summary.policies["fifo"]
    late = DequeueTiming(pairs=500, p50=0.1, p90=0.5, p99=9.0, mean=0.2, excess=0.3,
                         late_share=0.02, sojourn_p99_us=800.0, flagged=True)
    bad = replace(summary, policies={
        "isolated": replace(iso, fidelity=replace(iso.fidelity, generator_limited=True)),
        "fifo": replace(fifo, cpu_busy=0.97, fidelity=replace(
            fifo.fidelity, cpu_bound=True, links_at_rate=False, dequeue={"spine1-eth0": late}))})
    assert calibrate.faults(bad) == [
        "isolated: the All-Reduce alone was limited by its generator",
        "fifo: CPU-bound (97% busy)", "fifo: a congested port sent below its rate",
        "fifo: spine1-eth0 did not keep time"]


@pytest.mark.parametrize("limit, tried", [
    (4, [1, 2, 4, 8]),  # up while trials hold, and one step past the last that did
    (100, [1, 2, 4, 8, 16]),  # never past MAX_FACTOR
    (0.25, [1, 0.5, 0.25]),  # down until one holds
    (0, [1, 0.5, 0.25, 0.125, 0.0625]),  # never below MIN_FACTOR
])
def test_factors_double_while_trials_hold_and_halve_until_one_does(limit, tried):
    assert calibrate.factors_to_try(lambda f: f <= limit) == tried


def _trial(factor: float, held: bool) -> calibrate.Trial:
    return calibrate.Trial(factor, 100 * factor, f"data/runs/x{factor:g}",
                           () if held else ("fifo: CPU-bound (95% busy)",), 0.5)


def test_the_calibration_advises_the_fastest_trial_that_held():
    c = calibrate.Calibration("bottleneck", 100, 4000,
                              (_trial(1, True), _trial(2, True), _trial(4, False)))
    assert c.best.factor == 2
    assert c.advice == ("set every link rate x2 (the bottleneck at 200 Mbit/s), every "
                        "compute time /2 and scale_factor: 2000, as its trial did")
    doc = c.to_dict()
    assert doc["best_rate_mbps"] == 200 and [t["held"] for t in doc["trials"]] == \
        [True, True, False]
    assert calibrate.Calibration("b", 100, 4000, (_trial(1, True), _trial(2, False))) \
        .advice == "the scenario's own rates hold on this machine"
    assert calibrate.Calibration("b", 100, 4000, (_trial(1, False),)).best is None
    busy = calibrate.Calibration("b", 100, 4000, (_trial(1, True),), busy_before=0.4)
    assert busy.advice.endswith("calibrate again when it is quiet")
    assert "40% busy with other work" in busy.advice
