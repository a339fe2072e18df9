"""The plan of a lossless fabric: which queues pause whom, at what thresholds, and the
scenario switch that asks for it."""

import copy
from pathlib import Path

import pytest
import yaml

from labkit.kernel import tc
from labkit.kernel.pauser import classes_to_pause
from labkit.model import lossless, scenario
from labkit.model.scenario import ScenarioError
from labkit.model.topo import Topology

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
    frame, leak = 9000 + lossless.FRAME_OVERHEAD, lossless.paused_burst(9000)
    in_flight = 2 * (200e6 / 8 * lossless.REACTION_BUDGET_S + leak) + frame
    doc["fabric"]["links"][0] = {"between": ["leaf1", "spine1"], "buffer_kb": 880}
    small = topology(doc)  # there the headroom decides
    xoff, xon = lossless.thresholds(small, small.port_towards("spine1", "leaf1"))
    assert xoff == int(880 * 1024 - in_flight) and xon == xoff // 2
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
    assert lossless.paused_burst(9000) >= 64 << 10  # a paused TBF never cuts a GSO packet


def test_the_lossless_scenario_keeps_its_victim_away_from_the_funnel(doc):
    sc = scenario.parse(copy.deepcopy(doc))
    t = Topology(sc.fabric)
    (victim,) = [s for s in sc.storage if s.name == "victim"]
    path = t.path(victim.clients[0], victim.server)
    assert "leaf1" not in path  # it never crosses the bottleneck link
    assert t.path("g8", "g1")[1:3] == path[1:3]  # but shares leaf2's uplink with the ring


class FakeSwitch:
    """A neighbour's port whose netlink requests are remembered, and may fail."""

    def __init__(self, key, fail=()):
        self.key, self.layout, self.fail, self.calls = key, "fifo", set(fail), []
        self.held, self.paused = {}, set()

    def set(self, classid, paused):
        self.calls.append((classid, paused))
        if (classid, paused) in self.fail:
            raise OSError(105, "No buffer space available")
        (self.paused.add if paused else self.paused.discard)(classid)


def bookkeeper(doc, switches):
    """What the pauser process acts with, without the kernel: the plan's queues, the
    ingress map and fake switches."""
    from labkit.kernel import pauser

    t = topology(doc)
    plan = lossless.queues(t, ("vip",), "fifo")
    queues = [pauser._Asking(q.lane, q.port.node, f"{q.port.node}/{q.port.ifname}")
              for q in plan]
    p = pauser._Acting(queues, {("spine1", 2): "leaf2/leaf2-eth4",
                                ("spine1", 3): "leaf3/leaf3-eth1"}, switches)
    slot = next(i for i, q in enumerate(plan) if q.port == t.port_towards("spine1", "leaf1"))
    return p, slot


def test_a_failed_resume_is_retried_at_the_end_and_nothing_stays_paused(doc):
    leaf2 = FakeSwitch("leaf2/leaf2-eth4", fail={(tc.FIFO_CLASS, False)})
    leaf3 = FakeSwitch("leaf3/leaf3-eth1")
    p, slot = bookkeeper(doc, {"leaf2/leaf2-eth4": leaf2, "leaf3/leaf3-eth1": leaf3})
    p._pause(p.queues[slot], slot, 2, 100, 150)
    p._pause(p.queues[slot], slot, 3, 100, 150)
    p._pause(p.queues[slot], slot, 2, 110, 160)  # paused already: no second request
    assert leaf2.calls == [(tc.FIFO_CLASS, True)] and leaf2.paused == {tc.FIFO_CLASS}
    p._resume(slot, 200)
    assert leaf3.paused == set() and len(p.rows) == 1 and p.rows[0].port == leaf3.key
    assert leaf2.paused == {tc.FIFO_CLASS} and "No buffer space" in p.errors[0]
    leaf2.fail.clear()
    p.resume_everything()
    assert leaf2.paused == set() and len(p.rows) == 2


def test_a_refused_pause_holds_nothing(doc):
    leaf2 = FakeSwitch("leaf2/leaf2-eth4", fail={(tc.FIFO_CLASS, True)})
    p, slot = bookkeeper(doc, {"leaf2/leaf2-eth4": leaf2})
    p._pause(p.queues[slot], slot, 2, 100, 150)
    assert not leaf2.held.get(tc.FIFO_CLASS) and not p.holding and len(p.errors) == 1
    p._resume(slot, 200)  # nothing to resume, and no error about it
    assert leaf2.calls == [(tc.FIFO_CLASS, True)] and len(p.errors) == 1


def test_the_transport_waits_long_only_when_its_lane_never_drops(doc):
    fabric = scenario.parse(doc).fabric
    assert lossless.carries_collectives(fabric, "fifo")
    assert lossless.carries_collectives(fabric, "lanes")
    doc["fabric"]["lossless"] = ["low"]
    low = scenario.parse(doc).fabric
    assert lossless.carries_collectives(low, "fifo") and not lossless.carries_collectives(
        low, "lanes")  # under priority the vip lane still drops
    doc["defaults"]["link"]["loss_percent"] = 0.1
    assert not lossless.carries_collectives(scenario.parse(doc).fabric, "fifo")
