"""The sections a policy's summary has when its stack has the feature behind them
(:mod:`labkit.runs.features`): storage, the collective's transport, a lossless fabric's
pauses, the controller's report, TCP's congestion control and the marked queues, the
notes of a scenario's commands, how the delay line kept delayed links' time, several
jobs' figures, and the job's slow phases with their culprits.
:data:`SECTIONS` lists them for :func:`labkit.analysis.summarize.policy_summary`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from labkit.analysis.culprits import culprits
from labkit.analysis.jobs import jobs_report
from labkit.analysis.ports import backlog_series
from labkit.analysis.reroutes import reroutes
from labkit.analysis.windows import counter_delta, num, quantile, quantile_us
from labkit.analysis.workloads import program_notes
from labkit.model.abi import LANES
from labkit.model.summary import (
    Bottleneck,
    Command,
    ControllerReport,
    Culprit,
    DctcpFlow,
    Jobs,
    LinkDelay,
    Lossless,
    PausedQueue,
    PauseTimes,
    PerLane,
    PortQueue,
    Program,
    Queues,
    ReactionTimes,
    Reroute,
    Storage,
    StorageEntry,
    Tcp,
    Telemetry,
    Transport,
    Workload,
)
from labkit.model.summary_meta import ControlCounters, LinkDelayRow, LosslessMeta, SummaryMeta


def goodput_mbps(flows: pl.DataFrame, start: int, end: int) -> float:
    if flows.is_empty():
        return 0.0
    grown = counter_delta(flows, ["host", "entry"], ["bytes"], start, end)
    return num(grown["bytes"].sum()) * 8 / ((end - start) / 1e9) / 1e6


def storage(flows: pl.DataFrame, ios: pl.DataFrame, start: int, end: int) -> Storage:
    """Goodput over the window, in total and per storage entry, with each entry's I/O
    completion times (from arrival, so queueing at the client counts)."""
    entries = {}
    for name in sorted(set(flows["entry"]) | set(ios["entry"])):
        done = ios.filter((pl.col("entry") == name) & pl.col("t_ns").is_between(start, end))
        ms = done["latency_ns"] / 1e6
        entries[name] = StorageEntry(
            goodput_mbps=goodput_mbps(flows.filter(pl.col("entry") == name), start, end),
            ios=done.height,
            io_p50_ms=quantile(ms, 0.5) if done.height else None,
            io_p99_ms=quantile(ms, 0.99) if done.height else None)
    return Storage(goodput_mbps=goodput_mbps(flows, start, end), entries=entries)


def transport(ranks: pl.DataFrame) -> Transport:
    """The collective's transport over the whole run, summed over ranks: packets sent
    again by go-back-N, NAKs that asked for it, and timeouts."""
    return Transport(retransmits=int(ranks["retransmits"].sum()),
                     naks=int(ranks["naks"].sum()), timeouts=int(ranks["timeouts"].sum()))


def lossless(pauses: pl.DataFrame, info: LosslessMeta) -> Lossless:
    """A lossless fabric's pauses: how many, how long each port's queue stood paused
    (per port and class), and how fast a pause took effect against the wire time of
    one MTU frame on the bottleneck (``packet_us``)."""
    def times(ns: pl.Series) -> PauseTimes:
        return PauseTimes(p50=quantile_us(ns, 0.5), p99=quantile_us(ns, 0.99))

    reaction = pauses["reaction_ns"]
    paused = (pauses.group_by("port", "classid")
              .agg(pl.len().alias("pauses"), (pl.col("paused_ns").sum() / 1e6).alias("ms"))
              .sort("port", "classid"))
    return Lossless(
        lanes=info.lanes, pauses=pauses.height,
        paused_ms={f"{r['port']} {r['classid']}": PausedQueue(pauses=r["pauses"], ms=r["ms"])
                   for r in paused.iter_rows(named=True)},
        reaction_us=ReactionTimes(p50=quantile_us(reaction, 0.5), p99=quantile_us(reaction, 0.99),
                                  max=num(reaction.max()) / 1e3 if pauses.height else None),
        resume_us=times(pauses["resume_ns"]), wake_us=times(pauses["wake_ns"]),
        packet_us=info.packet_us, budget_us=info.budget_us)


def late_pauses(bottleneck: Bottleneck, info: Lossless, one_queue: bool) -> list[str]:
    """A note when a lossless lane (any lane, where ports have ``one_queue``) dropped at
    the bottleneck: its pauses came too late."""
    lanes = LANES if one_queue else info.lanes
    dropped = sum(bottleneck.lanes.of(lane).drops for lane in lanes)
    if not dropped:
        return []
    return [f"{dropped} packets of lossless lanes were dropped at {bottleneck.port}: pauses "
            f"came too late there (reaction p99 {info.reaction_us.p99 or 0:.0f} us, max "
            f"{info.reaction_us.max or 0:.0f} us; the headroom above xoff allows "
            f"{info.budget_us:.0f} us)"]


def controller(decisions: pl.DataFrame, control: ControlCounters,
               transport: pl.DataFrame) -> ControllerReport:
    """What the controller did: how many decisions, what the hosts' valves let through
    per lane (mean Mbit/s), marked and dropped, how often the held hosts' senders were
    woken and their queue ceilings moved (labkit.kernel.gates), the proactive controller's mean
    absolute error in predicting a burst's start, and the CNPs the collective's
    senders received (each a DCQCN rate cut; 0 unless the scenario turns DCQCN on)."""
    valves = control.host_valves
    return ControllerReport(
        decisions=decisions.height, cnps=int(transport["cnps"].sum()),
        mean_rate_mbps=PerLane.by_lane(lambda lane: valves[lane].mbps),
        ce_marked=PerLane.by_lane(lambda lane: valves[lane].ce_marked),
        dropped=PerLane.by_lane(lambda lane: valves[lane].dropped),
        prediction_error_ms=control.prediction_error_ms, senders=control.senders,
        marks_and_drops=control.by_valve, wakes=control.wakes,
        ceiling_changes=control.ceiling_changes)


def tcp(windows: pl.DataFrame, meta: SummaryMeta, start: int, end: int) -> Tcp:
    """The TCP senders' congestion control (``transport.tcp``): each lk_dctcp flow's
    windows that ended in the measured window."""
    inside = windows.filter(pl.col("t_ns").is_between(start, end))
    flows = {}
    for (flow,), w in inside.group_by("flow", maintain_order=True):
        flows[str(flow)] = DctcpFlow(
            host=str(w["host"][0]),
            mbps=num(w["acked_bytes"].sum()) * 8 / ((end - start) / 1e9) / 1e6,
            windows=w.height,
            marked_share=num((w["marked_bytes"] > 0).mean()),
            alpha_mean=num(w["alpha"].mean()), cwnd_p50=num(w["cwnd"].median()))
    return Tcp(control=meta.tcp_control, flows=flows)


def queues(queue: pl.DataFrame, meta: SummaryMeta, policy: str, start: int, end: int
           ) -> Queues | None:
    """The bottleneck ports' queues in full frames over the measured window, and their
    marks (None: the scenario leaves ``transport`` alone)."""
    if meta.tcp_control == "default" and meta.ecn_k_packets is None:
        return None
    marks = meta.ecn_marks.get(policy, {})
    ports = {}
    for ifname, port in meta.ports.items():
        label = f"{port.node}/{ifname}"
        frames = backlog_series(queue, policy, ifname, start, end)["backlog_bytes"]
        frames = frames / port.frame_bytes
        sampled = len(frames) > 0
        counts = marks.get(label, {})
        ports[label] = PortQueue(
            frame_bytes=port.frame_bytes,
            queue_p50_packets=round(num(frames.median()), 1) if sampled else None,
            queue_p99_packets=round(quantile(frames, 0.99), 1) if sampled else None,
            ect=counts.get("ect"), ce=counts.get("ce"))
    return Queues(k_packets=meta.ecn_k_packets, ports=ports)


def command_notes(policy: str, commands: tuple[Command, ...]) -> list[str]:
    """A note per command entry that exited with an error before the run ended."""
    return [f"command {c.name} ({c.role}) on {c.host} exited with {c.exit} before the run "
            f"ended: see agents/{policy}/commands/{c.name}"
            f"{'' if c.role == 'run' else '.serve'}.err"
            for c in commands if not c.stopped_by_labkit and c.exit != 0]


LATE_OF_DELAY = 0.10  # a delay line's median send off by more than this share: flagged


def link_delays(rows: tuple[LinkDelayRow, ...]) -> tuple[dict[str, LinkDelay], list[str]]:
    """Each delayed link direction as the delay line kept it, by hop, and a note for each
    one flagged (see :class:`LinkDelay`) or not run under SCHED_FIFO."""
    out, notes = {}, []
    for r in rows:
        none = r.frames == 0
        p50 = None if none else r.late_p50_ns / 1e3
        off = p50 is not None and abs(p50) > LATE_OF_DELAY * r.delay_ns / 1e3
        out[r.hop] = LinkDelay(
            link=r.link, delay_ms=r.delay_ns / 1e6, jitter_ms=r.jitter_ns / 1e6,
            frames=r.frames, dropped=r.dropped, late_p50_us=p50,
            late_p99_us=None if none else r.late_p99_ns / 1e3, late_max_us=r.late_max_ns / 1e3,
            realtime=r.realtime, flagged=off or r.dropped > 0)
        if off:
            notes.append(f"{r.hop}'s delay line sent {p50:+.0f} us off its deadlines at the "
                         f"median, more than {LATE_OF_DELAY:.0%} of its "
                         f"{r.delay_ns / 1e6:g} ms delay")
        if r.dropped:
            notes.append(f"{r.hop}'s delay line dropped {r.dropped} frame(s): its ring was "
                         "full or a send was refused")
    if any(not r.realtime for r in rows):
        notes.append("the delay line ran without SCHED_FIFO (not allowed here): its sends "
                     "wait for a CPU like any process's")
    return out, notes


# --- dispatch -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyView:
    """What a section reads of one policy: its tables (``of``), the run's facts, its window
    [start, end] and the figures every policy has (its workload and bottleneck)."""

    policy: str
    meta: SummaryMeta
    of: Callable[[str], pl.DataFrame]
    start: int
    end: int
    workload: Workload
    bottleneck: Bottleneck


@dataclass(frozen=True)
class Section:
    """One section of a policy's summary: the :class:`~labkit.model.summary.PolicySummary`
    field it fills (None: it only adds notes) and how it is made from a
    :class:`PolicyView`, with the notes a reader should see (in :data:`SECTIONS` order,
    after the fidelity's)."""

    field: str | None
    make: Callable[[PolicyView], tuple[Any, list[str]]]


def _storage(v: PolicyView) -> tuple[Storage, list[str]]:
    return storage(v.of("flows"), v.of("ios"), v.start, v.end), []


def _transport(v: PolicyView) -> tuple[Transport, list[str]]:
    return transport(v.of("transport")), []


def _controller(v: PolicyView) -> tuple[ControllerReport | None, list[str]]:
    control = v.meta.control.get(v.policy)
    return (controller(v.of("controller"), control, v.of("transport")) if control
            else None), []


def _lossless(v: PolicyView) -> tuple[Lossless | None, list[str]]:
    if not (info := v.meta.lossless):
        return None, []
    pauses = lossless(v.of("pauses"), info)
    return pauses, [*info.notes.get(v.policy, ()), *late_pauses(
        v.bottleneck, pauses, info.layouts.get(v.policy) == "fifo")]


def _program(v: PolicyView) -> tuple[None, list[str]]:
    return None, program_notes(v.workload if isinstance(v.workload, Program) else None)


def _tcp(v: PolicyView) -> tuple[Tcp | None, list[str]]:
    return (tcp(v.of("dctcp"), v.meta, v.start, v.end)
            if v.meta.tcp_control != "default" else None), []


def _queues(v: PolicyView) -> tuple[Queues | None, list[str]]:
    return queues(v.of("queue"), v.meta, v.policy, v.start, v.end), []


def _telemetry(v: PolicyView) -> tuple[Telemetry | None, list[str]]:
    return v.meta.telemetry.get(v.policy), []


def _lossy_links(v: PolicyView) -> tuple[dict[str, int], list[str]]:
    return v.meta.loss_drops.get(v.policy, {}), []  # drops on purpose


def _commands(v: PolicyView) -> tuple[tuple[Command, ...], list[str]]:
    commands = v.meta.commands.get(v.policy, ())
    return commands, command_notes(v.policy, commands)


def _delays(v: PolicyView) -> tuple[dict[str, LinkDelay] | None, list[str]]:
    rows = v.meta.delays.get(v.policy)
    return link_delays(rows) if rows else (None, [])


# every section, in the order their notes are read
def _jobs(v: PolicyView) -> tuple[Jobs | None, list[str]]:
    if not v.meta.jobs:
        return None, []
    jobs = jobs_report(v.meta, v.policy, v.of, v.bottleneck.port, v.start)
    missing = [j.name for j in v.meta.jobs if j.name not in jobs.each]
    return jobs, [f"job {name} ended no iteration in the time all the jobs ran: it has no "
                  "figures under this policy" for name in missing]


def _culprits(v: PolicyView) -> tuple[tuple[Culprit, ...] | None, list[str]]:
    """The job's slow phases, each blamed (labkit's own jobs: a program's ranks report
    no compute of theirs; one job: several share the blame)."""
    if v.meta.jobs or isinstance(v.workload, Program):
        return None, []
    found = culprits(v.of("collectives"), v.of("queue"), v.bottleneck.port, v.bottleneck.link)
    return found or None, []


def _reroutes(v: PolicyView) -> tuple[tuple[Reroute, ...] | None, list[str]]:
    """A routed fabric's answer to each link going down."""
    if v.meta.routing == "static":
        return None, []
    return reroutes(v.of("events"), v.of("routes"), v.start) or None, []


SECTIONS: tuple[Section, ...] = (
    Section("storage", _storage), Section("transport", _transport),
    Section("controller", _controller), Section("lossless", _lossless),
    Section(None, _program), Section("tcp", _tcp), Section("queues", _queues),
    Section("telemetry", _telemetry), Section("lossy_links", _lossy_links),
    Section("commands", _commands), Section("delays", _delays), Section("jobs", _jobs),
    Section("culprits", _culprits), Section("reroutes", _reroutes))
