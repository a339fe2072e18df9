"""The lane classifier's cost per packet above an empty tc program.

Both run through BPF_PROG_TEST_RUN on the same RoCEv2 packet, interleaved in
rounds so that machine noise hits both alike; the medians are compared. The
empty program's time is the test-run harness itself (context set-up, the
packet's skb), which a real packet path does not pay, so the goal is on the
difference: a 400 Gbit/s port carrying 4 KiB packets leaves ~80 ns per packet
per core, and the classifier may take at most 25 of them.
"""

import statistics

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from labkit.kernel import lanes
from labkit.kernel.skeletons import CLASSIFIER, EMPTY
from labkit.model.scenario_spec import LaneRule

RULES = [LaneRule("vip", proto="udp", dport=4791, roce=True), LaneRule("vip", dscp=26),
         LaneRule("low", proto="tcp", port=4420)]
REPEAT = 200_000
ROUNDS = 7


def run() -> list[dict]:
    pkt = bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=0x0A) / Raw(bytes(1024)))
    with CLASSIFIER.open() as cls, EMPTY.open() as empty:
        cls.maps.lk_config.update(0, lanes.build_config(RULES, "lanes"))
        progs = {"classifier": cls.programs.lk_classify, "empty": empty.programs.lk_empty}
        times: dict[str, list[int]] = {k: [] for k in progs}
        for _ in range(ROUNDS):
            for name, prog in progs.items():
                times[name].append(prog.test_run(pkt, repeat=REPEAT).duration_ns)
    c, e = statistics.median(times["classifier"]), statistics.median(times["empty"])
    return [
        {"name": "classifier_ns", "value": c, "unit": "ns/packet", "goal": None},
        {"name": "empty_prog_ns", "value": e, "unit": "ns/packet", "goal": None},
        {"name": "classifier_cost_ns", "value": c - e, "unit": "ns/packet", "goal": "<= 25"},
    ]
