"""The plan of a lossless fabric: which queues pause whom, at what thresholds, and the
scenario switch that asks for it."""

import copy
from pathlib import Path

import pytest
import yaml

from labkit import lossless, scenario, tc
from labkit.pauser import classes_to_pause
from labkit.scenario import ScenarioError
from labkit.topo import Topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@pytest.fixture
def doc():
    return yaml.safe_load((TOPOLOGIES / "lossless.yaml").read_text())


def topology(doc) -> Topology:
    return Topology(scenario.parse(doc).fabric)


def test_true_means_the_vip_lane_and_a_list_names_lanes(doc):
    assert scenario.parse(doc).fabric.lossless == ("vip",)
    doc["fabric"]["lossless"] = ["low", "vip"]
    assert scenario.parse(doc).fabric.lossless == ("vip", "low")  # in lane order
    doc["fabric"]["lossless"] = False
    assert scenario.parse(doc).fabric.lossless == ()
    del doc["fabric"]["lossless"]
    assert scenario.parse(doc).fabric.lossless == ()


@pytest.mark.parametrize("value, message", [
    (["vip", "fast"], "fabric.lossless[1]: must be a lane (vip, normal, low), got 'fast'"),
    (["vip", "vip"], "fabric.lossless: names a lane twice"),
    ("yes", "fabric.lossless: must be true (the vip lane), false, or a list of lanes"),
])
def test_bad_switch_is_refused_with_its_key(doc, value, message):
    doc["fabric"]["lossless"] = value
    with pytest.raises(ScenarioError) as err:
        scenario.parse(doc, "lab.yaml")
    assert str(err.value).startswith(f"lab.yaml: {message}")


def test_a_buffer_too_small_for_the_headroom_names_the_link_and_the_size_needed(doc):
    doc["defaults"]["link"]["buffer_kb"] = 64
    with pytest.raises(ScenarioError) as err:
        scenario.parse(doc, "lab.yaml")
    assert err.value.key == "fabric.lossless"
    assert "needs buffer_kb >= " in err.value.reason and "it has 64" in err.value.reason
    doc["fabric"]["lossless"] = False  # a lossy fabric is fine with it
    scenario.parse(doc, "lab.yaml")


def test_feeders_are_the_other_neighbours_by_their_own_ports(doc):
    t = topology(doc)
    down = t.port_towards("spine1", "leaf1")
    assert sorted((p.node, p.peer) for p in lossless.feeders(t, down)) == [
        ("leaf2", "spine1"), ("leaf3", "spine1")]
    to_g1 = t.port_towards("leaf1", "g1")
    assert sorted(p.node for p in lossless.feeders(t, to_g1)) == ["g2", "g3", "g4", "spine1"]
    for p in lossless.feeders(t, to_g1):
        assert p.peer == "leaf1"


def test_thresholds_leave_headroom_for_every_feeder_at_its_rate(doc):
    t = topology(doc)
    port = t.port_towards("spine1", "leaf1")  # fed by two 200 Mbit/s uplinks
    frame = lossless.paused_burst(9000)
    in_flight = 2 * (200e6 / 8 * lossless.REACTION_BUDGET_S + frame) + frame
    doc["defaults"]["link"]["buffer_kb"] = 700  # the headroom decides
    small = topology(doc)
    xoff, xon = lossless.thresholds(small, small.port_towards("spine1", "leaf1"))
    assert xoff == int(700 * 1024 - in_flight) and xon == xoff // 2
    # a deep buffer: xoff is at most XOFF_MAX_S of the port's drain time
    xoff, _ = lossless.thresholds(t, port)
    assert xoff == int(100e6 / 8 * lossless.XOFF_MAX_S)


def test_one_queue_per_port_under_fifo_and_one_per_lossless_lane_under_lanes(doc):
    t = topology(doc)
    fifo = lossless.queues(t, ("vip",), "fifo")
    assert len(fifo) == len(t.router_ports()) and {q.lane for q in fifo} == {"all"}
    lanes = lossless.queues(t, ("vip", "low"), "lanes")
    assert len(lanes) == 2 * len(t.router_ports())
    assert lossless.queues(t, (), "fifo") == []


def test_what_a_pause_stops_at_the_neighbour():
    assert classes_to_pause("all", "lanes") == tuple(tc.LANE_CLASS.values())
    assert classes_to_pause("vip", "lanes") == (tc.LANE_CLASS["vip"],)
    assert classes_to_pause("vip", "fifo") == (tc.FIFO_CLASS,)  # a host has one queue
    assert classes_to_pause("all", "held") == (tc.LANE_CLASS["vip"], tc.HELD_CLASS)
    assert classes_to_pause("low", "held") == (tc.HELD_CLASS,)


def test_pause_requests_stop_and_restart_a_leaf():
    port = tc.PortShape("leaf1-eth0", 100, 1 << 20, 9000, "lanes", pausable=True)
    paused = tc.tbf_request(7, tc.LANE_CLASS["vip"], port, paused=True)
    resumed = tc.tbf_request(7, tc.LANE_CLASS["vip"], port, paused=False)
    # tcmsg: ifindex 7, handle 10:, parent 1:10
    assert paused[20:32] == resumed[20:32] == bytes.fromhex("07000000 00001000 10000100")
    rate_at = 16 + 20 + 8 + 4 + 4 + 8  # nlmsghdr, tcmsg, TCA_KIND, TCA_OPTIONS, PARMS
    assert int.from_bytes(paused[rate_at:rate_at + 4], "little") == tc.PAUSED_RATE
    assert int.from_bytes(resumed[rate_at:rate_at + 4], "little") == (
        tc.bytes_per_s(100) * tc.RESUMED_RATE_FACTOR)
    assert paused[-4:] == lossless.paused_burst(9000).to_bytes(4, "little")


def test_the_lossless_scenario_keeps_its_victim_away_from_the_funnel(doc):
    sc = scenario.parse(copy.deepcopy(doc))
    t = Topology(sc.fabric)
    (victim,) = [s for s in sc.storage if s.name == "victim"]
    path = t.path(victim.clients[0], victim.server)
    assert "leaf1" not in path  # it never crosses the bottleneck link
    assert t.path("g8", "g1")[1:3] == path[1:3]  # but shares leaf2's uplink with the ring
