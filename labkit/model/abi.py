"""The kernel/user interface: every struct of ``bpf/include/labkit.h``, mirrored once.

Each ``lk_*`` struct has one ctypes mirror here (:data:`MIRRORS`, checked against the
built objects' BTF by tests/tier0/test_abi.py: same size, same field offsets). Flat
structs also get a :class:`struct.Struct` packer derived from the mirror, for the hot
paths that pack and unpack bytes (the agents, the event reader). Constants the C side
defines (the lanes in their order, rule and bucket limits, the DSCP slots, the stamp magic,
phases, event kinds) and the layout of a stamp's ``seq`` (sender rank above the PSN) live
here too.

Standard library only: traffic agents import it and must start fast.
"""

from __future__ import annotations

import ctypes
import struct

LANES = ("vip", "normal", "low")  # enum lk_lane, in its order: a lane's index is its value
NR_LANES = len(LANES)  # LK_NR_LANES
MAX_RULES = 32  # LK_MAX_RULES
HIST_BUCKETS = 32  # LK_HIST_BUCKETS: bucket b counts values in [2^b, 2^(b+1)) ns
NR_DSCP = 64  # LK_NR_DSCP: the queue probe's per-DSCP slots of each watched port
STAMP_MAGIC = 0x53544B4C  # LK_STAMP_MAGIC, "LKTS" in memory
EV_SOJOURN, EV_LATENCY, EV_GAP = 1, 2, 3  # enum lk_event_kind
PAUSE_XOFF, PAUSE_XON = 1, 2  # enum lk_pause_kind
MAX_PAUSE_QUEUES = 512  # LK_MAX_PAUSE_QUEUES
PHASES = {"compute": 0, "soon": 1, "communicate": 2}  # enum lk_phase
# the slots of lk_lost (enum lk_lost_slot in bpf/include/telemetry.h), per CPU
LOST_EVENTS, SEEN_PACKETS, LOST_UNPAIRED, SEEN_GAPS = 0, 1, 2, 3
NR_LOST = 4

# the rule key (lk_parse() in bpf/include/parse.h)
KEY_SPORT, KEY_PROTO, KEY_DSCP = 16, 32, 40
KEY_L3, KEY_PORTS, KEY_BTH = 1 << 46, 1 << 47, 1 << 48

# a stamp's seq: the sender's rank in the top byte, the packet's PSN (24 bits) below
RANK_SHIFT = 24
PSN_MASK = (1 << RANK_SHIFT) - 1


def seq_base(rank: int) -> int:
    """The seq of a rank's PSN 0; add the PSN for any other packet."""
    return rank << RANK_SHIFT


def seq_rank(seq: int) -> int:
    """The sending rank of a stamped packet."""
    return seq >> RANK_SHIFT


u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64


class Rule(ctypes.Structure):
    _fields_ = [("mask", u64), ("value", u64), ("lane", u32), ("either_port", u32)]


class ClassifierConfig(ctypes.Structure):
    _fields_ = [("lane_priority", u32 * NR_LANES), ("default_lane", u32), ("nr_rules", u32),
                ("rules", Rule * MAX_RULES)]


class LaneCounters(ctypes.Structure):
    _fields_ = [("packets", u64), ("bytes", u64)]


class PortKey(ctypes.Structure):
    _fields_ = [("netns_ino", u32), ("ifindex", u32)]


class Hist(ctypes.Structure):
    _fields_ = [("buckets", u64 * HIST_BUCKETS)]


class Stamp(ctypes.Structure):
    _fields_ = [("magic", u32), ("seq", u32), ("t_ns", u64)]


class Event(ctypes.Structure):
    _fields_ = [("t_ns", u64), ("stamp_ns", u64), ("value_ns", u32), ("len", u32),
                ("where", u16), ("lane", u8), ("kind", u8), ("seq", u32)]


class PortClock(ctypes.Structure):
    _fields_ = [("t_ns", u64), ("sent", u64), ("busy", u64), ("len", u32), ("queued", u32)]
    # busy: the qdisc's byte counter when the port's current busy period began


class TelemetryConfig(ctypes.Structure):
    _fields_ = [("sample_every", u32), ("pad", u32)]


class ValveLane(ctypes.Structure):
    _fields_ = [("rate_bytes_per_s", u64), ("ce_threshold_ns", u64), ("horizon_ns", u64),
                ("busy_rate_bytes_per_s", u64)]


