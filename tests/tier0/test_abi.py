"""labkit.model.abi mirrors every lk_* struct exactly as the built objects' BTF describes it
(the objects opened with libbpf, not loaded: no root)."""

import ctypes

from labkit.kernel import bpf, btf, tc
from labkit.model import abi
from labkit.model.abi import LANES
from tests.conftest import require

# structs userspace never reads or writes: a packet header parsed in place (parse.h), the
# queue probe's in-flight entries and the valve's clocks (map values private to a program,
# defined in its .bpf.c, not in labkit.h), lk_dctcp's per-socket state (in the socket), the
# pause watchdog's timers
NOT_SHARED = {"lk_vlan_hdr", "lk_inflight", "lk_valve_clock", "lk_dctcp", "lk_pause_watch"}


def btf_structs(obj_name: str) -> dict[str, btf.Struct]:
    path = bpf.object_path(obj_name)
    require(path.exists(), f"{path} is not built (make bpf)")
    return {name: s for name, s in btf.structs(path).items() if name.startswith("lk_")}


def layout_problems(struct: btf.Struct, mirror: type[ctypes.Structure]) -> list[str]:
    """How ``mirror`` differs from the BTF struct: size, field names and offsets."""
    problems = []
    if struct.size != ctypes.sizeof(mirror):
        problems.append(f"size {ctypes.sizeof(mirror)}, BTF says {struct.size}")
    ours = {f: getattr(mirror, f).offset for f, *_ in mirror._fields_}
    theirs = struct.fields
    if ours != theirs:
        problems.append(f"fields at {ours}, BTF says {theirs}")
    return problems


def test_every_shared_struct_has_an_exact_mirror():
    seen = {}
    for obj in bpf.object_names():  # abi.bpf.o carries every struct of labkit.h
        seen.update(btf_structs(obj))
    unmirrored = set(seen) - set(abi.MIRRORS) - NOT_SHARED
    assert not unmirrored, f"no mirror in labkit.model.abi for {sorted(unmirrored)}"
    assert set(abi.MIRRORS) <= set(seen), "a mirror of a struct labkit.h does not define"
    drift = {name: layout_problems(seen[name], mirror) for name, mirror in abi.MIRRORS.items()}
    assert not any(drift.values()), {k: v for k, v in drift.items() if v}


def test_packers_agree_with_their_mirrors():
    for packer, mirror in ((abi.STAMP, abi.Stamp), (abi.EVENT, abi.Event),
                           (abi.LANE_COUNTERS, abi.LaneCounters), (abi.JOB_PHASE, abi.JobPhase)):
        assert packer.size == ctypes.sizeof(mirror), mirror.__name__
    stamp = abi.Stamp(abi.STAMP_MAGIC, abi.seq_base(5) | 77, 123)
    assert abi.STAMP.unpack(bytes(stamp)) == (abi.STAMP_MAGIC, 5 << 24 | 77, 123)
    assert abi.seq_rank(stamp.seq) == 5


def test_constants_match_the_header():
    header = (bpf.REPO_ROOT / "bpf/include/labkit.h").read_text()
    assert len(LANES) == abi.NR_LANES
    for i, lane in enumerate(LANES):
        assert f"LK_LANE_{lane.upper()} = {i}" in header
        assert tc.LANE_CLASS[lane] & 0xFFFF == 0x10 * (i + 1)  # LK_LANE_MINOR
    for name, value in (("LK_MAX_RULES", abi.MAX_RULES), ("LK_HIST_BUCKETS", abi.HIST_BUCKETS),
                        ("LK_NR_DSCP", abi.NR_DSCP),
                        ("LK_STAMP_MAGIC", f"{abi.STAMP_MAGIC:#x}"),
                        ("LK_KEY_SPORT_SHIFT", abi.KEY_SPORT),
                        ("LK_KEY_PROTO_SHIFT", abi.KEY_PROTO),
                        ("LK_KEY_DSCP_SHIFT", abi.KEY_DSCP)):
        assert f"#define {name} {value}" in header, name
    for name, value in (("LK_EV_SOJOURN", abi.EV_SOJOURN), ("LK_EV_LATENCY", abi.EV_LATENCY),
                        ("LK_EV_GAP", abi.EV_GAP),
                        *((f"LK_PHASE_{p.upper()}", n) for p, n in abi.PHASES.items())):
        assert f"{name} = {value}" in header, name
    telemetry = (bpf.REPO_ROOT / "bpf/include/telemetry.h").read_text()
    for name, value in (("LK_LOST_EVENTS", abi.LOST_EVENTS), ("LK_SEEN_PACKETS", abi.SEEN_PACKETS),
                        ("LK_LOST_UNPAIRED", abi.LOST_UNPAIRED), ("LK_SEEN_GAPS", abi.SEEN_GAPS),
                        ("LK_NR_LOST", abi.NR_LOST)):
        assert f"{name} = {value}," in telemetry, name
    for name, bit in (("LK_KEY_L3", abi.KEY_L3), ("LK_KEY_PORTS", abi.KEY_PORTS),
                      ("LK_KEY_BTH", abi.KEY_BTH)):
        assert f"#define {name} (1ULL << {bit.bit_length() - 1})" in header, name


def test_the_queue_probes_dscp_slots_are_nr_dscp_per_port():
    """The built object's per-DSCP maps hold NR_DSCP entries per watched port (lk_ports'
    size): what labkit.kernel.telemetry indexes them by."""
    path = bpf.object_path("queues")
    require(path.exists(), f"{path} is not built (make bpf)")
    obj = bpf.open_file(path)
    try:
        sizes = {bpf.lib.bpf_map__name(m).decode(): bpf.lib.bpf_map__max_entries(m)
                 for m in bpf.each(obj, "map")}
    finally:
        bpf.lib.bpf_object__close(obj)
    for name in ("lk_job_enqueued", "lk_job_dropped", "lk_job_sojourn_hist"):
        assert sizes[name] == sizes["lk_ports"] * abi.NR_DSCP, (name, sizes)
