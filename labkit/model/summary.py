"""A run's summary (``summary.json``) as a typed tree: :class:`Summary` at the root, a
:class:`PolicySummary` per policy, a frozen dataclass for every section below it.

:meth:`Summary.from_json` reads a document, the versions recorded before a key existed
included; :meth:`Summary.to_json` gives back the document as written, key order
included, so ``json.dumps(Summary.from_json(doc).to_json())`` is ``json.dumps(doc)``
(:mod:`labkit.model.records`, the codec of every JSON document labkit writes). Each
record's fields are its keys in the order the document holds them. A field with a
default is a key that older runs lack: a record read from such a run keeps the keys its
document lacked (``unrecorded``) and writes them back missing. A field marked
:func:`when_set` is written only when it holds a value (``lossless`` on a lossy fabric);
a policy's workload sits under the key of its kind. Errors: :class:`SummaryError`.
docs/data-model.md says what each figure means.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypeVar

from labkit.model import records
from labkit.model.abi import LANES
from labkit.model.records import DocumentError, one_of, when_set
from labkit.model.records import Record as Record  # the one codec's, every section's base

T = TypeVar("T")


class SummaryError(DocumentError):
    """A summary document that does not fit the tree: the message names the key path."""

    MISSING = "{where}: missing key {key!r}"
    UNKNOWN = "{where}: unknown key(s) {sorted}"

    @staticmethod
    def wanted(tp: type) -> str:
        names: dict[type, str] = {dict: "an object", list: "a list"}
        return names.get(tp, tp.__name__)

    @staticmethod
    def got(tp: type, value: Any) -> str:
        return type(value).__name__ if tp in (dict, list) else repr(value)


@dataclass(frozen=True, kw_only=True)
class Section(Record):
    """A node of the tree, read and written key by key in the order of its fields."""

    ERROR: ClassVar[type[DocumentError]] = SummaryError


# --- the sections --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PerLane(Section, Generic[T]):
    """One figure per lane, in the lanes' order (:data:`labkit.model.abi.LANES`)."""

    vip: T
    normal: T
    low: T

    @classmethod
    def by_lane(cls, figure: Callable[[str], T]) -> PerLane[T]:
        return cls(vip=figure("vip"), normal=figure("normal"), low=figure("low"))

    def of(self, lane: str) -> T:
        """The figure of ``lane`` (a name from LANES)."""
        if lane not in LANES:
            raise KeyError(f"{lane!r} is not a lane ({', '.join(LANES)})")
        return getattr(self, lane)

    def items(self) -> Iterator[tuple[str, T]]:
        return ((lane, getattr(self, lane)) for lane in LANES)

    def values(self) -> Iterator[T]:
        return (getattr(self, lane) for lane in LANES)


@dataclass(frozen=True, kw_only=True)
class AllReduce(Section):
    """The collective's ops (``allreduce``): times in ms, bandwidths in Mbit/s; slowdowns
    against ``isolated`` in the same run (null without it)."""

    KEY: ClassVar[str] = "allreduce"
    ops: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    algbw_mbps: float
    busbw_mbps: float
    wrong: int  # chunks whose value did not add up
    slowdown_p50: float | None = None
    slowdown_p99: float | None = None


@dataclass(frozen=True, kw_only=True)
class Job(Section):
    """A training job's iterations (``job``): times in ms, the rest as fractions of a
    rank's iteration; bytes per hop (``"a->b"``) from the ranks' plans and the routes."""

    KEY: ClassVar[str] = "job"
    parallelism: str
    iterations: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    compute_ms: float
    exposed_comm_ms: float
    exposed_comm_fraction: float
    bubble_fraction: float
    wire_wait_fraction: float
    bytes_per_iteration: dict[str, int]
    bottleneck_bytes_per_iteration: int
    wrong: int
    slowdown_p50: float | None = None
    slowdown_p99: float | None = None


