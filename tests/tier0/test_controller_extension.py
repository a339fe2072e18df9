"""A user's own controller: named in a scenario, on the command line or in Python, and
refused with a clear error before anything runs when it cannot work."""

from pathlib import Path

import pytest
import yaml

import labkit
from labkit import control
from labkit.control import Controller
from labkit.model import extend, scenario

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs/examples/controller.py"
BURST = REPO / "topologies/checkpoint-burst.yaml"


def with_controllers(tmp_path: Path, controllers: dict, policies: list[str]) -> Path:
    doc = yaml.safe_load(BURST.read_text())
    doc.setdefault("control", {})["controllers"] = controllers
    doc["policies"] = policies
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_example_loads_and_a_scenario_may_name_it(tmp_path):
    (tmp_path / "controller.py").write_text(EXAMPLE.read_text())
    sc = scenario.load(with_controllers(tmp_path, {"calm": "controller.py:Calm"},
                                        ["fifo", "calm", "priority+calm"]))
    assert sc.policies == ("fifo", "calm", "priority+calm")
    ((name, spec),) = sc.control.controllers
    assert name == "calm" and spec == f"{(tmp_path / 'controller.py').resolve()}:Calm"
    cls = control.load(spec)
    assert issubclass(cls, Controller) and cls.__name__ == "Calm"
    assert "def step" in extend.source_of(cls)


@pytest.mark.parametrize(("controllers", "key", "words"), [
    ({"calm": "nowhere.py:Calm"}, "control.controllers.calm", "does not exist"),
    ({"calm": "controller.py"}, "control.controllers.calm", "must be 'file.py:ClassName'"),
    ({"fifo": "controller.py:Calm"}, "control.controllers.fifo", "built in"),
    ({"Calm!": "controller.py:Calm"}, "control.controllers.Calm!", "a label"),
])
def test_a_bad_controller_entry_names_its_key(tmp_path, controllers, key, words):
    (tmp_path / "controller.py").write_text(EXAMPLE.read_text())
    with pytest.raises(scenario.ScenarioError) as caught:
        scenario.load(with_controllers(tmp_path, controllers, ["fifo"]))
    assert caught.value.key == key and words in caught.value.reason


def test_a_policy_naming_an_unknown_controller_says_which_exist(tmp_path):
    with pytest.raises(scenario.ScenarioError, match="unknown controller 'calm'.*reactive"):
        scenario.load(with_controllers(tmp_path, {}, ["fifo+calm"]))


@pytest.mark.parametrize(("source", "words"), [
    ("def broken(:\n", "fails to import: SyntaxError"),
    ("raise RuntimeError('no GPU here')\n", "fails to import: RuntimeError: no GPU here"),
    ("X = 1\n", "defines no Calm"),
    ("class Calm:\n    pass\n", "not a subclass of labkit.control.base.Controller"),
    ("from labkit.control import Controller\nclass Calm(Controller):\n    pass\n",
     "does not define step"),
])
def test_a_controller_that_cannot_work_is_refused_with_the_reason(tmp_path, source, words):
    (tmp_path / "bad.py").write_text(source)
    with pytest.raises(labkit.ScenarioError) as caught:
        labkit.run(BURST, ["calm"], controllers={"calm": f"{tmp_path / 'bad.py'}:Calm"},
                   out=tmp_path / "run")
    assert caught.value.key == "controllers.calm" and words in caught.value.reason
    assert not (tmp_path / "run").exists()


def test_a_class_from_python_needs_step_too(tmp_path):
    class Lazy(Controller):
        name = "lazy"

    with pytest.raises(labkit.ScenarioError, match="does not define step"):
        labkit.run(BURST, ["lazy"], controllers={"lazy": Lazy}, out=tmp_path / "run")


def with_kind(tmp_path: Path, source: str, entry: dict) -> Path:
    (tmp_path / "kind.py").write_text(source)
    doc = yaml.safe_load(BURST.read_text())
    doc["kinds"] = {"incast": "kind.py:Incast"}
    doc["traffic"].append({"kind": "incast", **entry})
    path = tmp_path / "kinds.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_traffic_kind_expands_into_command_entries_when_a_run_loads_it(tmp_path):
    example = (REPO / "docs/examples/traffic.py").read_text()
    parsed = scenario.load(with_kind(tmp_path, example, {"to": "g1", "senders": "storage"}))
    assert parsed.commands == () and [e.kind for e in parsed.kind_entries] == ["incast"]
    assert scenario.user_files(parsed) == [f"traffic kind incast: {tmp_path / 'kind.py'}:Incast"]
    sc, classes = scenario.with_user_kinds(parsed)
    assert list(classes) == ["incast"] and sc.kind_entries == ()
    incast = [c for c in sc.commands if c.name.startswith("incast-")]
    assert [c.host for c in incast] and all(c.serve_host == "g1" for c in incast)
    assert incast[0].key.endswith(".expanded[0]") and "{g1}" in incast[0].run[2]


@pytest.mark.parametrize(("entry", "words"), [
    ({"senders": "storage"}, "to: is required"),
    ({"to": "g1", "senders": "storage", "colour": "red"}, "colour: unknown key"),
    ({"to": "g1", "senders": ["g1"]}, "expand failed: ValueError: g1 cannot send to itself"),
    ({"to": "nowhere", "senders": "storage"}, "{nowhere} is not a host"),
])
def test_a_bad_entry_of_a_traffic_kind_says_where(tmp_path, entry, words):
    example = (REPO / "docs/examples/traffic.py").read_text()
    parsed = scenario.load(with_kind(tmp_path, example, entry))  # not its class's keys yet
    with pytest.raises(scenario.ScenarioError) as caught:
        scenario.with_user_kinds(parsed)
    assert str(caught.value).startswith(str(tmp_path / "kinds.yaml")) and words in str(caught.value)


def test_a_traffic_kind_that_is_not_one_is_refused(tmp_path):
    parsed = scenario.load(with_kind(tmp_path, "class Incast:\n    pass\n", {"to": "g1"}))
    with pytest.raises(scenario.ScenarioError,
                       match="not a subclass of labkit.model.extend") as caught:
        scenario.with_user_kinds(parsed)
    assert caught.value.key == "kinds.incast"


def test_parsing_never_imports_a_kinds_file(tmp_path):
    source = "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
    scenario.load(with_kind(tmp_path, source, {"to": "g1"}))
    assert not (tmp_path / "ran").exists()
