"""A policy's stack as a loop over features (labkit.runs.features): which features a
scenario and policy get, and the order they are loaded (beside the fabric's build),
built, started, stopped and closed in, a failed load or build included. The fabric and
the features are stand-ins here; tier 2 builds every feature on real fabrics."""

import threading
from pathlib import Path

import pytest

from labkit.kernel.registry import Registry
from labkit.model import scenario
from labkit.model.scenario_spec import policy
from labkit.model.topo import Topology
from labkit.runs import features
from labkit.runs.experiment import PolicyFabric

REPO = Path(__file__).resolve().parents[2]


def wanted(name: str, pol: str, telemetry: bool = True) -> list[str]:
    sc = scenario.load(REPO / "topologies" / f"{name}.yaml")
    return [f.__name__ for f in features.FEATURES
            if f.wanted(sc, policy(pol), telemetry)]


def test_a_policy_gets_the_features_its_scenario_asks_for():
    assert wanted("bottleneck", "fifo") == ["LossyLinks", "Lanes", "Probes"]
    assert wanted("bottleneck", "fifo", telemetry=False) == ["LossyLinks", "Lanes"]
    assert wanted("bottleneck", "state-aware") == ["LossyLinks", "Lanes", "Probes", "Control"]
    assert wanted("pytorch-ddp", "priority")[-1] == "JobMarking"
    assert {"TcpControl", "EcnMarking"} <= set(wanted("dctcp-paper", "fifo"))


class FakeFabric:
    def __init__(self, log, loaded: threading.Event | None = None, fails: bool = False):
        self.log = log
        self.loaded = loaded
        self.fails = fails

    def build(self):
        if self.loaded:  # it waits for the first feature's load: they run side by side
            assert self.loaded.wait(10), "no feature loaded while the fabric was built"
        self.log.append("fabric start")
        if self.fails:  # torn down by the policy, after its features (not by itself)
            raise RuntimeError("no carrier on r1-eth0")

    def stop(self):
        self.log.append("fabric stop")


def feature(name: str, log: list, *, fails: bool = False, after_fabric: bool = False,
            load_fails: bool = False, loaded: threading.Event | None = None):
    class Recorded(features.Feature):
        def load(self, stack):
            log.append(f"{name} load sees {[type(f).__name__ for f in stack.built]}")
            if loaded:
                loaded.set()
            if load_fails:
                raise RuntimeError(f"{name}'s object was refused")

        def build(self, stack):
            log.append(f"{name} build sees {[type(f).__name__ for f in stack.built]}")
            if fails:
                raise RuntimeError(f"{name} could not attach")

        def start(self):
            log.append(f"{name} start")

        def stop(self):
            log.append(f"{name} stop")

        def close(self):
            log.append(f"{name} close")

    Recorded.__name__ = name
    Recorded.after_fabric = after_fabric
    return Recorded


def stack(log: list, *kinds, loaded: threading.Event | None = None,
          fabric_fails: bool = False) -> PolicyFabric:
    sc = scenario.load(REPO / "topologies" / "bottleneck.yaml")
    registry = Registry("test", Path("/nonexistent/registry.jsonl"))
    pf = PolicyFabric(sc, Topology(sc.fabric), policy("fifo"), registry, features=kinds)
    pf.stack.fabric = FakeFabric(log, loaded, fabric_fails)  # type: ignore[assignment]
    return pf


def test_features_load_beside_the_fabric_build_in_order_and_close_newest_first():
    log: list[str] = []
    loaded = threading.Event()
    kinds = (feature("A", log, after_fabric=True, loaded=loaded), feature("B", log),
             feature("C", log))
    with stack(log, *kinds, loaded=loaded) as pf:
        pf.start()
        pf.stop()
        assert pf.get(kinds[1]) is not None
    every = "['A', 'B', 'C']"
    assert [e for e in log[:4] if "load" in e] == [
        "A load sees ['A']", "B load sees ['A', 'B']", f"C load sees {every}"]
    assert "fabric start" in log[:4]  # beside the loads, in whatever order
    assert log[4:] == [f"A build sees {every}", f"B build sees {every}",
                       f"C build sees {every}", "A start", "B start", "C start",
                       "C stop", "B stop", "A stop",
                       "C close", "B close", "fabric stop", "A close"]


@pytest.mark.parametrize("failing, error, loads, after", [
    # a build fails: every feature (all loaded) closes, newest first, then the fabric
    ({"fails": True}, "B could not attach", 3,
     ["fabric start", "A build sees ['A', 'B', 'C']", "B build sees ['A', 'B', 'C']",
      "C close", "B close", "A close", "fabric stop"]),
    # a load fails: the fabric's build ends first; nothing is built, C never loads
    ({"load_fails": True}, "B's object was refused", 2,
     ["fabric start", "B close", "A close", "fabric stop"]),
])
def test_a_failed_load_or_build_closes_what_was_made_and_the_fabric(failing, error, loads,
                                                                     after):
    log: list[str] = []
    kinds = (feature("A", log), feature("B", log, **failing), feature("C", log))
    with pytest.raises(RuntimeError, match=error):
        with stack(log, *kinds):
            pass
    assert [e for e in log if "load" not in e] == after
    assert [e for e in log if "load" in e] == [
        "A load sees ['A']", "B load sees ['A', 'B']", "C load sees ['A', 'B', 'C']"][:loads]


def test_a_failed_fabric_build_closes_the_loaded_features_then_the_fabric():
    """The registry's teardown (the fabric's stop) removes the features' BPF objects too:
    they are closed first, or it finds them still held and reports that, not the cause."""
    log: list[str] = []
    kinds = (feature("A", log, after_fabric=True), feature("B", log))
    with pytest.raises(RuntimeError, match="no carrier"):
        with stack(log, *kinds, fabric_fails=True):
            pass
    assert [e for e in log if "load" not in e] == ["fabric start", "B close", "fabric stop",
                                                   "A close"]


@pytest.mark.parametrize("kind", features.FEATURES, ids=lambda k: k.__name__)
def test_every_feature_closes_when_it_was_never_loaded_or_built(kind):
    """A feature is in the stack from its load on, so it is closed after a fabric that
    failed before its own load or build: closing must not fail then (its error would hide
    the build's)."""
    kind().close()


def test_the_probes_watch_a_bottlenecks_router_ports_only():
    """A bottleneck between a router and a host has one router port: the host's own NIC
    has no lanes to watch."""
    doc = {"name": "tiny", "fabric": {
        "routers": ["r1"], "hosts": {"gpu": {"r1": ["g1", "g2"]}},
        "links": [], "bottlenecks": [["r1", "g1"]]},
        "traffic": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "1MiB", "iterations": 5}]}
    sc = scenario.parse(doc, "tiny.yaml")
    topo = Topology(sc.fabric)
    assert [p.node for p in topo.bottleneck_ports()] == ["r1", "g1"]
    assert [(p.node, p.peer) for p in features.watched_ports(topo)] == [("r1", "g1")]
