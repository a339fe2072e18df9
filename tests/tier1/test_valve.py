"""The valve, fed scapy-built packets through BPF_PROG_TEST_RUN: rate held by a
virtual clock (a token bucket of horizon_ms), CE marks on ECN-capable packets only,
drops only of packets the bucket cannot take; on a held NIC, the host's gate."""

import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from labkit.kernel import lanes, tc
from labkit.kernel.bpf import SkBuff
from labkit.kernel.skeletons import CLASSIFIER, WAKE
from labkit.kernel.valve import Valve, Valves
from labkit.model.scenario import LaneRule

RULES = [LaneRule("vip", proto="udp", dport=4791, roce=True),
         LaneRule("low", proto="tcp", port=4420)]
PASS, DROP = 0xFFFFFFFF, 2  # TC_ACT_UNSPEC (-1 as u32): on to the next filter; TC_ACT_SHOT
ECT0, CE = 0b10, 0b11


def storage(ecn: int = ECT0, size: int = 1000) -> bytes:
    pkt = Ether() / IP(tos=ecn) / TCP(sport=4420, dport=20000) / Raw(bytes(size))
    return bytes(pkt)


@pytest.fixture
def valves(bpf_ready):
    with CLASSIFIER.open() as cls:
        cls.maps.lk_config.update(0, lanes.build_config(RULES, "lanes"))
        v = Valves(cls.maps.lk_config)
        v.valves["h"] = Valve("h", cls.maps.lk_config)  # not attached: test runs only
        yield v
        v.close()


def run(valves, pkt: bytes, repeat: int = 1):
    return valves.valves["h"].obj.programs.lk_valve_egress.test_run(pkt, repeat=repeat)


def ecn_of(data: bytes) -> int:
    return Ether(data)[IP].tos & 0b11


def test_an_open_valve_passes_everything_unmarked(valves):
    r = run(valves, storage(), repeat=10_000)
    assert r.retval == PASS and ecn_of(r.data) == ECT0
    c = valves.valves["h"].counters()["low"]
    assert (c.packets, c.dropped, c.ce_marked) == (10_000, 0, 0)


def test_rate_is_held_and_only_packets_past_the_horizon_are_dropped(valves):
    # 8 Mbit/s = 1 MB/s: a 1054-byte frame costs ~1.05 ms; 10 ms of horizon admits 9
    valves.set("h", "low", "test", mbps=8.0, ce_ms=100.0, horizon_ms=10.0)
    start = time.monotonic_ns()
    r = run(valves, storage(), repeat=2000)
    elapsed_ms = (time.monotonic_ns() - start) / 1e6
    c = valves.valves["h"].counters()["low"]
    assert r.retval == DROP
    assert 9 <= c.packets <= 11 + elapsed_ms  # the horizon, plus what drained meanwhile
    assert c.packets + c.dropped == 2000 and c.ce_marked == 0
    vip = run(valves, bytes(Ether() / IP() / UDP(dport=4791) / BTH() / Raw(bytes(64))))
    assert vip.retval == PASS  # other lanes are not held
    time.sleep(0.02)  # the clock drains at the rate: the lane admits again
    assert run(valves, storage()).retval == PASS


def test_ce_marks_only_ecn_capable_packets_past_the_threshold(valves):
    # 1 Mbit/s: a 1054-byte frame moves the clock ~8.4 ms; marks start past 20 ms
    valves.set("h", "low", "test", mbps=1.0, ce_ms=20.0, horizon_ms=500.0)
    ect, not_ect = storage(ECT0), storage(ecn=0)  # built first: scapy takes ~1 ms a packet
    marks = [ecn_of(r.data) for r in [run(valves, ect) for _ in range(8)]]
    assert marks == [ECT0] * 3 + [CE] * 5
    plain = [run(valves, not_ect) for _ in range(8)]
    assert all(r.retval == PASS and ecn_of(r.data) == 0 for r in plain)
    c = valves.valves["h"].counters()["low"]
    assert c.dropped == 0 and c.ce_marked == 5


def test_the_busy_rate_applies_while_the_job_says_it_communicates(valves):
    valves.set("h", "low", "test", mbps=None, busy_mbps=8.0, ce_ms=100.0, horizon_ms=5.0)
    pkt = storage()
    assert [run(valves, pkt).retval for _ in range(20)].count(DROP) == 0
    valves.valves["h"].publish_phase("communicate", 0, time.monotonic_ns() + 10**9)
    assert [run(valves, pkt).retval for _ in range(20)].count(DROP) >= 10
    valves.valves["h"].publish_phase("compute", 0, 0)
    time.sleep(0.01)
    assert [run(valves, pkt).retval for _ in range(20)].count(DROP) == 0


def test_every_rate_change_is_logged(valves):
    valves.set("h", "low", "because", mbps=10.0)
    valves.set("h", "low", "same again", mbps=10.0)  # no change, no entry
    valves.set("h", "low", "back", mbps=None)
    assert [(d[1], d[2], d[3], d[4], d[-1]) for d in valves.decisions] == [
        ("h", "low", None, 10.0, "because"), ("h", "low", 10.0, None, "back")]


