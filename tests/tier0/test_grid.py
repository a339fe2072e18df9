"""Grid files: key paths, validation (file, key and reason in every error) and expansion
into points in a stable order, each point's scenario carrying its values."""

from pathlib import Path

import pytest
import yaml

from labkit.model import grid, scenario
from labkit.model.grid import GridError
from labkit.model.scenario import ScenarioError

REPO = Path(__file__).resolve().parents[2]
BOTTLENECK = REPO / "topologies/bottleneck.yaml"


def write_grid(tmp_path: Path, doc: dict, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"scenario": str(BOTTLENECK), **doc}, sort_keys=False))
    return path


GRID_2x2x2 = {"axes": {"traffic[0].size_bytes": ["1MiB", "4MiB"],
                       "defaults.link.rate_mbps": [50, 100]},
              "seeds": [1, 2], "duration": 5}


def test_a_2x2x2_grid_expands_into_8_points_in_a_stable_order(tmp_path):
    g = grid.load(write_grid(tmp_path, GRID_2x2x2))
    points = g.points
    assert g.size == len(points) == 8
    assert [p.name for p in points] == [f"p{i:03d}" for i in range(8)]
    # the axes in the file's order, then the policy sets, then the seeds: the last fastest
    assert [(p.parameters["traffic[0].size_bytes"], p.parameters["defaults.link.rate_mbps"],
             p.seed) for p in points] == [
        ("1MiB", 50, 1), ("1MiB", 50, 2), ("1MiB", 100, 1), ("1MiB", 100, 2),
        ("4MiB", 50, 1), ("4MiB", 50, 2), ("4MiB", 100, 1), ("4MiB", 100, 2)]
    assert [p.label for p in grid.load(write_grid(tmp_path, GRID_2x2x2)).points] == \
        [p.label for p in points]  # read again: the same order
    assert all(p.policies == ("isolated", "fifo", "priority") for p in points)  # the file's
    assert g.duration == 5.0


def test_each_point_s_scenario_carries_its_values(tmp_path):
    points = grid.load(write_grid(tmp_path, GRID_2x2x2)).points
    base = scenario.load(BOTTLENECK)
    for p in points:
        sc = p.scenario
        assert sc.allreduce.size_bytes == {"1MiB": 1 << 20, "4MiB": 4 << 20}[
            p.parameters["traffic[0].size_bytes"]]
        rates = {link.name: link.rate_mbps for link in sc.fabric.links}
        assert rates["leaf1-spine1"] == rates["leaf1-g1"] == p.parameters["defaults.link.rate_mbps"]
        assert rates["leaf2-spine1"] == 1000  # written on the link itself: not a default
        assert sc.seed == p.seed and sc.name == base.name
        assert sc.sha256 == ""  # a derived scenario is not the file
        # everything the grid does not vary is the file's
        assert sc.storage == base.storage and sc.lanes == base.lanes
        assert sc.policies == base.policies
    assert scenario.load(BOTTLENECK) == base  # the file's document was not touched


def test_policy_entries_are_runs_a_name_alone_or_a_set(tmp_path):
    g = grid.load(write_grid(tmp_path, {"policies": ["fifo", ["isolated", "priority"]],
                                        "seeds": [3]}))
    assert g.policies == (("fifo",), ("isolated", "priority"))
    assert [(p.policies, p.seed, p.scenario.seed) for p in g.points] == [
        (("fifo",), 3, 3), (("isolated", "priority"), 3, 3)]
    only_seeds = grid.load(write_grid(tmp_path, {}))
    (p,) = only_seeds.points
    assert p.parameters == {} and p.seed == 1  # the scenario's own seed and policies
    assert p.scenario.sha256 == scenario.load(BOTTLENECK).sha256  # the file, unchanged


def test_selectors_pick_a_list_item_by_a_field(tmp_path):
    g = grid.load(write_grid(tmp_path, {"axes": {
        "traffic[kind=storage].offered_load": [0.5, 1.5],
        "fabric.links[1].rate_mbps": [500]}}))
    assert g.axes[0].path == ("traffic", 1, "offered_load")
    assert [p.scenario.storage[0].offered_load for p in g.points] == [0.5, 1.5]
    assert all({lk.name: lk.rate_mbps for lk in p.scenario.fabric.links}["leaf2-spine1"] == 500
               for p in g.points)


