"""The run's Parquet tables: one row type per table (:data:`TABLES`), its fields the
table's columns in order, each annotated with its dtype; the schemas are derived from
them (:func:`schema`, :data:`labkit.runs.rundir.SCHEMAS`, which puts ``policy`` in front).

The rows are NamedTuples: the producers build them positionally in their sampling loops
(the queue poller at 125 Hz, the ring-buffer reader per sampled packet), where a tuple is
the cheapest record; the pauser sends them over JSON as lists. The dtypes are named as
polars names them, so that the kernel modules and the pauser's process that emit rows do
not load polars.
"""

from typing import Annotated, NamedTuple, get_type_hints

# a column's Python type and its Parquet dtype (polars' name for it)
Int = Annotated[int, "Int64"]
Float = Annotated[float, "Float64"]
Str = Annotated[str, "String"]
IntOrNull = Annotated[int | None, "Int64"]
FloatOrNull = Annotated[float | None, "Float64"]


class CollectiveRow(NamedTuple):
    """One (op or job iteration, rank) (``collectives``): its sums of timed compute,
    waits while the awaited data was on its way (exposed) and before it had left its
    sender (bubble); a user's program's iterations as it reported them or its traffic
    showed them."""

    op: Int
    rank: Int
    host: Str
    start_ns: Int
    end_ns: Int
    wrong: Int  # chunks whose value did not add up
    compute_ns: Int
    exposed_ns: Int
    bubble_ns: Int
    resent: Int  # packets the rank sent again during the op (labkit's ranks; else 0)


class PhaseRow(NamedTuple):
    """A span of one rank's op in one phase (``phases``): computing, or waiting for a
    peer that had not sent (bubble) or for data on the wire (wire_wait)."""

    op: Int
    rank: Int
    host: Str
    phase: Str
    start_ns: Int
    end_ns: Int


class TransportRow(NamedTuple):
    """One rank's transport counters and CPU time (``transport``)."""

    host: Str
    rank: Int
    packets_sent: Int
    retransmits: Int
    timeouts: Int
    naks: Int
    out_of_order: Int
    bytes_received: Int
    cpu_user_s: Float
    cpu_sys_s: Float
    cnps: Int  # received, each a rate cut


class QueueRow(NamedTuple):
    """One tc class of a watched port at one sample (``queue``)."""

    t_ns: Int
    port: Str
    classid: Str  # "1:10"
    lane: Str  # the lane the class carries, "all" under fifo
    bytes: Int
    packets: Int
    drops: Int
    overlimits: Int
    backlog_bytes: Int
    backlog_packets: Int


class LaneRow(NamedTuple):
    """One lane of a watched port at one sample, running totals (``lanes``)."""

    t_ns: Int
    port: Str
    lane: Str
    offered_packets: Int
    offered_bytes: Int
    enqueued_packets: Int
    enqueued_bytes: Int
    dropped_packets: Int
    dropped_bytes: Int


class JobLaneRow(NamedTuple):
    """One job's running totals at a watched port at one sample (``job_lanes``): its
    packets (by their DSCP) the port's qdisc accepted and dropped."""

    t_ns: Int
    port: Str
    job: Str
    enqueued_packets: Int
    enqueued_bytes: Int
    dropped_packets: Int
    dropped_bytes: Int


class SojournRow(NamedTuple):
    """A sampled packet's time in a watched port's queue (``sojourn``)."""

    t_ns: Int
    port: Str
    lane: Str
    sojourn_ns: Int
    bytes: Int
    stamp_ns: Int
    seq: Int


class LatencyRow(NamedTuple):
    """A sampled packet's one-way delay, sender stamp to receiver (``latency``)."""

    t_ns: Int
    lane: Str
    latency_ns: Int
    bytes: Int
    stamp_ns: Int
    seq: Int


class HistRow(NamedTuple):
    """One non-empty log2 bucket of a sojourn or latency histogram (``histograms``); kind
    ``job_sojourn``: one job's sojourn at a watched port, the job's name in ``lane``."""

    kind: Str  # sojourn, latency or job_sojourn
    port: Str  # "" for latency
    lane: Str  # the job's name for job_sojourn
    bucket: Int
    count: Int  # type: ignore[assignment]  # the column's name on disk; shadows tuple.count


class GapRow(NamedTuple):
    """Two dequeues of a watched port with packets waiting between them (``gaps``)."""

    t_ns: Int
    port: Str
    gap_ns: Int  # between the two dequeues
    bytes: Int  # the first packet, as the qdisc counted it: its wire time at the port's rate
    busy_bytes: Int  # what the port sent since its queue was last empty, before that packet


class FlowRow(NamedTuple):
    """A storage entry's data a host has received so far, sampled (``flows``)."""

    host: Str
    entry: Str
    t_ns: Int
    bytes: Int


class IoRow(NamedTuple):
    """A storage I/O completed (``ios``)."""

    host: Str  # the client
    entry: Str
    t_ns: Int  # its arrival
    latency_ns: Int  # arrival to CapsuleResp, queueing at the client included
    bytes: Int