@dataclass(frozen=True, kw_only=True)
class ProgramOp(Section):
    """One collective of a user's program, over its instances (times in ms);
    ``busbw_mbps`` only for an All-Reduce alone in its iteration."""

    count: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    bytes: int | None  # the median size it reported; null: not said
    busbw_mbps: float | None = when_set()
    slowdown_p50: float | None = None
    slowdown_p99: float | None = None


@dataclass(frozen=True, kw_only=True)
class ProgramTraffic(Section):
    """What a program's ranks sent out of their hosts' NICs."""

    packets: int
    bytes: int
    bursts_lost: int  # bursts the kernel's table could not keep


@dataclass(frozen=True, kw_only=True)
class ProgramRank(Section):
    """One rank of a user's program, as it ended."""

    rank: int
    host: str
    argv: tuple[str, ...]
    exit: int | None
    stopped_by_labkit: bool
    lingered: bool = False  # had reported every iteration, had not exited 15 s later
    cpu_s: float
    packets: int
    bytes: int


@dataclass(frozen=True, kw_only=True)
class Program(Section):
    """A user's program (``program``, docs/programs.md): its iterations (null figures: it
    recorded none), its collectives by name, its traffic, CPU and ranks."""

    KEY: ClassVar[str] = "program"
    name: str
    # lines: what it printed; hook: what labkit's start-up hook (PyTorch) or PMPI shim
    # (MPI) timed of it; traffic: the bursts of its traffic
    source: str
    iterations: int
    warmup: int = 0  # first iterations left out of every figure
    p50_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    compute_ms: float | None
    exposed_comm_ms: float | None
    exposed_comm_fraction: float | None
    ops: dict[str, ProgramOp]
    bottleneck_bytes_per_iteration: float | None
    traffic: ProgramTraffic
    cpu_s: float
    bad_lines: int
    ranks: tuple[ProgramRank, ...]
    slowdown_p50: float | None = None
    slowdown_p99: float | None = None
    unmeasured: str | None = when_set()  # why its traffic does not show its collectives


Workload = AllReduce | Job | Program
WORKLOADS: dict[str, type[Workload]] = {w.KEY: w for w in (AllReduce, Job, Program)}


@dataclass(frozen=True, kw_only=True)
class StorageEntry(Section):
    """One storage entry over the window: goodput, the I/Os that arrived, their completion
    times (null without I/Os)."""

    goodput_mbps: float
    ios: int
    io_p50_ms: float | None
    io_p99_ms: float | None


@dataclass(frozen=True, kw_only=True)
class Storage(Section):
    """Storage goodput over the window, all entries and per entry."""

    goodput_mbps: float
    entries: dict[str, StorageEntry]


@dataclass(frozen=True, kw_only=True)
class BottleneckLane(Section):
    """One lane at the bottleneck port over the window: what its queue accepted and
    dropped, sampled sojourns and one-way latencies (µs, null: no such packets), the
    largest backlog of the queue it waited in, and the CE marks its valve set."""

    mbps: float
    packets: int
    drops: int
    sojourn_p50_us: float | None
    sojourn_p99_us: float | None
    latency_p99_us: float | None
    max_backlog_bytes: int
    ecn_marks: int


@dataclass(frozen=True, kw_only=True)
class Bottleneck(Section):
    """The bottleneck egress port that sent the most, its link and its lanes."""

    link: str
    port: str
    rate_mbps: float
    utilization: float  # bytes sent / (rate x window)
    lanes: PerLane[BottleneckLane]


@dataclass(frozen=True, kw_only=True)
class MarksAndDrops(Section):
    """What one valve did to one lane's packets."""

    ce_marked: int
    dropped: int


@dataclass(frozen=True, kw_only=True)
class ControllerReport(Section):
    """What an adaptive policy's controller did (docs/control.md): decisions, the hosts'
    valves per lane, the proactive controller's prediction error, the senders' fair
    shares, per valve and lane its marks and drops, how often held senders were woken and
    ceilings moved (null before the gates), and the CNPs the collective received."""

    decisions: int
    cnps: int = 0
    mean_rate_mbps: PerLane[float]
    ce_marked: PerLane[int]
    dropped: PerLane[int]
    prediction_error_ms: float | None
    senders: dict[str, float]  # host: fair share in Mbit/s
    marks_and_drops: dict[str, dict[str, MarksAndDrops]]  # valve: lane: ...
    wakes: int | None
    ceiling_changes: int | None


