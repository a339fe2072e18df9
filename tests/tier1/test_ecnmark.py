"""The step marker (``bpf/ecnmark.bpf.c``), fed scapy-built packets through
BPF_PROG_TEST_RUN: an ECN-capable packet that finds K bytes queued is marked CE with a
valid checksum and its DSCP kept; a packet that is not ECN-capable, or finds less than K,
is left alone; both are counted. A GSO run that finds less than K is marked whole with the
share of its packets that would have found K."""

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from labkit.kernel import bpf, ecnmark
from labkit.kernel.skeletons import ECNMARK

PASS = 0xFFFFFFFF  # TC_ACT_UNSPEC (-1 as u32): on to the next filter
NOT_ECT, ECT0, CE = 0b00, 0b10, 0b11
DSCP = 0x68  # AF31, in the TOS byte's upper six bits


def packet(ecn: int) -> bytes:
    return bytes(Ether() / IP(tos=DSCP | ecn) / TCP(sport=20000, dport=4420) / Raw(bytes(1000)))


def test_k_is_counted_in_full_frames():
    assert ecnmark.k_bytes(20, 1500) == 20 * 1514


@pytest.mark.parametrize("k_bytes, ecn, marked", [(0, ECT0, True), (0, NOT_ECT, False),
                                                 (0, CE, True), (1 << 20, ECT0, False)])
def test_the_marker_marks_ecn_capable_packets_past_k(bpf_ready, k_bytes, ecn, marked):
    """A test run's packet leaves from loopback, whose queue is empty: K 0 is passed,
    1 MiB is not."""
    with ECNMARK.open() as obj:
        obj.maps.lk_mark_k.update(0, k_bytes)
        run = obj.programs.lk_mark.test_run(packet(ecn))
        assert run.retval == PASS
        out = Ether(run.data)
        assert out[IP].tos == DSCP | (CE if marked else ecn)
        fixed = IP(bytes(out[IP]))
        del fixed.chksum
        assert IP(bytes(fixed)).chksum == out[IP].chksum  # the checksum is right
        counts = {name: sum(int.from_bytes(v, "little")
                            for v in obj.maps.lk_mark_counts.per_cpu(key))
                  for name, key in (("ect", ecnmark.ECT), ("ce", ecnmark.CE))}
        assert counts == {"ect": int(ecn != NOT_ECT), "ce": int(marked)}


def test_a_gso_run_is_marked_with_the_share_of_its_packets_past_k(bpf_ready):
    """A run of 4 frames meeting an empty queue with K at 2 of its frames: its last 2
    packets would find K queued, so it is marked in about half of its passes, and each
    marked pass counts its 4 packets."""
    run4 = bytes(Ether() / IP(tos=DSCP | ECT0) / TCP(sport=20000, dport=4420)
                 / Raw(bytes(4 * 800)))  # a test run's packet fits a page
    ctx = bpf.SkBuff(gso_segs=4, gso_size=800)
    passes, marked = 400, 0
    with ECNMARK.open() as obj:
        obj.maps.lk_mark_k.update(0, 2 * (len(run4) // 4))
        prog = obj.programs.lk_mark
        for _ in range(passes):
            marked += Ether(prog.test_run(run4, ctx).data)[IP].tos & CE == CE
        counts = {name: sum(int.from_bytes(v, "little")
                            for v in obj.maps.lk_mark_counts.per_cpu(key))
                  for name, key in (("ect", ecnmark.ECT), ("ce", ecnmark.CE))}
    assert 0.35 * passes < marked < 0.65 * passes, marked
    assert counts == {"ect": 4 * passes, "ce": 4 * marked}
