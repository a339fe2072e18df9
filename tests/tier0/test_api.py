"""The in-process API refuses a bad request before it touches the kernel or the disk."""

from pathlib import Path

import pytest

import labkit
from labkit.runs import resolve, runner

REPO = Path(__file__).resolve().parents[2]
BOTTLENECK = REPO / "topologies/bottleneck.yaml"


def test_the_api_is_importable_from_the_package_without_loading_it():
    assert labkit.run is runner.run and labkit.sweep is runner.sweep
    assert labkit.load_scenario(BOTTLENECK).name == "bottleneck"
    with pytest.raises(AttributeError):
        labkit.no_such_thing  # noqa: B018


@pytest.mark.parametrize(("kwargs", "key", "words"), [
    ({"policies": ["fifo", "nonsense"]}, "policies[1]", "nonsense"),
    ({"duration": 0}, "duration", "must be > 0"),
    ({"duration": float("nan")}, "duration", "got nan"),
    ({"duration": float("inf")}, "duration", "at most 3600"),
    ({"pcap": ["leaf1-spine1"], "pcap_snaplen": -1}, "pcap_snaplen", "got -1"),
    ({"policies": ["reactive"], "telemetry": False}, "telemetry", "steers its valves"),
    ({"pcap": ["leaf1-nowhere"]}, "pcap", "leaf1-nowhere"),
])
def test_a_bad_argument_names_itself_and_creates_nothing(tmp_path, kwargs, key, words):
    with pytest.raises(labkit.ScenarioError) as caught:
        labkit.run(BOTTLENECK, out=tmp_path / "run", **kwargs)
    assert caught.value.key == key and words in str(caught.value)
    assert not list(tmp_path.iterdir())


def test_a_parsed_scenario_is_not_parsed_again_and_its_errors_name_what_the_caller_says(
        tmp_path, monkeypatch):
    from labkit.model import scenario

    sc = labkit.load_scenario(BOTTLENECK)
    monkeypatch.setattr(scenario, "load", lambda path: pytest.fail(f"{path} parsed again"))
    with pytest.raises(labkit.ScenarioError) as caught:
        labkit.run(sc, ["nonsense"], out=tmp_path / "run", source=str(BOTTLENECK))
    assert (caught.value.file, caught.value.key) == (str(BOTTLENECK), "policies[0]")
    with pytest.raises(labkit.ScenarioError) as caught:
        labkit.run(sc, ["nonsense"], out=tmp_path / "run")
    assert caught.value.file == "scenario bottleneck"
    assert not list(tmp_path.iterdir())


def test_a_run_request_is_resolved_in_one_place_without_the_kernel():
    req = resolve.resolve_run(BOTTLENECK, "fifo", seed=7, pcap="leaf1-spine1")
    assert req.source == str(BOTTLENECK) and req.scenario.seed == 7
    assert [p.name for p in req.policies] == ["fifo"] and req.topology.fabric == req.scenario.fabric
    assert req.pcap.links == ("leaf1-spine1",) and req.rates is None and req.auto is None
    assert resolve.resolve_run(req.scenario).policies == resolve.resolve_run(BOTTLENECK).policies


def test_the_resolving_steps_keep_their_old_path_with_a_warning():
    with pytest.warns(DeprecationWarning, match="runner.resolve_rates is now "
                                                "labkit.runs.resolve.resolve_rates"):
        assert runner.resolve_rates is resolve.resolve_rates


def test_a_bad_sweep_names_what_is_wrong():
    sc = labkit.load_scenario(BOTTLENECK)
    with pytest.raises(labkit.ScenarioError, match="iters: must be at least 1"):
        runner.check_sweep(sc, "all_reduce", "ring", [65536], 0)
    with pytest.raises(labkit.ScenarioError, match="algo:"):
        runner.check_sweep(sc, "all_reduce", "nonsense", [65536], 1)


def test_a_sweep_left_without_algo_runs_the_ops_first_as_the_cli_does(tmp_path, monkeypatch):
    """labkit.sweep(sc, "gather") is checked and would run gather's direct, as `labkit sweep`
    without --algo does; checked before anything is built (not_ready stands in: no root
    needed, nothing created)."""
    from labkit.model.traffic import schedules

    sc = labkit.load_scenario(BOTTLENECK)
    checked = []
    monkeypatch.setattr(runner, "check_sweep", lambda sc, op, algo, *rest: (
        checked.append((op, algo)), resolve.check_sweep(sc, op, algo, *rest)))
    monkeypatch.setattr(runner, "not_ready", lambda sc=None: "stand-in: stop before building")
    for op in schedules.OPS:
        with pytest.raises(runner.NotReady, match="stand-in"):
            labkit.sweep(sc, op, sizes=[65536], out=tmp_path / "sweep")
    assert checked == [(op, schedules.ALGOS[op][0]) for op in schedules.OPS]
    assert ("gather", "direct") in checked and ("all_reduce", "ring") in checked
    with pytest.raises(labkit.ScenarioError, match="no algorithm 'ring' for gather"):
        labkit.sweep(sc, "gather", "ring", sizes=[65536], out=tmp_path / "sweep")
    with pytest.raises(labkit.ScenarioError) as caught:
        labkit.sweep(sc, "allreduce", sizes=[65536], out=tmp_path / "sweep")
    assert caught.value.key == "op" and "all_reduce" in str(caught.value)
    assert not list(tmp_path.iterdir())


def test_without_root_the_reason_and_the_fix_are_given():
    reason = runner.not_ready(euid=1000)
    assert "needs root" in reason and "labkit report" in reason