@dataclass(frozen=True, kw_only=True)
class DequeueTiming(Section):
    """Did a watched port keep time while packets waited: quantiles of |gap / wire time -
    1| over the sampled pairs, its signed mean, ``excess`` (gaps' sum over wire times'
    sum - 1), ``late_share`` of the busy time, the port's p99 queueing time (µs) and
    whether it is flagged. Null figures: fewer than 100 pairs, or no queueing time."""

    pairs: int
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None
    excess: float | None = None
    late_share: float | None
    sojourn_p99_us: float | None
    flagged: bool


@dataclass(frozen=True, kw_only=True)
class Fidelity(Section):
    """How faithfully the run emulated its fabric, and the notes that say where not."""

    cpu_bound: bool
    generator_limited: bool = False  # the All-Reduce alone could not fill its links
    links_at_rate: bool
    links_kept_time: bool = True
    dequeue: dict[str, DequeueTiming] = field(default_factory=dict)  # by watched port
    notes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Transport(Section):
    """The collective's transport over the run, summed over ranks."""

    retransmits: int
    naks: int
    timeouts: int


@dataclass(frozen=True, kw_only=True)
class PauseTimes(Section):
    """Quantiles of a pause's times, in µs (null: no pauses)."""

    p50: float | None
    p99: float | None


@dataclass(frozen=True, kw_only=True)
class ReactionTimes(PauseTimes):
    """Xoff to the pause in force, in µs, with its maximum."""

    max: float | None


@dataclass(frozen=True, kw_only=True)
class PausedQueue(Section):
    """How often and how long one port's class stood paused."""

    pauses: int
    ms: float


@dataclass(frozen=True, kw_only=True)
class PortQueue(Section):
    """A bottleneck port under ``transport``: its queue over the measured window in full
    frames of ``frame_bytes`` (median, 99th percentile; None: not sampled), and when it
    marks, the ECN-capable packets it saw over the policy (a GSO run counts its packets)
    and those it marked CE for finding K packets or more queued (None: it does not mark)."""

    frame_bytes: int
    queue_p50_packets: float | None
    queue_p99_packets: float | None
    ect: int | None = None
    ce: int | None = None


@dataclass(frozen=True, kw_only=True)
class DctcpFlow(Section):
    """One lk_dctcp sender over the measured window: its goodput (Mbit/s: the bytes its
    windows acknowledged, a duplicate ACK counted as a segment), its windows, the share
    of them that met marks, DCTCP's alpha (mean), its window (cwnd, median, packets)."""

    host: str
    mbps: float
    windows: int
    marked_share: float
    alpha_mean: float
    cwnd_p50: float


@dataclass(frozen=True, kw_only=True)
class Tcp(Section):
    """The TCP senders' congestion control (``transport.tcp``): lk_dctcp, and each of its
    flows (the marks they met at the ports: ``queues``)."""

    control: str
    flows: dict[str, DctcpFlow]


@dataclass(frozen=True, kw_only=True)
class Queues(Section):
    """The bottleneck ports' queues when the scenario sets ``transport``: K (None: the
    ports do not mark) and each port (``<node>/<interface>``)."""

    k_packets: int | None
    ports: dict[str, PortQueue]


@dataclass(frozen=True, kw_only=True)
class Lossless(Section):
    """A lossless fabric's pauses (docs/lossless.md): how many, per paused ``"<port>
    <class>"``, how fast they acted, one MTU frame's wire time and the headroom's budget."""

    lanes: tuple[str, ...]
    pauses: int
    paused_ms: dict[str, PausedQueue]
    reaction_us: ReactionTimes
    resume_us: PauseTimes
    wake_us: PauseTimes
    packet_us: float
    budget_us: float