class ValveConfig(ctypes.Structure):
    _fields_ = [("lanes", ValveLane * NR_LANES), ("one_clock", u32), ("vip_class", u32),
                ("lead_ns", u64)]


class JobPhase(ctypes.Structure):
    _fields_ = [("busy_from_ns", u64), ("busy_until_ns", u64), ("bytes_left", u64),
                ("phase", u32), ("flags", u32), ("cross_start_ns", u64), ("crossed_ns", u64)]


PHASE_CROSSES = 1  # LK_PHASE_CROSSES: the job's packets from this host cross a bottleneck


class ValveCounters(ctypes.Structure):
    _fields_ = [("packets", u64), ("bytes", u64), ("ce_marked", u64), ("dropped", u64)]


class PausePort(ctypes.Structure):
    _fields_ = [("queue", u32 * NR_LANES), ("pad", u32)]


class PauseQueue(ctypes.Structure):
    _fields_ = [("leaf", u64), ("episode", u64), ("paused", u64), ("classid", u32),
                ("xoff_bytes", u32), ("xon_bytes", u32), ("pad", u32)]


class PauseHold(ctypes.Structure):
    _fields_ = [("queue", u32), ("iif", u32)]


class PauseEvent(ctypes.Structure):
    _fields_ = [("t_ns", u64), ("queue", u32), ("iif", u32), ("episode", u32),
                ("backlog", u32), ("kind", u32), ("pad", u32)]


class JobmarkConfig(ctypes.Structure):
    _fields_ = [("cgroup_id", u64), ("quiet_ns", u64), ("hold_ns", u64), ("level", u32),
                ("dscp", u32), ("open_bytes", u64)]


class Burst(ctypes.Structure):
    _fields_ = [("start_ns", u64), ("end_ns", u64), ("bytes", u64), ("packets", u64)]


class JobState(ctypes.Structure):
    """``struct lk_job_state`` of bpf/jobmark.bpf.c (read, never written, here): its
    ``bpf_spin_lock``, the bursts ended so far, the burst under way, the bytes of the
    burst across a bottleneck under way."""

    _fields_ = [("lock", u32), ("ended", u32), ("open", Burst), ("cross_bytes", u64)]


MAX_BURSTS = 4096  # LK_MAX_BURSTS


class DctcpSample(ctypes.Structure):
    """``struct lk_dctcp_sample``: one window of a lk_dctcp sender as it ends (addresses
    in network order, ports in host order, alpha x 1024)."""

    _fields_ = [("t_ns", u64), ("saddr", u32), ("daddr", u32), ("sport", u16),
                ("dport", u16), ("alpha", u32), ("cwnd", u32), ("acked", u32),
                ("marked", u32), ("pad", u32)]

MIRRORS: dict[str, type[ctypes.Structure]] = {
    "lk_rule": Rule, "lk_classifier_config": ClassifierConfig,
    "lk_lane_counters": LaneCounters, "lk_port_key": PortKey, "lk_hist": Hist,
    "lk_stamp": Stamp, "lk_event": Event, "lk_port_clock": PortClock,
    "lk_telemetry_config": TelemetryConfig,
    "lk_valve_lane": ValveLane, "lk_valve_config": ValveConfig, "lk_job_phase": JobPhase,
    "lk_valve_counters": ValveCounters, "lk_pause_port": PausePort,
    "lk_pause_queue": PauseQueue, "lk_pause_hold": PauseHold,
    "lk_pause_event": PauseEvent, "lk_jobmark_config": JobmarkConfig, "lk_burst": Burst,
    "lk_job_state": JobState, "lk_dctcp_sample": DctcpSample,
}

_CODES: dict[type, str] = {u8: "B", u16: "H", u32: "I", u64: "Q"}


def packer(mirror: type[ctypes.Structure]) -> struct.Struct:
    """A host-order :class:`struct.Struct` with the fields of a flat, unpadded ``mirror``."""
    fmt = "=" + "".join(_CODES[field[1]] for field in mirror._fields_)  # (name, type[, bits])
    packed = struct.Struct(fmt)
    if packed.size != ctypes.sizeof(mirror):
        raise TypeError(f"{mirror.__name__} has padding: no packer for it")
    return packed


STAMP = packer(Stamp)
EVENT = packer(Event)
LANE_COUNTERS = packer(LaneCounters)
JOB_PHASE = packer(JobPhase)
PAUSE_EVENT = packer(PauseEvent)
BURST = packer(Burst)
DCTCP_SAMPLE = packer(DctcpSample)