def test_a_new_rate_rescales_the_bytes_already_accepted(valves):
    pkt = storage()
    valves.set("h", "low", "test", mbps=8.0, ce_ms=100.0, horizon_ms=10.0)
    assert all(run(valves, pkt).retval == PASS for _ in range(8))  # ~8.4 ms of debt at 8
    valves.set("h", "low", "test", mbps=80.0, horizon_ms=2.0)  # the same bytes: ~0.8 ms
    assert run(valves, pkt).retval == PASS


def held_valve(valves, lead_ms: float = 0.0) -> Valve:
    """A host's valve on a held NIC (its gate), in place of the fixture's plain "h"."""
    valves.valves.pop("h").close()
    valve = valves.valves["h"] = Valve("h", valves.rules, vip_class=tc.LANE_CLASS["vip"],
                                       lead_ms=lead_ms)
    return valve


def test_a_held_nic_is_its_hosts_gate(valves):
    """vip_class set: vip packets get the vip HTB class and are never held; other packets
    never keep it (a sender cannot jump the queue with SO_PRIORITY); every other packet
    with data, whatever its lane, is held to the low lane's setting on one clock, and
    refused outright when it cannot fit the bucket; a TCP segment without data passes."""
    prog = held_valve(valves).obj.programs.lk_valve_egress
    roce = bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=0x0A) / Raw(bytes(64)))
    foreign = bytes(Ether() / IP() / TCP(sport=40000, dport=5201) / Raw(bytes(1000)))
    ack = bytes(Ether() / IP() / TCP(sport=5201, dport=40000, flags="A"))
    open_ = prog.test_run(storage(), SkBuff(priority=tc.LANE_CLASS["vip"]), repeat=100)
    assert open_.retval == PASS and open_.ctx.priority == 0  # spoofed: cleared
    valves.set("h", "low", "test: hold", mbps=0.1, horizon_ms=20.0)  # 250 B bucket
    vip = prog.test_run(roce, repeat=100)
    assert vip.retval == PASS and vip.ctx.priority == tc.LANE_CLASS["vip"]
    assert prog.test_run(foreign).retval == DROP  # the normal lane: held too
    assert prog.test_run(storage()).retval == DROP
    assert prog.test_run(ack, repeat=100).retval == PASS
    c = valves.valves["h"].counters()
    assert (c["normal"].dropped, c["low"].dropped, c["vip"].dropped) == (1, 1, 0)
    assert c["normal"].packets == 100  # the acknowledgements, never charged
    valves.set("h", "low", "test: release", mbps=None)
    assert prog.test_run(foreign).retval == PASS


def test_a_gate_holds_from_lead_ms_before_the_jobs_window(valves):
    valve = held_valve(valves, lead_ms=200.0)
    valves.set("h", "low", "test", mbps=None, busy_mbps=0.1)
    prog = valve.obj.programs.lk_valve_egress
    now = time.monotonic_ns()
    valve.publish_phase("compute", now + 10**9, now + 2 * 10**9)  # 1 s away
    assert prog.test_run(storage()).retval == PASS
    assert valve.gate(now) == float("inf")
    valve.publish_phase("compute", now + 10**8, now + 10**9)  # 100 ms away
    assert prog.test_run(storage()).retval == DROP
    assert valve.gate(now) == 0.1


def test_a_gate_closes_early_enough_for_what_it_accepted_to_leave(valves):
    """What a gate admitted leaves at its rate; it stops admitting once that would still
    be leaving lead_ms before the window, so the queue is gone when the window opens."""
    valve = held_valve(valves, lead_ms=5.0)
    # 8 Mbit/s: each 1054-byte frame holds the clock ~1.05 ms; 20 frames: ~21 ms
    valves.set("h", "low", "test", mbps=8.0, busy_mbps=0.1, horizon_ms=100.0)
    prog = valve.obj.programs.lk_valve_egress
    pkt = storage()
    now = time.monotonic_ns()
    valve.publish_phase("compute", now + 200 * 10**6, now + 10**9)  # 200 ms away
    assert prog.test_run(pkt, repeat=20).retval == PASS
    valve.publish_phase("compute", now + 20 * 10**6, now + 10**9)  # 20 ms away
    assert prog.test_run(pkt).retval == DROP  # 5 + ~21 ms > 20: closing
    assert valve.gate(time.monotonic_ns()) == 8.0  # not yet the busy rate


def test_a_gate_released_from_a_hold_admits_at_once(valves):
    """A hold sends what waits on at the link (the gates move the held class's ceiling),
    so a full bucket at the old rate is not carried through a hold as debt."""
    held_valve(valves)
    prog = valves.valves["h"].obj.programs.lk_valve_egress
    valves.set("h", "low", "test: a rate", mbps=8.0, horizon_ms=20.0)
    assert prog.test_run(storage(), repeat=30).retval == DROP  # the bucket is full
    valves.set("h", "low", "test: hold", mbps=0.04)
    assert prog.test_run(storage()).retval == DROP
    valves.set("h", "low", "test: release to a rate", mbps=8.0)
    assert prog.test_run(storage()).retval == PASS


def test_the_waker_loads_and_attaches_as_a_socket_iterator(bpf_ready):
    with WAKE.open() as obj:
        obj.programs.lk_wake.attach_iter().close()
