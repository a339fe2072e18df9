"""Every BPF object labkit builds (``bpf/<name>.bpf.c``), declared once, as libbpf's
skeletons declare an object in C: its maps, each with its key and value types (ctypes
integers or the mirrors of :mod:`labkit.model.abi`), and its programs.

An object is opened through its declaration (``VALVE.open(reuse=[rules])``), which
checks the object's BTF before loading it (the maps and programs exist, key and value
sizes agree, a struct is the one its mirror mirrors) and gives its maps and programs
as attributes (``valve.maps.lk_phase``, ``valve.programs.lk_valve_egress``); a map
then refuses a key or value of another ctypes type. Maps that several objects include
from one header are declared once, in a class named after the header, and inherited.
tests/tier0/test_skeletons.py checks every declaration against every built object (no
root needed); the machinery is :mod:`labkit.kernel.bpf`'s.
"""

from __future__ import annotations

from labkit.kernel.bpf import MapDecl, Maps, ObjectDecl, ProgramDecl, Programs
from labkit.model.abi import (
    Burst,
    ClassifierConfig,
    Hist,
    JobmarkConfig,
    JobPhase,
    JobState,
    LaneCounters,
    PauseHold,
    PausePort,
    PauseQueue,
    PortClock,
    PortKey,
    TelemetryConfig,
    ValveConfig,
    ValveCounters,
    u8,
    u32,
    u64,
)

# --- maps several objects include from one header --------------------------------------


class LanesH(Maps):
    """``bpf/include/lanes.h``: the classifier's rules, shared by the objects that sort."""

    lk_config = MapDecl(u32, ClassifierConfig)


class PhaseH(Maps):
    """``bpf/include/phase.h``: a host's job phase, shared by its valve and job marker."""

    lk_phase = MapDecl(u32, JobPhase)


class TelemetryH(Maps):
    """``bpf/include/telemetry.h``: the probes' event ring, sampling and lost counts."""

    lk_events = MapDecl()  # a ring buffer
    lk_telemetry = MapDecl(u32, TelemetryConfig)
    lk_lost = MapDecl(u32, u64)  # per CPU, slots abi.LOST_EVENTS ...


# --- the objects ------------------------------------------------------------------------


class NoMaps(Maps):
    pass


class NoPrograms(Programs):
    pass


ABI = ObjectDecl("abi", NoMaps, NoPrograms)  # labkit.h's structs, for their BTF


class ClassifierMaps(LanesH):
    lk_lane_stats = MapDecl(u32, LaneCounters)  # per CPU, per lane


class ClassifierPrograms(Programs):
    lk_classify = ProgramDecl()


CLASSIFIER = ObjectDecl("classifier", ClassifierMaps, ClassifierPrograms)


class DctcpMaps(Maps):
    lk_dctcp_hosts = MapDecl(u64, u8)  # netns cookie: 1
    lk_dctcp_samples = MapDecl()  # a ring buffer of abi.DctcpSample
    lk_dctcp = MapDecl()  # the struct_ops (tcp_congestion_ops)


class DctcpPrograms(Programs):
    lk_dctcp_init = ProgramDecl()
    lk_dctcp_ssthresh = ProgramDecl()
    lk_dctcp_in_ack_event = ProgramDecl()
    lk_dctcp_cwnd_event = ProgramDecl()
    lk_dctcp_set_state = ProgramDecl()
    lk_dctcp_cong_control = ProgramDecl()
    lk_dctcp_undo_cwnd = ProgramDecl()
    lk_dctcp_select = ProgramDecl()


DCTCP = ObjectDecl("dctcp", DctcpMaps, DctcpPrograms)


class EcnmarkMaps(Maps):
    lk_mark_k = MapDecl(u32, u32)  # K, bytes queued
    lk_mark_counts = MapDecl(u32, u64)  # per CPU: ECT, CE


class EcnmarkPrograms(Programs):
    lk_mark = ProgramDecl()


ECNMARK = ObjectDecl("ecnmark", EcnmarkMaps, EcnmarkPrograms)


class EmptyPrograms(Programs):
    lk_empty = ProgramDecl()


