"""The lane classifier, fed scapy-built packets through BPF_PROG_TEST_RUN."""

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from labkit.kernel import lanes, tc
from labkit.kernel.skeletons import CLASSIFIER
from labkit.model.scenario import LaneRule

RULES = [LaneRule("vip", proto="udp", dport=4791, roce=True), LaneRule("vip", dscp=26),
         LaneRule("low", proto="tcp", port=4420)]
ETH = Ether(src="02:00:0a:00:01:02", dst="02:00:0a:00:01:01")
ROCE = UDP(sport=50000, dport=4791) / BTH(opcode=0x0A, dqpn=0x101, psn=7) / Raw(bytes(64))


@pytest.fixture
def classifier(bpf_ready):
    with CLASSIFIER.open() as obj:
        obj.maps.lk_config.update(0, lanes.build_config(RULES, "lanes"))
        yield obj


def classify(obj, pkt):
    run = obj.programs.lk_classify.test_run(bytes(pkt))
    assert run.retval == 0, "the classifier never drops (TC_ACT_OK)"
    return {v: k for k, v in tc.LANE_CLASS.items()}.get(run.ctx.priority, hex(run.ctx.priority))


@pytest.mark.parametrize("name, pkt, lane", [
    ("RoCEv2 RDMA WRITE", ETH / IP(src="10.0.1.2", dst="10.0.2.2") / ROCE, "vip"),
    ("RoCEv2 ACK", ETH / IP() / UDP(dport=4791) / BTH(opcode=0x11) / Raw(bytes(4)), "vip"),
    ("RoCEv2 over IPv6", ETH / IPv6() / ROCE, "vip"),
    ("RoCEv2 in a VLAN", ETH / Dot1Q(vlan=5) / IP() / ROCE, "vip"),
    ("UDP 4791 too short for a BTH", ETH / IP() / UDP(dport=4791) / Raw(b"abc"), "normal"),
    ("UDP 4791 with BTH version 1", ETH / IP() / UDP(dport=4791) / BTH(version=1), "normal"),
    ("DSCP 26 TCP", ETH / IP(tos=26 << 2) / TCP(dport=80), "vip"),
    ("DSCP 26 over IPv6", ETH / IPv6(tc=26 << 2) / UDP(dport=53), "vip"),
    ("NVMe/TCP to 4420", ETH / IP() / TCP(sport=40000, dport=4420), "low"),
    ("NVMe/TCP from 4420", ETH / IP() / TCP(sport=4420, dport=40000), "low"),
    ("UDP to 4420 (rule says tcp)", ETH / IP() / UDP(dport=4420), "normal"),
    ("other TCP", ETH / IP() / TCP(dport=22), "normal"),
    ("IP options before TCP 4420", ETH / IP(options=[b"\x01\x01\x01\x00"]) / TCP(dport=4420),
     "low"),
    ("IP options before RoCEv2", ETH / IP(ihl=15, options=[b"\x01" * 39 + b"\x00"]) / ROCE,
     "vip"),
    ("ARP", ETH / ARP(), "normal"),
    ("IHL beyond the packet's end", bytes(ETH / IP(ihl=15) / TCP(dport=4420))[:14 + 24],
     "normal"),
    ("truncated TCP header", bytes(ETH / IP() / TCP(dport=4420))[:14 + 20 + 10], "normal"),
    ("IHL below 5", bytes(ETH / IP(ihl=4) / TCP(dport=4420)), "normal"),
    ("non-first fragment to 4791", ETH / IP(frag=100) / Raw(bytes(ROCE)), "normal"),
    ("non-first fragment, DSCP 26", ETH / IP(frag=100, tos=26 << 2) / Raw(b"x" * 40), "vip"),
    ("bare Ethernet header", bytes(ETH)[:14], "normal"),
])
def test_lane(classifier, name, pkt, lane):
    assert classify(classifier, pkt) == lane, name


def test_first_matching_rule_wins(classifier):
    pkt = ETH / IP(tos=26 << 2) / TCP(dport=4420)
    assert classify(classifier, pkt) == "vip"  # the DSCP rule comes before the storage rule
    swapped = [RULES[2], RULES[1]]
    classifier.maps.lk_config.update(0, lanes.build_config(swapped, "lanes"))
    assert classify(classifier, pkt) == "low"


def test_rules_change_at_run_time_without_reloading(classifier):
    pkt = ETH / IP() / TCP(dport=9000)
    assert classify(classifier, pkt) == "normal"
    rules = RULES + [LaneRule("low", proto="tcp", dport=9000)]
    classifier.maps.lk_config.update(0, lanes.build_config(rules, "lanes"))
    assert classify(classifier, pkt) == "low"


def test_fifo_layout_keeps_the_lane_but_names_no_htb_class(classifier):
    classifier.maps.lk_config.update(0, lanes.build_config(RULES, "fifo"))
    run = classifier.programs.lk_classify.test_run(bytes(ETH / IP() / ROCE))
    assert run.ctx.priority >> 16 != tc.ROOT >> 16
    assert run.ctx.priority & 0xFFFF == tc.LANE_CLASS["vip"] & 0xFFFF


def test_counters_per_lane(classifier):
    counted = {"vip": ETH / IP() / ROCE, "low": ETH / IP() / TCP(dport=4420) / Raw(bytes(100))}
    for _ in range(3):
        for pkt in counted.values():
            classify(classifier, pkt)
    stats = lanes.read_lane_counters(classifier.maps.lk_lane_stats, 0)
    assert stats["vip"] == (3, 3 * len(counted["vip"]))
    assert stats["low"] == (3, 3 * len(counted["low"]))
    assert stats["normal"] == (0, 0)
