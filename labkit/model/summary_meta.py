"""What :func:`labkit.analysis.metrics.summarize` needs besides a run's tables: the
scenario's and fabric's facts and what each policy's run reported outside the tables
(built by :func:`labkit.runs.experiment.summary_meta`). Per-policy maps are keyed by
policy name; a policy missing from one had nothing to report there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.model.scenario_spec import JobSpec
from labkit.model.summary import Command, MarksAndDrops, ProgramRank, Telemetry


@dataclass(frozen=True, kw_only=True)
class PortMeta:
    """A bottleneck port: its link, rate, node, HTB burst, hop ("node->peer"), the
    ranks whose ring hop crosses it and its full frame's bytes."""

    link: str
    rate_mbps: float
    node: str
    burst_bytes: int
    hop: str
    senders: tuple[int, ...]
    frame_bytes: int = 1514  # a full frame: the link's MTU and the Ethernet header


@dataclass(frozen=True, kw_only=True)
class LosslessMeta:
    """A lossless fabric's lanes, the pauses' reaction budget, one MTU frame's wire time
    on the slowest bottleneck (µs), and per policy its ports' queue layout and what the
    pauser could not do."""

    lanes: tuple[str, ...]
    budget_us: float
    packet_us: float
    layouts: dict[str, str] = field(default_factory=dict)
    notes: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ValveTotals:
    """What the hosts' valves did to one lane, summed over them: the mean Mbit/s they
    passed while the controller ran, the packets they CE-marked and dropped."""

    mbps: float = 0.0
    ce_marked: int = 0
    dropped: int = 0


@dataclass(frozen=True, kw_only=True)
class ControlCounters:
    """What a policy's control session reported as it ended
    (:meth:`labkit.control.session.ControlSession.summary_counters`): per lane the hosts'
    valves' totals, per valve and lane the marks and drops (only those with some), per
    bottleneck port and lane its CE marks, the proactive controller's prediction error,
    the gates' wakes and ceiling moves (None: no gates), and each sender's fair share."""

    host_valves: dict[str, ValveTotals]
    by_valve: dict[str, dict[str, MarksAndDrops]]
    port_ce_marks: dict[str, dict[str, int]]
    prediction_error_ms: float | None
    wakes: int | None
    ceiling_changes: int | None
    senders: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class ProgramReport:
    """A user's program as one policy's run ended: its name, where its times came from
    (``lines``, ``hook`` or ``traffic``), its warm-up iterations, the bad lines of its
    output, the bursts of its traffic the kernel could not keep, its ranks as they ended,
    and why its traffic did not show its collectives (None: it did, or they were timed)."""

    name: str
    source: str
    warmup: int
    bad_lines: int
    bursts_lost: int
    ranks: tuple[ProgramRank, ...]
    unmeasured: str | None = None


@dataclass(frozen=True, kw_only=True)
class LinkDelayRow:
    """One direction (``hop``, "node->peer") of a delayed link as the delay line kept it
    over a policy's run: its delay and jitter, frames forwarded and dropped, how late its
    sends were against their deadlines (ns), and whether it ran under SCHED_FIFO."""

    link: str
    hop: str
    delay_ns: int
    jitter_ns: int
    frames: int
    dropped: int
    late_p50_ns: int
    late_p99_ns: int
    late_max_ns: int
    realtime: bool


@dataclass(frozen=True)
class JobMeta:
    """One of several jobs sharing the fabric, as its summary needs it: its kind, hosts
    (its rows are theirs: labkit's jobs do not share hosts), DSCP (its packets' at the
    bottleneck), GPUs, and its workload's facts as a one-job run's meta holds them."""

    name: str
    kind: str  # allreduce, job or program
    hosts: tuple[str, ...]
    dscp: int
    gpus: int
    compute_ms: float  # an All-Reduce's compute between its ops (a job's are in its rows)
    meta: SummaryMeta  # the job's workload facts (workload, size, job, bytes per hop)


@dataclass(frozen=True, kw_only=True)
class SummaryMeta:
    """A run's facts for its summary. ``size_bytes`` is an All-Reduce's, ``job`` a
    training job's, ``program`` (per policy: the program as it ended) and ``warmup`` a
    user's program's; ``lossless`` is None on a lossy fabric."""

    scenario: str
    run_id: str
    scale_factor: float
    policies: tuple[str, ...]  # in the order they ran
    workload: str  # allreduce, job or program
    ranks: int
    ring_link_mbps: float  # the slowest link on any rank-to-rank path
    ports: dict[str, PortMeta]  # the bottleneck ports, by interface name
    size_bytes: int | None = None
    job: JobSpec | None = None
    bytes_per_iteration: dict[str, int] = field(default_factory=dict)  # per hop
    telemetry: dict[str, Telemetry] = field(default_factory=dict)
    loss_drops: dict[str, dict[str, int]] = field(default_factory=dict)  # per lossy link
    commands: dict[str, tuple[Command, ...]] = field(default_factory=dict)
    storage_errors: dict[str, list[str]] = field(default_factory=dict)
    program: dict[str, ProgramReport] | None = None  # the program as each policy ended it
    warmup: int = 0  # a program's first iterations, left out of every figure
    control: dict[str, ControlCounters] = field(default_factory=dict)
    lossless: LosslessMeta | None = None
    tcp_control: str = "default"  # transport.tcp
    ecn_k_packets: int | None = None  # transport.ecn_k_packets: the bottleneck ports mark
    ecn_marks: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # per port
    delays: dict[str, tuple[LinkDelayRow, ...]] = field(default_factory=dict)  # delayed links
    jobs: tuple[JobMeta, ...] = ()  # with several jobs, each of them
    routing: str = "static"  # fabric.routing: "bgp" records the routers' routes
