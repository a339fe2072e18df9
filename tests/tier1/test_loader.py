"""The libbpf binding: verifier errors, tracing attachment, pins."""

import ctypes
import subprocess

import pytest

from labkit.kernel import bpf
from labkit.kernel.libbpf import lib
from labkit.kernel.skeletons import (
    CLASSIFIER,
    ECNMARK,
    JOBMARK,
    LATENCY,
    LOSSY,
    PAUSE,
    QUEUES,
    VALVE,
)

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

BAD_PROGRAM = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
SEC("tc")
int reads_past_the_packet(struct __sk_buff *skb)
{
	unsigned char *data = (void *)(long)skb->data;
	return data[100];  /* no bounds check: the verifier must refuse */
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_verifier_rejection_carries_the_log(bpf_ready, tmp_path):
    src = tmp_path / "bad.bpf.c"
    src.write_text(BAD_PROGRAM)
    obj = tmp_path / "bad.bpf.o"
    subprocess.run(["clang", "-target", "bpf", "-O2", "-g", f"-I{bpf.BUILD_DIR}", "-c", str(src),
                    "-o", str(obj)], check=True)
    with pytest.raises(bpf.VerifierError) as info:
        bpf.BpfObject(obj)
    assert "invalid access to packet" in info.value.log
    assert "reads_past_the_packet" in str(info.value)


def test_missing_object_says_how_to_build_it(tmp_path):
    with pytest.raises(bpf.BpfError, match="make bpf"):
        bpf.BpfObject(tmp_path / "nothing.bpf.o")


def test_tracing_programs_attach_and_detach(bpf_ready):
    with QUEUES.open() as obj:
        links = [p.attach() for p in (obj.programs.lk_qdisc_enqueue, obj.programs.lk_qdisc_drop,
                                      obj.programs.lk_qdisc_dequeue)]  # tp_btf and raw_tp
        for link in links:
            link.close()


def test_pins_live_under_the_run_and_go_away(bpf_ready):
    run_id = "test-pins"
    with CLASSIFIER.open() as obj:
        d = bpf.pin_dir(run_id)
        try:
            assert d == bpf.PIN_ROOT / run_id and (d.stat().st_mode & 0o777) == 0o700
            obj.maps.lk_config.pin(d / "lk_config")
            obj.programs.lk_classify.pin(d / "classifier")
            assert sorted(p.name for p in d.iterdir()) == ["classifier", "lk_config"]
        finally:
            bpf.unpin_dir(d)
    assert not d.exists()


def test_lossy_link_drops_with_its_probability(bpf_ready):
    pkt = bytes(64)
    with LOSSY.open() as obj:
        prog, cfg = obj.programs.lk_lossy, obj.maps.lk_loss
        cfg.update(0, 0)
        assert prog.test_run(pkt, repeat=1000).retval == 0xFFFFFFFF  # TC_ACT_UNSPEC: pass on
        cfg.update(0, 1_000_000)
        assert prog.test_run(pkt).retval == 2  # TC_ACT_SHOT
        drops = sum(int.from_bytes(v, "little") for v in obj.maps.lk_loss_drops.lookup(0))
        assert drops == 1


# What the verifier walked for each program (the kernel's own count): a load's cost. Far
# above a program's size, it means code inlined over a loop: lk_latency's rule lookup (32
# rules) and lk_qdisc_dequeue's per-skb work (16 skbs) took 89,783 and 75,580 before they
# moved into global functions, which the verifier checks once (4,343 and 5,232 after).
MOST_VERIFIED = 20_000


def verified_insns(fd: int) -> int:
    """struct bpf_prog_info's verified_insns (byte 216) of the program open at ``fd``."""
    info = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(len(info))
    assert lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)) == 0
    return int.from_bytes(info.raw[216:220], "little")


@pytest.mark.parametrize("decl", [CLASSIFIER, QUEUES, LATENCY, VALVE, JOBMARK, LOSSY, ECNMARK,
                                  PAUSE], ids=lambda d: d.name)
def test_every_program_verifies_in_few_instructions(bpf_ready, decl):
    with decl.open() as obj:
        walked = {p.name: verified_insns(p.fd) for p in obj.programs.values()}
    assert walked and all(0 < n <= MOST_VERIFIED for n in walked.values()), walked
