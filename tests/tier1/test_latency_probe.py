"""The one-way latency program, fed stamped RoCEv2 packets through BPF_PROG_TEST_RUN."""

import time
from collections import Counter

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from labkit.kernel import lanes, telemetry
from labkit.kernel.skeletons import CLASSIFIER
from labkit.model import abi
from labkit.model.scenario import LaneRule
from labkit.model.traffic import roce, wire

RULES = [LaneRule("vip", proto="udp", dport=4791, roce=True), LaneRule("low", proto="tcp",
                                                                        port=4420)]


@pytest.fixture
def probe(bpf_ready):
    with CLASSIFIER.open() as cls:
        cls.maps.lk_config.update(0, lanes.build_config(RULES, "lanes"))
        queues = telemetry.QueueProbe(sample_every=1)
        latency = telemetry.LatencyProbe(cls.maps.lk_config, queues)
        try:
            yield queues, latency
        finally:
            latency.close()
            queues.close()


def stamped(kind: str, age_ns: int, seq: int = 7) -> bytes:
    """A RoCEv2 packet whose stamp is ``age_ns`` old now (the packet is built first)."""
    payload = roce.data_templates(0x101, 64)[kind]
    frame = bytearray(bytes(Ether() / IP(src="10.0.8.2", dst="10.0.1.2") / UDP(dport=4791) /
                            Raw(payload)))
    at = 14 + 20 + 8 + wire.DATA_OFFSET[payload[wire.OPCODE]]
    abi.STAMP.pack_into(frame, at, abi.STAMP_MAGIC, seq, time.monotonic_ns() - age_ns)
    return bytes(frame)


def run(latency, pkt):
    return latency.obj.programs.lk_latency.test_run(pkt)


def test_stamped_packets_give_their_age_per_lane(probe):
    queues, latency = probe
    reader = telemetry.EventReader(queues).start()
    age, waited = 1_500_000, []  # waited: stamp to test run's end, what the age may grow by
    for kind in ("first", "middle", "last", "only"):
        start = time.monotonic_ns()
        assert run(latency, stamped(kind, age_ns=age)).retval == 0
        waited.append(time.monotonic_ns() - start)
    events = reader.stop()
    assert len(events) == 4
    for t_ns, stamp_ns, value_ns, length, where, lane, kind, seq in events:
        assert kind == abi.EV_LATENCY and lane == 0 and seq == 7 and where == 0
        assert length > 64
        assert age <= value_ns <= age + max(waited) and t_ns - stamp_ns == value_ns
    hist = {(lane, b): n for lane, b, n in latency.histograms()}
    # log2 buckets: 1.5 ms lies in [2^20, 2^21) ns, unless the machine stalled the test run
    assert hist == dict(Counter(("vip", e[2].bit_length() - 1) for e in events))
    assert queues.delivery() == (0, 4, 0)


@pytest.mark.parametrize("pkt", [
    bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=0x07) / Raw(bytes(64))),  # no stamp
    bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=0x11) / Raw(bytes(8))),  # an ACK
    bytes(Ether() / IP() / TCP(dport=4420) / Raw(bytes(100))),
    bytes(Ether() / IP(ihl=6, options=[b"\x01\x01\x01\x00"]) / UDP(dport=4791)),
], ids=["unstamped", "ack", "tcp", "ip-options"])
def test_other_packets_pass_untouched(probe, pkt):
    _, latency = probe
    result = run(latency, pkt)
    assert result.retval == 0 and result.data == pkt
    assert latency.histograms() == []


def test_a_stamp_from_the_future_is_ignored(probe):
    _, latency = probe
    run(latency, stamped("middle", age_ns=-10_000_000_000))
    assert latency.histograms() == []