EMPTY = ObjectDecl("empty", NoMaps, EmptyPrograms)


class JobmarkMaps(PhaseH):
    lk_jobmark_cfg = MapDecl(u32, JobmarkConfig)
    lk_jobmark_stats = MapDecl(u32, LaneCounters)  # per CPU
    lk_job_state = MapDecl(u32, JobState)
    lk_job_bursts = MapDecl(u32, Burst)
    lk_jobmark_far = MapDecl(u32, u8)  # an address in network order: 1


class JobmarkPrograms(Programs):
    lk_jobmark = ProgramDecl()


JOBMARK = ObjectDecl("jobmark", JobmarkMaps, JobmarkPrograms)


class LatencyMaps(LanesH, TelemetryH):
    lk_latency_hist = MapDecl(u32, Hist)  # per CPU, per lane


class LatencyPrograms(Programs):
    lk_latency = ProgramDecl()


LATENCY = ObjectDecl("latency", LatencyMaps, LatencyPrograms)


class LossyMaps(Maps):
    lk_loss = MapDecl(u32, u32)  # drop probability, per million
    lk_loss_drops = MapDecl(u32, u64)  # per CPU


class LossyPrograms(Programs):
    lk_lossy = ProgramDecl()


LOSSY = ObjectDecl("lossy", LossyMaps, LossyPrograms)


class PauseMaps(Maps):
    lk_pause_ports = MapDecl(PortKey, PausePort)
    lk_pause_queues = MapDecl(u32, PauseQueue)
    lk_pause_held = MapDecl(PauseHold, u32)  # episode + 1
    lk_pause_events = MapDecl()  # a ring buffer of abi.PauseEvent
    lk_pause_lost = MapDecl(u32, u64)  # per CPU
    lk_pause_watches = MapDecl(u32)  # a paused queue's watchdog timer: the programs' own


class PausePrograms(Programs):
    lk_pause_enqueue = ProgramDecl()
    lk_pause_dequeue = ProgramDecl()


PAUSE = ObjectDecl("pause", PauseMaps, PausePrograms)


class QueuesMaps(TelemetryH):
    lk_ports = MapDecl(PortKey, u32)  # a watched port: its slot
    lk_enqueued = MapDecl(u32, LaneCounters)  # per CPU, per slot and lane
    lk_dropped = MapDecl(u32, LaneCounters)  # per CPU, per slot and lane
    lk_inflight = MapDecl(u64)  # the program's own: an skb's address, its enqueue
    lk_sojourn_hist = MapDecl(u32, Hist)  # per CPU, per slot and lane
    lk_port_clock = MapDecl(u32, PortClock)
    lk_job_enqueued = MapDecl(u32, LaneCounters)  # per CPU, per slot and DSCP
    lk_job_dropped = MapDecl(u32, LaneCounters)  # per CPU, per slot and DSCP
    lk_job_sojourn_hist = MapDecl(u32, Hist)  # per CPU, per slot and DSCP


class QueuesPrograms(Programs):
    lk_qdisc_enqueue = ProgramDecl()
    lk_qdisc_dequeue = ProgramDecl()
    lk_qdisc_drop = ProgramDecl()


QUEUES = ObjectDecl("queues", QueuesMaps, QueuesPrograms)


class ValveMaps(LanesH, PhaseH):
    lk_valve = MapDecl(u32, ValveConfig)
    lk_valve_stats = MapDecl(u32, ValveCounters)  # per CPU, per lane
    lk_valve_clock = MapDecl(u32)  # the program's own: a lane's clock


class ValvePrograms(Programs):
    lk_valve_egress = ProgramDecl()


VALVE = ObjectDecl("valve", ValveMaps, ValvePrograms)


class WakePrograms(Programs):
    lk_wake = ProgramDecl()


WAKE = ObjectDecl("wake", NoMaps, WakePrograms)

OBJECTS = (ABI, CLASSIFIER, DCTCP, ECNMARK, EMPTY, JOBMARK, LATENCY, LOSSY, PAUSE, QUEUES,
           VALVE, WAKE)  # one per bpf/*.bpf.c
