"""What one policy of a run produced, in memory, before :mod:`labkit.runs.rundir` writes
it: each table's rows and what the summary says besides. The traffic driver
(:mod:`labkit.runs.experiment`) and each feature of the policy's stack
(:mod:`labkit.runs.features`) fill it in."""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.model.summary_meta import ControlCounters, LinkDelayRow, ProgramReport
from labkit.model.tables import (
    BurstRow,
    CollectiveRow,
    CpuRow,
    DctcpRow,
    Decision,
    EventRow,
    FlowRow,
    GapRow,
    HistRow,
    IoRow,
    JobLaneRow,
    JobRankRow,
    JobShiftRow,
    LaneRow,
    LatencyRow,
    OpRow,
    PauseRow,
    PhaseRow,
    QueueRow,
    RouteRow,
    SojournRow,
    TransportRow,
)
from labkit.model.traffic.results import CommandEnd


@dataclass
class PolicyResult:
    """Everything one policy produced, in memory: each table's rows in the attribute of
    its name (:data:`labkit.model.tables.TABLES`; :mod:`labkit.runs.rundir` writes them),
    and what the summary says besides."""

    policy: str
    port_layout: str  # the router ports' queues (labkit.kernel.tc): "lanes" or "fifo"
    collectives: list[CollectiveRow] = field(default_factory=list)  # per (op, rank)
    phases: list[PhaseRow] = field(default_factory=list)  # the ops' phases, as spans
    transport: list[TransportRow] = field(default_factory=list)  # per rank
    queue: list[QueueRow] = field(default_factory=list)
    flows: list[FlowRow] = field(default_factory=list)  # storage data received, sampled
    ios: list[IoRow] = field(default_factory=list)  # storage I/Os completed
    storage_errors: list[str] = field(default_factory=list)  # before storage was stopped
    storage_stopped_ns: int = 0
    cpu: list[CpuRow] = field(default_factory=list)
    lanes: list[LaneRow] = field(default_factory=list)  # per-lane counters of watched ports
    job_lanes: list[JobLaneRow] = field(default_factory=list)  # per job, with several jobs
    job_ranks: list[JobRankRow] = field(default_factory=list)  # job-priority's rankings
    job_shifts: list[JobShiftRow] = field(default_factory=list)  # interleave's shifts
    sojourn: list[SojournRow] = field(default_factory=list)  # sampled packets
    latency: list[LatencyRow] = field(default_factory=list)  # sampled packets
    histograms: list[HistRow] = field(default_factory=list)
    gaps: list[GapRow] = field(default_factory=list)  # sampled dequeue pairs
    events_lost: int = 0
    packets_sampled: int = 0
    unpaired: int = 0  # dequeues whose enqueue the tracepoint did not report
    orchestrator_cpu_share: float = 0.0  # of one core, while the collective ran
    loss_drops: dict[str, int] = field(default_factory=dict)  # per lossy link
    controller: list[Decision] = field(default_factory=list)  # the valves' decisions
    control: ControlCounters | None = None  # valve totals and the controller's own figures
    ecn_marks: dict[str, dict[str, int]] = field(default_factory=dict)  # per marking port
    dctcp: list[DctcpRow] = field(default_factory=list)  # lk_dctcp's windows, as they ended
    commands: list[CommandEnd] = field(default_factory=list)  # the command entries, as they ended
    pauses: list[PauseRow] = field(default_factory=list)  # a lossless fabric's pauses
    pause_notes: list[str] = field(default_factory=list)  # what the pauser could not do
    program_ops: list[OpRow] = field(default_factory=list)  # a program's collectives
    bursts: list[BurstRow] = field(default_factory=list)  # a program's traffic, per host
    programs: dict[str, ProgramReport] = field(default_factory=dict)  # each as it ended
    delays: list[LinkDelayRow] = field(default_factory=list)  # the delay line, per direction
    events: list[EventRow] = field(default_factory=list)  # the timeline's faults as they acted
    routes: list[RouteRow] = field(default_factory=list)  # a routed fabric's, as they changed
    aborted: bool = False
