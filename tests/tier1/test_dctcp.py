"""lk_dctcp in the kernel without a fabric: the congestion control registers for a run
and is gone after it (no struct_ops, no name left, no sysctl changed), and a killed run's
registration is removed by its record. (The step marker: tests/tier1/test_ecnmark.py.)

(lk_dctcp's own programs cannot go through BPF_PROG_TEST_RUN: the kernel runs test runs
of struct_ops only for its test struct, bpf_dummy_ops. tests/tier2/test_dctcp.py runs
them under real TCP flows.)"""

from pathlib import Path

import pytest

from labkit.kernel import bpf, dctcp
from labkit.kernel.skeletons import DCTCP
from tests.leaks import assert_no_leaks

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

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
    obj = DCTCP.open()
    ops = obj.maps.lk_dctcp
    map_id, name = bpf.map_info(ops.fd)
    link = ops.attach_struct_ops()
    link._ptr = None  # dropped without unregistering, as a killed process leaves it
    obj.close()
    assert dctcp.registered()
    assert not bpf.unregister_struct_ops(map_id, "lk_other")  # another map's name: refused
    assert bpf.unregister_struct_ops(map_id, name)
    assert not dctcp.registered()
    assert_no_leaks()

