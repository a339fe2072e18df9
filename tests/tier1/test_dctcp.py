"""lk_dctcp and DCTCP's step marker, in the kernel without a fabric: the congestion
control registers for a run and is gone after it (no struct_ops, no name left, no
sysctl changed); the marker, fed scapy-built packets through BPF_PROG_TEST_RUN, marks
ECN-capable packets CE past K with a valid checksum and leaves the others alone.

(lk_dctcp's own programs cannot go through BPF_PROG_TEST_RUN: the kernel runs test runs
of struct_ops only for its test struct, bpf_dummy_ops. tests/tier2/test_dctcp.py runs
them under real TCP flows.)"""

from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from labkit.kernel import bpf, dctcp, ecnmark
from tests.leaks import assert_no_leaks

PASS = 0xFFFFFFFF  # TC_ACT_UNSPEC (-1 as u32): on to the next filter
NOT_ECT, ECT0, CE = 0b00, 0b10, 0b11
SYSCTLS = ("tcp_allowed_congestion_control", "tcp_congestion_control",
           "tcp_available_congestion_control")


def sysctls() -> dict[str, str]:
    return {k: (Path("/proc/sys/net/ipv4") / k).read_text() for k in SYSCTLS}


def test_lk_dctcp_is_registered_for_the_run_and_gone_after(bpf_ready):
    before = sysctls()
    cc = dctcp.Dctcp()
    try:
        assert dctcp.registered()
        with pytest.raises(RuntimeError, match="registered already"):
            dctcp.Dctcp()  # one run at a time: a second registration is refused clearly
    finally:
        cc.close()
    assert not dctcp.registered()
    assert sysctls() == before
    assert_no_leaks()


def test_a_killed_runs_registration_is_removed_by_its_record(bpf_ready):
    """What `labkit clean` does with a registry's struct_ops entry (the process that
    registered it is gone: here its object is closed without unregistering)."""
    obj = bpf.BpfObject(bpf.object_path("dctcp"))
    ops = obj.maps[dctcp.NAME]
    map_id, name = bpf.map_info(ops.fd)
    link = ops.attach_struct_ops()
    link._ptr = None  # dropped without unregistering, as a killed process leaves it
    obj.close()
    assert dctcp.registered()
    assert not bpf.unregister_struct_ops(map_id, "lk_other")  # another map's name: refused
    assert bpf.unregister_struct_ops(map_id, name)
    assert not dctcp.registered()
    assert_no_leaks()


def packet(ecn: int) -> bytes:
    return bytes(Ether() / IP(tos=ecn | 0x68) / TCP(sport=20000, dport=4420) / Raw(bytes(1000)))


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
        assert out[IP].tos == (0x68 | (CE if marked else ecn))  # DSCP kept
        fixed = IP(bytes(out[IP]))
        del fixed.chksum
        assert IP(bytes(fixed)).chksum == out[IP].chksum  # the checksum is right
        counts = {name: sum(int.from_bytes(v, "little")
                            for v in obj.maps["lk_mark_counts"].per_cpu(key))
                  for name, key in (("ect", ecnmark.ECT), ("ce", ecnmark.CE))}
        assert counts == {"ect": int(ecn != NOT_ECT), "ce": int(marked)}