def test_relative_paths_of_the_scenario_keep_working(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab/calm.py").write_text("class Calm: ...\n")
    doc = yaml.safe_load(BOTTLENECK.read_text())
    doc["control"] = {"controllers": {"calm": "calm.py:Calm"}}
    (tmp_path / "lab/s.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "grids").mkdir()
    (tmp_path / "grids/g.yaml").write_text(yaml.safe_dump({
        "scenario": "../lab/s.yaml", "axes": {"traffic[0].iterations": [5, 10]},
        "policies": [["isolated", "priority+calm"], "calm"]}))
    g = grid.load(tmp_path / "grids/g.yaml")
    assert g.scenario_path == str(tmp_path / "lab/s.yaml")
    for p in g.points:
        ((name, spec),) = p.scenario.control.controllers
        assert name == "calm" and spec == f"{tmp_path / 'lab/calm.py'}:Calm"


def test_key_paths_read_and_resolve():
    doc = yaml.safe_load(BOTTLENECK.read_text())
    assert grid.parse_key("traffic[0].size_bytes") == ["traffic", 0, "size_bytes"]
    assert grid.parse_key("traffic[kind=storage].queues") == ["traffic", ("kind", "storage"),
                                                              "queues"]
    assert grid.resolve(doc, "defaults.link.loss_percent") == ("defaults", "link",
                                                               "loss_percent")
    assert grid.resolve(doc, "fabric.hosts.gpu.leaf1[2]") == ("fabric", "hosts", "gpu",
                                                              "leaf1", 2)
    assert grid.resolve({"a": None}, "a.b.c") == ("a", "b", "c")  # made when applied
    applied = grid.apply(doc, ("defaults", "link", "loss_percent"), 1)
    assert applied["defaults"]["link"]["loss_percent"] == 1
    assert "loss_percent" not in doc["defaults"]["link"]
    assert grid.apply({}, ("a", "b"), [1]) == {"a": {"b": [1]}}


@pytest.mark.parametrize(("key", "words"), [
    ("traffic..size_bytes", "cannot read 'traffic..size_bytes' at character 8"),
    ("traffic[0]size_bytes", "at character 11"),
    ("[0].size_bytes", "must start with a key of the scenario"),
    ("traffic.size_bytes", "traffic is a list, not a mapping"),
    ("traffic[7].size_bytes", "traffic has 2 item(s): [7] is out of range"),
    ("traffic[kind=job].iterations", "no item of traffic has kind=job"),
    ("traffic[0].size_bytes[1]", "traffic[0].size_bytes is a string, not a list"),
    ("fabric.links[0].rate_mbps", "fabric.links[0] is a list, not a mapping"),
])
def test_a_key_path_that_does_not_fit_says_where(key, words):
    doc = yaml.safe_load(BOTTLENECK.read_text())
    with pytest.raises(ValueError) as caught:
        grid.resolve(doc, key)
    assert words in str(caught.value)


def _many_rules(port: int) -> list[dict]:
    return [{"udp_dport": port + i} for i in range(20)]


@pytest.mark.parametrize(("doc", "key", "words"), [
    ({"axis": {}}, "axis", "unknown key (allowed: axes, description, duration"),
    ({"scenario": "nowhere.yaml"}, "scenario", "does not exist"),
    ({"scenario": 3}, "scenario", "must be a path to a scenario file"),
    ({"name": "my grid"}, "name", "cannot name a batch"),
    ({"axes": ["traffic[0].size_bytes"]}, "axes", "must be a mapping"),
    ({"axes": {"traffic[0].size_bytes": []}}, "axes.traffic[0].size_bytes",
     "an axis needs at least one value"),
    ({"axes": {"traffic[0].size_bytes": "1MiB"}}, "axes.traffic[0].size_bytes",
     "must be a list of values, got a string"),
    ({"axes": {"traffic..size_bytes": [1]}}, "axes.traffic..size_bytes", "cannot read"),
    ({"axes": {"traffic[3].size_bytes": [1]}}, "axes.traffic[3].size_bytes", "out of range"),
    ({"axes": {"traffic[0].size_byte": ["1MiB"]}}, "axes.traffic[0].size_byte",
     "traffic[0].size_byte: unknown key"),
    ({"axes": {"traffic[0].size_bytes": ["1MiB", "4XiB"]}}, "axes.traffic[0].size_bytes",
     "value 4XiB (item 1) makes the scenario invalid"),
    ({"axes": {"defaults.link.rate_mbps": [50, -5]}}, "axes.defaults.link.rate_mbps",
     "must be between 1 and 10000 (Mbit/s, before rate_factor's x1/16 to x16), got -5"),
    ({"axes": {"traffic[0].size_bytes": ["1MiB", "1MiB"]}}, "axes.traffic[0].size_bytes",
     "value 1MiB is given twice (items 0 and 1)"),
    ({"axes": {"seed": [1, 2]}}, "axes.seed", "give the seeds as the grid's `seeds`"),
    ({"axes": {"policies": [["fifo"]]}}, "axes.policies", "the grid's `policies`"),
    ({"axes": {"name": ["a", "b"]}}, "axes.name", "cannot be an axis"),
    ({"axes": {"traffic[0]": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "1MiB",
                               "iterations": 5}],
               "traffic[0].size_bytes": ["1MiB"]}},
     "axes.traffic[0].size_bytes", "overlaps the axis 'traffic[0]'"),
    ({"axes": {"traffic[0].size_bytes": ["1MiB"],
               "traffic[kind=allreduce].size_bytes": ["2MiB"]}},
     "axes.traffic[kind=allreduce].size_bytes", "both set traffic[0].size_bytes"),
    ({"axes": {"lanes.vip": [_many_rules(1000)], "lanes.normal": [_many_rules(2000)]}},
     "axes", "the scenario refuses the combination lanes.vip="),
    ({"policies": []}, "policies", "must be a non-empty list"),
    ({"policies": ["fifo", ["isolated", "nonsense"]]}, "policies[1][1]",
     "unknown policy 'nonsense'"),
    ({"policies": ["chaos"]}, "policies[0]", "unknown policy 'chaos'"),
    ({"policies": [["fifo", "fifo"]]}, "policies[0]", "names a policy twice"),
    ({"policies": ["fifo", ["fifo"]]}, "policies[1]", "the same policies as an earlier entry"),
    ({"seeds": []}, "seeds", "must be a non-empty list of integers"),
    ({"seeds": [1, "two"]}, "seeds[1]", "must be an integer"),
    ({"seeds": [1, 1]}, "seeds", "a seed is given twice"),
    ({"duration": 0}, "duration", "must be a number of seconds > 0"),
    ({"duration": "10s"}, "duration", "must be a number of seconds > 0"),
    ({"slurm": {"nodes": 2}}, "slurm.nodes", "unknown key (allowed: account, constraint"),
    ({"slurm": {"time_min": 0}}, "slurm.time_min", "whole number of minutes >= 1"),
    ({"slurm": {"setup": "module load x"}}, "slurm.setup", "a list of shell lines"),
])
def test_a_bad_grid_names_the_file_the_key_and_the_reason(tmp_path, doc, key, words):
    path = write_grid(tmp_path, doc)
    with pytest.raises(GridError) as caught:
        grid.load(path)
    exc = caught.value
    assert isinstance(exc, ScenarioError)  # the CLI's exit 2, one line
    assert (exc.file, exc.key) == (str(path), key), str(exc)
    assert words in exc.reason, str(exc)
    assert str(exc).startswith(f"{path}: {key}: ") and "\n" not in str(exc)


