"""The step marker (``bpf/ecnmark.bpf.c``), fed scapy-built packets through
BPF_PROG_TEST_RUN: an ECN-capable packet that finds K bytes queued is marked CE with a
valid checksum and its DSCP kept; a packet that is not ECN-capable, or finds less than K,
is left alone; both are counted."""

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from labkit.kernel import bpf, ecnmark

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
    with bpf.BpfObject(bpf.object_path("ecnmark")) as obj:
        obj.maps["lk_mark_k"].update(0, k_bytes.to_bytes(4, "little"))
        run = obj.programs[ecnmark.PROGRAM].test_run(packet(ecn))
        assert run.retval == PASS
        out = Ether(run.data)
        assert out[IP].tos == DSCP | (CE if marked else ecn)
        fixed = IP(bytes(out[IP]))
        del fixed.chksum
        assert IP(bytes(fixed)).chksum == out[IP].chksum  # the checksum is right
        counts = {name: sum(int.from_bytes(v, "little")
                            for v in obj.maps["lk_mark_counts"].per_cpu(key))
                  for name, key in (("ect", ecnmark.ECT), ("ce", ecnmark.CE))}
        assert counts == {"ect": int(ecn != NOT_ECT), "ce": int(marked)}
