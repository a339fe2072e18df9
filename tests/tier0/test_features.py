"""A policy's stack as a loop over features (labkit.runs.features): which features a
scenario and policy get, and the order they are built, started, stopped and closed in,
a failed build included. The fabric and the features are stand-ins here; tier 2 builds
every feature on real fabrics."""

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
    def __init__(self, log):
        self.log = log

    def start(self):
        self.log.append("fabric start")

    def stop(self):
        self.log.append("fabric stop")


def feature(name: str, log: list, *, fails: bool = False, after_fabric: bool = False):
    class Recorded(features.Feature):
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


def stack(log: list, *kinds) -> PolicyFabric:
    sc = scenario.load(REPO / "topologies" / "bottleneck.yaml")
    registry = Registry("test", Path("/nonexistent/registry.json"))
    pf = PolicyFabric(sc, Topology(sc.fabric), policy("fifo"), registry, features=kinds)
    pf.stack.fabric = FakeFabric(log)  # type: ignore[assignment]
    return pf


def test_features_build_in_order_and_close_newest_first_the_fabric_between():
    log: list[str] = []
    kinds = (feature("A", log, after_fabric=True), feature("B", log), feature("C", log))
    with stack(log, *kinds) as pf:
        pf.start()
        pf.stop()
        assert pf.get(kinds[1]) is not None
    assert log == ["fabric start", "A build sees ['A']", "B build sees ['A', 'B']",
                   "C build sees ['A', 'B', 'C']", "A start", "B start", "C start",
                   "C stop", "B stop", "A stop",
                   "C close", "B close", "fabric stop", "A close"]


def test_a_failed_build_closes_what_was_built_and_the_fabric():
    log: list[str] = []
    kinds = (feature("A", log), feature("B", log, fails=True), feature("C", log))
    with pytest.raises(RuntimeError, match="B could not attach"):
        with stack(log, *kinds):
            pass
    assert log == ["fabric start", "A build sees ['A']", "B build sees ['A', 'B']",
                   "B close", "A close", "fabric stop"]


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