def test_a_bad_grid_file_itself(tmp_path):
    (tmp_path / "twice.yaml").write_text(f"scenario: {BOTTLENECK}\nseeds: [1]\nseeds: [2]\n")
    with pytest.raises(GridError, match="seeds: written twice, at line 2 and line 3"):
        grid.load(tmp_path / "twice.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(GridError, match="<top>: must be a mapping"):
        grid.load(tmp_path / "list.yaml")
    with pytest.raises(GridError, match="cannot read the file"):
        grid.load(tmp_path / "none.yaml")
    bad = yaml.safe_load(BOTTLENECK.read_text())
    bad["policies"] = ["chaos"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    (tmp_path / "g.yaml").write_text("scenario: bad.yaml\n")
    with pytest.raises(GridError, match="scenario: the scenario itself is invalid: .*chaos"):
        grid.load(tmp_path / "g.yaml")


def test_the_example_grid_is_valid():
    g = grid.load(REPO / "topologies/grids/bottleneck-sizes.yaml")
    assert g.size == 8 and g.slurm.time_min == 15 and g.duration == 10


def test_set_changes_one_key_of_a_scenario_for_one_run():
    sc = grid.scenario_with(BOTTLENECK, ["fabric.lossless=true", "defaults.link.buffer_kb=4096",
                                         "traffic[kind=allreduce].size_bytes=1MiB"])
    assert sc.fabric.lossless == ("vip",) and sc.allreduce.size_bytes == 1 << 20
    assert sc.sha256 == ""  # not the file: the run records the scenario whole
    assert scenario.load(BOTTLENECK).fabric.lossless == ()


@pytest.mark.parametrize("setting, key, reason", [
    ("fabric.lossless", "--set fabric.lossless", "must be KEY=VALUE"),
    ("traffic[9].size_bytes=1", "--set traffic[9].size_bytes", "out of range"),
    ("fabric.lossless=maybe", "fabric.lossless", "must be true (the vip lane), false"),
])
def test_a_bad_setting_names_itself(setting, key, reason):
    with pytest.raises(ScenarioError) as err:
        grid.scenario_with(BOTTLENECK, [setting])
    assert err.value.key == key and reason in err.value.reason