@dataclass(frozen=True, kw_only=True)
class Telemetry(Section):
    """What the probes saw and lost, and the share of a core ``labkit run`` itself used."""

    sample_every: int
    events_lost: int
    packets_considered: int
    dequeues_unpaired: int
    tracepoint_unseen: int | None = None
    orchestrator_cpu_share: float | None = None


@dataclass(frozen=True, kw_only=True)
class Command(Section):
    """A scenario's command entry, as it ended."""

    name: str
    role: str  # run or serve
    host: str
    argv: tuple[str, ...]  # as started, addresses expanded
    exit: int | None
    stopped_by_labkit: bool


@dataclass(frozen=True, kw_only=True)
class LinkDelay(Section):
    """One direction of a delayed link as labkit's delay line kept it over the policy's
    run: its delay and jitter (ms), frames forwarded and dropped, how late its sends were
    against their deadlines (µs, p50, p99 and the latest; negative: early), whether it ran
    under SCHED_FIFO, and whether it is flagged (its median send off by more than 10 % of
    the delay, or a frame dropped)."""

    link: str
    delay_ms: float
    jitter_ms: float
    frames: int
    dropped: int
    late_p50_us: float | None
    late_p99_us: float | None
    late_max_us: float
    realtime: bool
    flagged: bool


@dataclass(frozen=True, kw_only=True)
class JobAtBottleneck(Section):
    """One job's packets at the run's bottleneck port over the window, counted apart by
    its DSCP in the kernel: enqueued and dropped, its share of the jobs' bytes there, and
    its packets' time in the queue (µs, p99 of the kernel's histogram; null without)."""

    packets: int
    bytes: int
    dropped_packets: int
    share: float
    sojourn_p99_us: float | None


@dataclass(frozen=True, kw_only=True)
class SharedJob(Section):
    """One of several jobs sharing the fabric under one policy, over the part of the
    window every job was running in: its workload as a one-job run reports it, its
    iterations (ms: an All-Reduce's from one op's start to the next one's; a training
    job's or a program's iteration), its GPUs'
    utilization (the compute share of an iteration), its slowdowns against the job alone
    (``isolated``) and against the jobs together without storage (``together``), its
    packets at the bottleneck, its transport's resends and timeouts (over the policy's
    whole run), and under ``interleave`` the shifts it was given."""

    workload: Workload = one_of(WORKLOADS, "workload")
    gpus: int
    iterations: int
    iteration_p50_ms: float
    iteration_p99_ms: float
    gpu_utilization: float
    slowdown_p50: float | None = None
    slowdown_p99: float | None = None
    together_slowdown_p50: float | None = None
    together_slowdown_p99: float | None = None
    bottleneck: JobAtBottleneck | None = None
    retransmits: int  # its ranks' go-back-N resends over the policy's run
    timeouts: int  # ... and their retransmission timeouts
    shifted_ms: float | None = when_set()  # interleave: how far its iterations were put off


@dataclass(frozen=True, kw_only=True)
class Jobs(Section):
    """Several jobs sharing the fabric: the GPUs' utilization summed over the jobs,
    weighted by their GPUs (Crux's metric), and each job by its name. Under
    ``job-priority``: how long after the jobs started it first ranked them (ms; every
    figure is from then on) and how often its ranking changed a lane."""

    gpu_utilization: float
    each: dict[str, SharedJob]
    ranked_after_ms: float | None = when_set()
    rankings: int | None = when_set()