class CpuRow(NamedTuple):
    """The machine's CPU at one sample (``cpu``)."""

    t_ns: Int
    busy: Float  # the machine's busy share since the previous sample


class PauseRow(NamedTuple):
    """One pause of one neighbour's queue (``pauses``)."""

    t_ns: Int  # when the queue that asked crossed xoff (the XOFF's time in the kernel)
    port: Str  # the paused port, "<node>/<ifname>"
    classid: Str  # its paused class ("1:10")
    lane: Str  # the lane the asking queue carries ("all" under fifo)
    cause: Str  # the asking queue's port
    reaction_ns: Int  # XOFF to the pause in force
    wake_ns: Int  # of which: XOFF to the pauser acting on it
    paused_ns: Int  # pause in force to resumed
    resume_ns: Int  # XON (or the end of the run) to resumed


class JobRankRow(NamedTuple):
    """One job in one of ``job-priority``'s rankings (``job_ranks``): its GPU intensity as
    learned then (compute ns per byte it sent across the bottleneck, over its latest
    iterations) and the lane the ranking gave it."""

    t_ns: Int
    job: Str
    intensity_ns_per_byte: Float
    iterations: Int  # the job's iterations the intensity was learned from
    lane: Str


class JobShiftRow(NamedTuple):
    """One of ``interleave``'s shifts (``job_shifts``): a job's op put off so that the
    jobs' communication takes turns; the period and the communication time it reckoned
    with (alone: its bytes at the bottleneck over the port's rate)."""

    t_ns: Int
    job: Str
    op: Int
    shift_ns: Int
    period_ns: Int
    comm_ns: Int


class Decision(NamedTuple):
    """One change of a valve's lane, or a job phase relayed to it (``controller``)."""

    t_ns: Int
    valve: Str  # a host, or a bottleneck port
    lane: Str
    old_mbps: FloatOrNull  # null: open
    new_mbps: FloatOrNull
    old_busy_mbps: FloatOrNull
    new_busy_mbps: FloatOrNull
    busy_from_ns: IntOrNull  # a relayed job phase window
    busy_until_ns: IntOrNull
    reason: Str


class OpRow(NamedTuple):
    """One collective op of one rank of a user's program (``program_ops``): reported by
    the program, or seen as a burst of its traffic (op ``burst``)."""

    rank: Int
    host: Str
    iteration: IntOrNull  # as the program numbered it (null: not said)
    op: Str
    bytes: IntOrNull  # null: not said
    start_ns: Int
    end_ns: Int


class BurstRow(NamedTuple):
    """One burst of a program's traffic out of a rank host's NIC (``bursts``)."""

    host: Str
    start_ns: Int
    end_ns: Int
    bytes: Int
    packets: Int


class DctcpRow(NamedTuple):
    """One window of a lk_dctcp sender as it ended (``dctcp``): its flow, DCTCP's alpha
    after it, the window (cwnd, packets), the bytes it acknowledged and those marked."""

    t_ns: Int
    host: Str  # the sender
    flow: Str  # "<src ip>:<port> > <dst ip>:<port>"
    alpha: Float  # 0 to 1
    cwnd: Int
    acked_bytes: Int
    marked_bytes: Int


class EventRow(NamedTuple):
    """A fault of the scenario's timeline taking effect on its link, or ending
    (``events``): when, which event (its index in ``events``), its link, change and
    value, and ``state``: "start" or "end"."""

    t_ns: Int
    event: Int
    link: Str
    change: Str  # down, rate_mbps or loss_percent
    value: Float  # the rate, the loss in percent; 100 for down
    state: Str


class RouteRow(NamedTuple):
    """A router's kernel route to a host subnet (``routes``, a routed fabric's): as the
    traffic started (``change`` "start"), and each time BGP replaced it ("new") or took it
    away ("del"), with its next hops (addresses, space-separated; "" when deleted)."""

    t_ns: Int
    router: Str
    dst: Str  # "10.0.5.0/24"
    via: Str
    change: Str


TABLES: dict[str, type[tuple]] = {  # every table by its name (its file's), in this order
    "collectives": CollectiveRow, "phases": PhaseRow, "transport": TransportRow,
    "queue": QueueRow, "lanes": LaneRow, "job_lanes": JobLaneRow, "sojourn": SojournRow,
    "latency": LatencyRow, "histograms": HistRow, "gaps": GapRow, "flows": FlowRow,
    "ios": IoRow, "cpu": CpuRow, "pauses": PauseRow, "controller": Decision,
    "program_ops": OpRow, "bursts": BurstRow, "dctcp": DctcpRow, "events": EventRow,
    "job_ranks": JobRankRow, "job_shifts": JobShiftRow, "routes": RouteRow,
}


def schema(row: type[tuple]) -> dict:
    """``row``'s columns in order, each with its polars dtype."""
    import polars as pl  # here, not above: see the module's docstring

    hints = get_type_hints(row, include_extras=True)  # in the order the fields are declared
    return {name: getattr(pl, hint.__metadata__[0]) for name, hint in hints.items()}