@dataclass(frozen=True, kw_only=True)
class Culprit(Section):
    """One slow phase of a policy's job (its iterations ``from_op`` to ``to_op``, each
    ``slowdown`` times the job's usual iteration at the median) and what labkit's own
    telemetry blames for it (never the scenario's events): a straggler ``rank`` (its
    host: it computed longer and the others waited for it in bubbles), a host's ``link``
    (the data into its rank and the next one waited on the wire), a ``path`` between two
    ranks' hosts ("g4->g5": only the data from one into the other was late) or the
    ``bottleneck`` (its port dropped or queued the job's packets); ``evidence`` says what
    was seen."""

    from_op: int
    to_op: int
    slowdown: float
    lost_ms: float  # its ops' time beyond the usual op's, summed
    kind: str  # rank, link, path or bottleneck
    name: str  # the rank's host, the host whose link it is, "a->b", or the bottleneck link
    evidence: str


@dataclass(frozen=True, kw_only=True)
class Reroute(Section):
    """A routed fabric's answer to one link going down (``fabric.routing: bgp``), from its
    routers' kernel routes (the ``routes`` table): the event (its index in ``events``,
    its link, when it went down: seconds into the policy's window), how many routers'
    routes to the hosts changed while it was down, when the first of them changed and
    when the last did (ms after it went down), and when the last changed back after it
    came up (ms after that). None: nothing moved (no route used the link, or the fabric
    did not react), or it never came back in the run."""

    event: int
    link: str
    at_s: float
    routers: int
    moved_ms: float | None
    converged_ms: float | None
    restored_ms: float | None


@dataclass(frozen=True, kw_only=True)
class PolicySummary(Section):
    """One policy of a run: its workload (under the key of its kind, first) and every
    section docs/data-model.md describes. ``transport``, ``telemetry`` and ``commands``
    are None in runs recorded before them; ``lossless`` only on a lossless fabric."""

    workload: Workload = one_of(WORKLOADS, "workload")
    storage: Storage
    bottleneck: Bottleneck
    controller: ControllerReport | None
    cpu_busy: float | None
    cpu_bound: bool
    fidelity: Fidelity
    window_s: float
    transport: Transport | None = None
    queues: Queues | None = when_set()
    tcp: Tcp | None = when_set()
    lossless: Lossless | None = when_set()
    telemetry: Telemetry | None = None
    lossy_links: dict[str, int]  # drops on purpose, per lossy link
    commands: tuple[Command, ...] | None = None
    delays: dict[str, LinkDelay] | None = when_set()  # by hop ("node->peer")
    jobs: Jobs | None = when_set()  # several jobs sharing the fabric
    culprits: tuple[Culprit, ...] | None = when_set()  # the job's slow phases, blamed
    reroutes: tuple[Reroute, ...] | None = when_set()  # a routed fabric's, per link down

@dataclass(frozen=True, kw_only=True)
class Summary(Section):
    """A run's summary: its scenario, run id, scale factor (real Mbit/s per emulated
    one) and one :class:`PolicySummary` per policy, in the order they ran."""

    scenario: str
    run_id: str
    scale_factor: float
    policies: dict[str, PolicySummary]

    @classmethod
    def from_json(cls, doc: Any, where: str = "") -> Self:
        if isinstance(doc, dict) and "kind" in doc:  # a sweep's, tuning's, batch's...
            raise SummaryError(f"{where or cls.__name__}: the summary of a {doc['kind']}, "
                               "not of a run")
        return super().from_json(doc, where)

    # For one release: a notebook's run.summary["policies"][...] reads the document.
    def __getitem__(self, key: str) -> Any:
        return self._document(f"[{key!r}]", key)[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._document(f".get({key!r})", key).get(key, default)

    def keys(self) -> Any:
        return self._document(".keys()", None).keys()

    def _document(self, read: str, key: str | None) -> dict[str, Any]:
        instead = (f"summary.{key}" if key in _SUMMARY_KEYS
                   else f"its attributes ({', '.join(_SUMMARY_KEYS)})")
        warnings.warn(f"summary{read} is deprecated: a run's summary is a "
                      f"labkit.model.summary.Summary; read {instead} instead (its policies are "
                      "PolicySummary records: .workload, .bottleneck, .fidelity, ...)",
                      DeprecationWarning, stacklevel=3)
        return self.to_json()


_SUMMARY_KEYS = records.keys(Summary)
