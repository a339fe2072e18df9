"""One policy of one scenario, run for real: fabric up, lanes on, traffic, telemetry, down.

A policy (:func:`labkit.model.scenario_spec.policy`) decides whether storage competes with the
collectives, the layout of the router ports' queues, and which controller, if any,
moves the hosts' valves:

==================  ========  ==============================================
policy              storage   router ports
==================  ========  ==============================================
isolated            no        one FIFO per port
fifo                yes       one FIFO per port
priority            yes       vip / normal / low lanes (strict priority)
<controller>        yes       one FIFO per port, valves on every host
<layout>+<ctrl>     yes       the layout's ports, valves on every host
==================  ========  ==============================================

The lane classifier runs on every router port under every policy (under the
FIFO layouts it only counts), so lane counters are comparable across policies.
Agents run as processes in the hosts' namespaces (:mod:`labkit.traffic`);
everything created is in the run registry and torn down in ``finally``.
"""

from __future__ import annotations

import random
import resource
import socket
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from labkit.analysis import jobtiming, nccltests
from labkit.control import CONTROLLERS, Controller
from labkit.control.session import ControlSession
from labkit.kernel import bpf, cgroups, interrupts, loss, tc
from labkit.kernel.capture import CpuSampler, QueuePoller, WatchedPort
from labkit.kernel.dctcp import Dctcp, tcp_congestion_control
from labkit.kernel.ecnmark import ETH_HLEN, EcnMarks
from labkit.kernel.fabric import Fabric
from labkit.kernel.jobmark import JobMarks
from labkit.kernel.lanes import Classifier
from labkit.kernel.loss import LossyLinks
from labkit.kernel.pauser import Pauser
from labkit.kernel.pcap import PacketCapture, PcapRequest
from labkit.kernel.registry import Registry
from labkit.kernel.telemetry import (
    EventReader,
    LatencyProbe,
    QueueProbe,
    sample_every_for,
)
from labkit.model import lossless
from labkit.model.abi import EV_GAP, EV_SOJOURN, LANES, DctcpSample
from labkit.model.scenario_spec import Policy, ProgramSpec, Scenario
from labkit.model.summary import Command, Telemetry
from labkit.model.summary_meta import LosslessMeta, PortMeta, SummaryMeta
from labkit.model.tables import (
    BurstRow,
    CollectiveRow,
    CpuRow,
    DctcpRow,
    Decision,
    FlowRow,
    GapRow,
    HistRow,
    IoRow,
    LaneRow,
    LatencyRow,
    OpRow,
    PauseRow,
    PhaseRow,
    QueueRow,
    SojournRow,
    TransportRow,
)
from labkit.model.topo import Topology
from labkit.model.traffic.jobs import sent_bytes
from labkit.model.traffic.results import (
    NOT_COUNTED,
    CollectiveResult,
    CommandEnd,
    StorageResult,
)
from labkit.traffic.agents import (
    Agent,
    Engine,
    await_lines,
    await_ready,
    collective,
    finish_together,
    go,
    run_agents,
    start_collective,
    start_storage,
    start_time,
)
from labkit.traffic.collective import plan_for
from labkit.traffic.commands import Commands
from labkit.traffic.programs import Programs

STORAGE_WARMUP_S = 1.0


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
    control: dict | None = None  # valve totals and the controller's own figures
    ecn_marks: dict[str, dict[str, int]] = field(default_factory=dict)  # per marking port
    dctcp: list[DctcpRow] = field(default_factory=list)  # lk_dctcp's windows, as they ended
    commands: list[CommandEnd] = field(default_factory=list)  # the command entries, as they ended
    pauses: list[PauseRow] = field(default_factory=list)  # a lossless fabric's pauses
    pause_notes: list[str] = field(default_factory=list)  # what the pauser could not do
    program_ops: list[OpRow] = field(default_factory=list)  # a program's collectives
    bursts: list[BurstRow] = field(default_factory=list)  # a program's traffic, per host
    program: dict | None = None  # a program's ranks as they ended, its traffic, its source
    aborted: bool = False


class PolicyFabric:
    """A policy's fabric, everything but the traffic: nodes and links, the lane classifier
    on every router port, the probes on the bottleneck ports and the receivers' NICs, lossy
    links' droppers and, under a controller, the valves, feed and controller (not started).
    Use as a context manager; everything is torn down on exit, also after a failure while
    it was being built."""

    def __init__(self, sc: Scenario, topo: Topology, policy: Policy, registry: Registry,
                 telemetry: bool = True,
                 controllers: Mapping[str, type[Controller]] = CONTROLLERS,
                 classifier_object: Path | None = None):
        self.pol = policy
        if policy.controller and policy.controller not in controllers:
            raise ValueError(f"policy {policy.name}: no controller {policy.controller!r} "
                             f"(known: {', '.join(controllers)})")
        if policy.controller and not telemetry:
            raise ValueError(f"policy {policy.name} steers its valves from telemetry: keep it on")
        self.sc, self.topo, self.registry = sc, topo, registry
        self.telemetry, self.controllers = telemetry, controllers
        self.classifier_object = classifier_object
        self.fabric = Fabric(topo, registry, router_layout=self.pol.port_layout,
                             host_layout="fifo" if self.pol.controller is None else "held",
                             pausable=bool(sc.fabric.lossless),
                             cgroup=cgroups.fabric_path(registry.run_id, self.pol.name))
        # built by __enter__ (each None until then; queues and latency without telemetry,
        # control without a controller)
        self.lossy: LossyLinks | None = None
        self.dctcp: Dctcp | None = None  # transport.tcp: dctcp
        self.ecn_marks: EcnMarks | None = None  # transport.ecn_k_packets
        self.classifier: Classifier | None = None
        self.queues: QueueProbe | None = None
        self.latency: LatencyProbe | None = None
        self.control: ControlSession | None = None
        self.pauser: Pauser | None = None
        self.watched: list[WatchedPort] = []
        self.marks: JobMarks | None = None  # a program's job markers, one per rank host
        self.groups: dict[str, cgroups.Cgroup] = {}  # a program's cgroups, one per rank

    def __enter__(self) -> PolicyFabric:
        try:  # a signal held during the build arrives as the block ends: torn down too
            with interrupts.deferred("building the fabric"):
                self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        sc, topo, registry, fabric = self.sc, self.topo, self.registry, self.fabric
        fabric.start()
        self.lossy = loss.attach(topo, fabric, record=registry.add)
        self._transport()
        classifier = self.classifier = Classifier(sc.lanes, self.pol.port_layout,
                                                  record=registry.add,
                                                  path=self.classifier_object)
        if self.telemetry:
            queues = self.queues = QueueProbe(sample_every_for(len(sc.ranks)),
                                              record=registry.add)
            self.latency = LatencyProbe(classifier.shared.maps["lk_config"], queues,
                                        record=registry.add)
        self.watched = _attach_probes(topo, fabric, classifier, self.queues, self.latency,
                                      sc.ranks)
        pins = bpf.pin_dir(registry.run_id)
        registry.add_pin_dir(pins)
        classifier.pin(pins)
        if self.queues:
            self.queues.pin(pins)
        if sc.fabric.lossless:
            self.pauser = Pauser(fabric, lossless.queues(topo, sc.fabric.lossless,
                                                         self.pol.port_layout))
        if self.pol.controller:
            self.control = ControlSession(sc, topo, fabric, self.pol,
                                          self.controllers[self.pol.controller],
                                          classifier.shared.maps["lk_config"],
                                          registry.add)
        if sc.program:
            self._mark_program(sc.program)

    def _transport(self) -> None:
        """lk_dctcp for the TCP sockets of the hosts the scenario names (``transport``),
        and DCTCP's step marking at the bottleneck ports."""
        t, fabric = self.sc.transport, self.fabric
        if t.tcp == "dctcp":
            if fabric.group is None:
                raise RuntimeError("transport.tcp: dctcp picks lk_dctcp per socket from the "
                                   "fabric's cgroup, and this machine has no cgroup v2")
            self.dctcp = Dctcp(self.registry.add)
            self.dctcp.attach(fabric.group.path)
            for host in t.hosts or self.topo.hosts:
                self.dctcp.select(fabric.ns[host])
        elif t.tcp != "default":  # a kernel congestion control, each namespace's own
            for host in t.hosts or self.topo.hosts:
                fabric.ns[host].run(tcp_congestion_control, t.tcp)
        if t.ecn_k_packets:
            self.ecn_marks = EcnMarks(self.registry.add)
            for port in self.topo.bottleneck_ports():
                h = fabric.handle(port)
                self.ecn_marks.attach(h.ns, h.ifname, h.ifindex, t.ecn_k_packets,
                                      port.link.mtu)

    def _mark_program(self, spec: ProgramSpec) -> None:
        """A cgroup per rank of the user's program (``spec``), and on each rank host's NIC
        the job marker that knows the cgroup (writing the host's valve's phase, when
        held)."""
        base = cgroups.fabric_dir(self.registry.run_id, self.pol.name)
        self.marks = JobMarks(self.registry.add)
        for host in spec.ranks:
            group = self.groups[host] = cgroups.make(base / host, self.registry.add,
                                                     first=True)
            nic = self.fabric.nic(host)
            phase = self.control.valves.valves[host].obj.maps["lk_phase"] if self.control \
                else None
            far = [self.topo.host_ip(peer) for peer in spec.ranks
                   if peer != host and self.topo.crosses_bottleneck(host, peer)]
            self.marks.attach(host, nic.ns, nic.ifname, nic.ifindex, group, spec.dscp,
                              spec.quiet_ms, spec.quiet_ms, far, phase)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close what the fabric holds, newest first, then tear it down by the registry:
        every step runs whichever of them raised, and the error is raised after."""
        with interrupts.deferred("tearing the fabric down"), ExitStack() as steps:
            if self.dctcp is not None:  # last: once the fabric's sockets are gone
                steps.callback(self.dctcp.close)
            steps.callback(self.fabric.stop)
            for held in (self.lossy, self.ecn_marks, self.queues, self.classifier,
                         self.latency, self.control, self.pauser, self.marks):
                if held is not None:
                    steps.callback(held.close)


def run_policy(sc: Scenario, topo: Topology, policy: Policy, registry: Registry, workdir: Path,
               duration_s: float | None = None, progress: Callable[[int], None] | None = None,
               pcap: PcapRequest | None = None, pcap_dir: Path | None = None,
               telemetry: bool = True,
               controllers: Mapping[str, type[Controller]] = CONTROLLERS,
               classifier_object: Path | None = None) -> PolicyResult:
    """Build a fresh fabric, run the scenario's traffic under ``policy``, tear down.

    ``progress(n)`` is called as the n-th op completes on the first rank; ``pcap``
    names links to capture into ``pcap_dir`` (default ``workdir``). ``telemetry=False``
    leaves out the queue and latency probes and the queue poller (only to measure what
    they cost: such a run has no queue, lanes, sojourn or latency rows, and cannot steer a
    controller).
    ``controllers`` holds every controller a policy may name, built-in or the user's;
    ``classifier_object`` is the user's classifier (None: the built-in one).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    with PolicyFabric(sc, topo, policy, registry, telemetry, controllers,
                      classifier_object) as pf:
        return _run_traffic(pf, workdir, duration_s, progress, pcap, pcap_dir)


def _run_traffic(pf: PolicyFabric, workdir: Path, duration_s: float | None,
                 progress: Callable[[int], None] | None, pcap: PcapRequest | None,
                 pcap_dir: Path | None) -> PolicyResult:
    """The scenario's traffic on a built policy fabric, recorded."""
    sc, topo, fabric, pol, control = pf.sc, pf.topo, pf.fabric, pf.pol, pf.control
    result = PolicyResult(pol.name, pol.port_layout)
    commands = programs = None
    agents: list[Engine | Agent[StorageResult]] = []
    pauser = pf.pauser.start() if pf.pauser else None
    try:
        rng = random.Random(f"{sc.seed}/{pol.name}")
        if sc.program:  # the user's program is the collective workload: no labkit ranks
            ring: list[Engine] = []
            ring_ops = 0
            programs = Programs(sc.program, topo, fabric, pf.groups, workdir / "program",
                                control.phase_maps if control else None).launch()
        else:
            work, gap_ms, ring_ops = workload(sc)
            ring = start_collective(
                fabric, topo, sc.ranks, work, ring_ops, gap_ms, workdir, rng, duration_s,
                control.phase_maps if control else None, sc.control.dcqcn,
                # a capture shows packets as the fabric carries them: whole packets, so
                # tshark reads each one (and checks its ICRC)
                1 if pcap else sc.emulation.gso_packets,
                lossless.carries_collectives(sc.fabric, pol.port_layout), sc.emulation.engines)
        storage = start_storage(sc, topo, fabric, workdir) if pol.storage else []
        agents = [*ring, *storage]
        if pol.storage and sc.commands:  # the user's programs compete as storage does
            commands = Commands(sc.commands, topo, fabric, workdir / "commands").serve()
        await_ready(agents)
        capture = PacketCapture(fabric, topo, pcap, pcap_dir or workdir).start() if pcap \
            else None
        queues = pf.queues
        events = EventReader(queues).start() if queues else None
        try:
            _drive(result, ring, storage, pf.watched, duration_s, ring_ops, progress,
                   control, commands, programs)
        finally:
            if events and queues:
                _collect_telemetry(result, events.stop(), queues, pf.latency)
            if capture:
                capture.stop()
        _collect(result, [rank for engine in ring for rank in engine.ranks()], storage)
        if programs:
            assert pf.marks is not None, "a program's fabric marks its ranks' traffic"
            _collect_program(result, programs, pf.marks)
        if pf.lossy:
            result.loss_drops = pf.lossy.drops()
        if pf.ecn_marks:
            result.ecn_marks = pf.ecn_marks.counts()
        if pf.dctcp:
            result.dctcp = dctcp_rows(pf.dctcp.samples(), topo)
        if control:
            result.controller = control.valves.decisions
            result.control = control.summary_counters()
        return result
    finally:
        if programs:  # after a failure or an interrupt too: nothing of it outlives the run
            programs.stop()
        if commands:  # still running after a failure: stop them too
            result.commands += commands.stop()
        for a in agents:
            a.close()
        if pauser:
            result.pauses = pauser.stop()
            result.pause_notes = pauser.notes()


def dctcp_rows(samples: list[DctcpSample], topo: Topology) -> list[DctcpRow]:
    """lk_dctcp's windows as rows of the ``dctcp`` table, each with its sending host."""
    hosts = {topo.host_ip(h): h for h in topo.hosts}
    rows = []
    for w in samples:
        src, dst = (socket.inet_ntoa(a.to_bytes(4, sys.byteorder)) for a in (w.saddr, w.daddr))
        rows.append(DctcpRow(w.t_ns, hosts.get(src, src), f"{src}:{w.sport} > {dst}:{w.dport}",
                             w.alpha / 1024, w.cwnd, w.acked, w.marked))
    return rows


def _attach_probes(topo: Topology, fabric: Fabric, classifier: Classifier,
                   queues: QueueProbe | None, latency: LatencyProbe | None,
                   receivers: tuple[str, ...]) -> list[WatchedPort]:
    """The classifier on every router port, the queue probe on the bottleneck ports, the
    latency probe at the receivers' NICs (without probes: the classifier alone)."""
    if latency:
        for host in receivers:
            nic = fabric.nic(host)
            latency.attach(nic.ns, nic.ifname, nic.ifindex)
    watched = []
    bottleneck_ports = topo.bottleneck_ports() if queues else ()
    for port in topo.router_ports():
        h = fabric.handle(port)
        is_bottleneck = port in bottleneck_ports
        classifier.attach(h.ns, h.ifname, h.ifindex, watch=is_bottleneck)
        if is_bottleneck and queues:
            watched.append(WatchedPort(h.ns, h.ifname, h.ifindex,
                                       offered=partial(classifier.counters, h.key),
                                       queued=queues.watch(h.ns, h.ifindex, h.ifname)))
    return watched


def _collect_telemetry(result: PolicyResult, events: list[tuple], queues: QueueProbe,
                       latency: LatencyProbe | None) -> None:
    for t_ns, stamp, value, length, where, lane, kind, seq in events:
        if kind == EV_SOJOURN:
            result.sojourn.append(SojournRow(t_ns, queues.labels[where], LANES[lane], value,
                                             length, stamp, seq))
        elif kind == EV_GAP:
            result.gaps.append(GapRow(t_ns, queues.labels[where], value, length, stamp))
        else:
            result.latency.append(LatencyRow(t_ns, LANES[lane], value, length, stamp, seq))
    result.histograms = ([HistRow("sojourn", *row) for row in queues.histograms()] +
                         [HistRow("latency", "", *row)
                          for row in (latency.histograms() if latency else [])])
    result.events_lost, result.packets_sampled, result.unpaired = queues.delivery()


def _drive(result: PolicyResult, ring: list[Engine],
           storage: list[Agent[StorageResult]],
           watched: list[WatchedPort], duration_s: float | None, ring_ops: int,
           progress: Callable[[int], None] | None, control: ControlSession | None,
           commands: Commands | None = None, programs: Programs | None = None) -> None:
    """Start storage (and the user's commands), let it warm up, run the collective
    workload to the end (labkit's ranks, ``ring_ops`` ops or iterations each, or the
    user's program), stop storage; record telemetry meanwhile (and let the controller, if
    any, act on it)."""
    poller = QueuePoller(watched, listener=control.feed.push if control else None).start()
    cpu = CpuSampler().start()
    try:
        if control:
            control.start()
        t_go = start_time()
        before = _own_cpu_s(), time.monotonic()
        go(storage, t_go)
        if commands:
            commands.start()
        t_ranks = t_go + (int(STORAGE_WARMUP_S * 1e9) if storage or commands else 0)
        if programs:
            programs.release(t_ranks)
            programs.wait(duration_s or programs.spec.duration_s, progress)
        else:
            go(ring, t_ranks)

            def on_line(agent: Agent, line: str) -> None:
                if progress and agent is ring[0] and line.startswith("OP "):
                    progress(int(line.split()[1]) + 1)

            limit_s = duration_s + 30 if duration_s else max(120, 5 * ring_ops)
            finish_together(ring, limit_s, on_line)
        result.orchestrator_cpu_share = ((_own_cpu_s() - before[0])
                                         / max(time.monotonic() - before[1], 1e-3))
        result.storage_stopped_ns = time.monotonic_ns()  # connections close from here on
        for a in storage:
            a.send("STOP")
        await_lines(storage, "DONE", 10)
        if commands:
            result.commands = commands.stop()
    finally:
        if control:
            control.stop()
        poller.stop()
        result.queue, result.lanes = poller.queue_rows(result.port_layout), poller.lane_rows
        result.cpu = cpu.stop()


def _own_cpu_s() -> float:
    """CPU seconds this process (the orchestrator: pollers, readers, controller) used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _collect(result: PolicyResult, ranks: list[tuple[str, CollectiveResult]],
             storage: list[Agent[StorageResult]]) -> None:
    """The ranks' results (each with its host) and the storage agents' into ``result``."""
    for node, r in ranks:
        result.collectives.extend(
            CollectiveRow(o.op, o.rank, node, o.start_ns, o.end_ns, o.wrong, o.compute_ns,
                          o.exposed_ns, o.bubble_ns) for o in r.ops)
        result.phases.extend(PhaseRow(s.op, r.rank, node, s.phase, s.start_ns, s.end_ns)
                             for s in r.phases)
        c = r.counters or NOT_COUNTED  # a rank that never started counted nothing
        result.transport.append(TransportRow(
            node, r.rank, c.packets_sent, c.retransmits, c.timeouts, c.naks, c.out_of_order,
            c.bytes_received, c.cpu_user_s, c.cpu_sys_s, c.cnps))
        result.aborted |= r.aborted
    for host in storage:
        s = host.result()
        for entry, samples in s.samples.items():
            result.flows += [FlowRow(host.node, entry, t_ns, total) for t_ns, total in samples]
        result.ios += [IoRow(host.node, io.entry, io.t_ns, io.latency_ns, io.bytes)
                       for io in s.ios]
        result.storage_errors += [f"{host.node}: {e}" for t_ns, e in s.errors
                                  if t_ns < result.storage_stopped_ns]


def _collect_program(result: PolicyResult, programs: Programs, marks: JobMarks) -> None:
    """The program's iterations and ops, from the best source there is: as it printed
    them (:mod:`labkit.model.traffic.lines`), as labkit's hook or MPI shim timed them
    (``timing: auto``), else as its traffic showed them, when that fits the model
    (:mod:`labkit.analysis.jobtiming`: otherwise none, and why); its ranks and traffic."""
    spec = programs.spec
    programs.stop()  # nothing is left running; the cgroups' CPU is read
    per_host, result.bursts, lost = marks.traffic()
    source, unmeasured = "lines", None
    reported, ops, bad = programs.reported()
    if not (reported or ops) and spec.timing == "auto":
        source = "hook"
        reported, ops, bad = programs.reported(hooked=True)
    result.program_ops = [OpRow(rank, host, o.i, o.op, o.bytes, o.start_ns, o.end_ns)
                          for rank, host, o in ops]
    if not (reported or ops):
        source = "traffic"
        seen = jobtiming.ops_from_traffic(result.bursts,
                                          {h: r for r, h in enumerate(spec.ranks)},
                                          spec.iterations)
        result.program_ops, unmeasured = seen.ops, seen.unmeasured
    if not reported:
        result.program_ops = jobtiming.numbered(result.program_ops)
    iterations = reported or jobtiming.iterations_from_ops(result.program_ops)
    result.collectives = [
        CollectiveRow(op=it.i, rank=rank, host=host, start_ns=it.start_ns, end_ns=it.end_ns,
                      wrong=0, compute_ns=it.end_ns - it.start_ns - (it.exposed_ns or 0),
                      exposed_ns=it.exposed_ns or 0, bubble_ns=0)
        for rank, host, it in iterations]
    result.program = {
        "name": spec.name, "source": source, "warmup": spec.warmup, "bad_lines": bad,
        "bursts_lost": lost,
        "ranks": [{**row.to_json(), "packets": per_host[row.host][0],
                   "bytes": per_host[row.host][1]} for row in programs.rows()]}
    if unmeasured:
        result.program["unmeasured"] = unmeasured


def run_sweep(sc: Scenario, op: str, algo: str | Mapping[int, str], size_list: list[int],
              iterations: int, registry: Registry, workdir: Path,
              on_row: Callable[[nccltests.Row], None] | None = None,
              ranks: tuple[str, ...] | None = None,
              notes: list[str] | None = None) -> list[nccltests.Row]:
    """A sweep on one fabric built once (FIFO ports, no storage: the ``isolated``
    conditions): for each size, one agent per rank (``ranks``, default the scenario's, in
    that order) runs a warm-up op and ``iterations`` timed ops of ``algo`` (or of
    ``algo[size]``); ``on_row`` sees each size's row as it is done; what a lossless
    fabric's pauser could not do goes to ``notes``."""
    ranks, topo = ranks or sc.ranks, Topology(sc.fabric)
    link = nccltests.link_rate(topo, ranks)
    rng = random.Random(sc.seed)
    rows = []
    with Fabric(topo, registry, pausable=bool(sc.fabric.lossless),
                cgroup=cgroups.fabric_path(registry.run_id, "sweep")) as fabric:
        lossy = loss.attach(topo, fabric, record=registry.add)
        pauser = None
        try:
            if sc.fabric.lossless:
                pauser = Pauser(fabric, lossless.queues(topo, sc.fabric.lossless, "fifo"))
                pauser.start()
            for size in size_list:
                this = algo if isinstance(algo, str) else algo[size]
                procs = start_collective(fabric, topo, ranks,
                                         collective(op, this, size, sc.fabric.gpus_per_host),
                                         iterations + 1, 0.0, workdir / str(size), rng,
                                         gso_packets=sc.emulation.gso_packets,
                                         lossless=lossless.carries_collectives(sc.fabric,
                                                                               "fifo"),
                                         engines=sc.emulation.engines)
                try:
                    ops = run_agents(procs, iterations + 1)
                    resent = sum((r.counters or NOT_COUNTED).retransmits
                                 for a in procs for _, r in a.ranks())
                finally:
                    for a in procs:
                        a.close()
                rows.append(nccltests.measure(op, len(ranks), size, ops, link, resent, this))
                if on_row:
                    on_row(rows[-1])
        finally:
            if pauser:
                pauser.stop()
                if notes is not None:
                    notes += pauser.notes()
                pauser.close()
            lossy.close()
    return rows


def workload(sc: Scenario) -> tuple[dict, float, int]:
    """The agents' workload for the scenario, the compute time between its ops and how
    many ops or iterations they run."""
    if sc.job:
        return {"kind": "job", "job": sc.job.as_dict()}, 0.0, sc.job.iterations
    ar = sc.allreduce
    if ar is None:
        raise ValueError(f"scenario {sc.name}: a user's program is not run by labkit's agents")
    return (collective("all_reduce", ar.algo, ar.size_bytes, sc.fabric.gpus_per_host),
            ar.compute_ms, ar.iterations)


def bytes_per_iteration(sc: Scenario, topo: Topology) -> tuple[dict[str, int], dict[str, set]]:
    """Bytes every hop ("a->b") carries in one op or iteration, from the ranks' plans and
    the routes (one shortest path per pair), and which ranks send across each hop."""
    per_hop: dict[str, int] = {}
    senders: dict[str, set] = {}
    if sc.program:  # the user's program: what it sends is measured, not planned
        return per_hop, senders
    work, _, _ = workload(sc)
    ranks = sc.ranks
    for r in range(len(ranks)):
        plan = plan_for(work, len(ranks), r)
        for peer, nbytes in sent_bytes(plan):
            path = topo.path(ranks[r], ranks[peer])
            for a, b in zip(path, path[1:], strict=False):
                per_hop[f"{a}->{b}"] = per_hop.get(f"{a}->{b}", 0) + nbytes
                senders.setdefault(f"{a}->{b}", set()).add(r)
    return per_hop, senders


def tracepoint_unseen(lane_rows: list[LaneRow]) -> int:
    """Packets the classifier sent to the watched ports that the tracepoint programs did
    not see enqueued or dropped (the last row per port and lane; see bpf/queues.bpf.c)."""
    last = {(row.port, row.lane): row for row in lane_rows}
    return sum(r.offered_packets - r.enqueued_packets - r.dropped_packets
               for r in last.values())


def summary_meta(sc: Scenario, topo: Topology, run_id: str, results: list[PolicyResult]
                 ) -> SummaryMeta:
    """What :func:`labkit.analysis.metrics.summarize` needs besides the tables."""
    ranks = sc.ranks
    per_hop, senders = bytes_per_iteration(sc, topo)
    ports = {p.ifname: PortMeta(link=p.link.name, rate_mbps=p.link.rate_mbps, node=p.node,
                                burst_bytes=tc.burst_bytes(tc.bytes_per_s(p.link.rate_mbps),
                                                           p.link.mtu),
                                hop=f"{p.node}->{p.peer}",
                                senders=tuple(sorted(senders.get(f"{p.node}->{p.peer}", ()))),
                                frame_bytes=p.link.mtu + ETH_HLEN)
             for p in topo.bottleneck_ports()}
    ring_link = min(link.rate_mbps for a in ranks for b in ranks if a != b
                    for link in topo.links_on_path(a, b))
    return SummaryMeta(
        scenario=sc.name, run_id=run_id, scale_factor=sc.scale_factor,
        policies=tuple(r.policy for r in results),
        workload=sc.workload.kind,
        job=sc.job,
        size_bytes=sc.allreduce.size_bytes if sc.allreduce else None,
        bytes_per_iteration=per_hop,
        ranks=len(ranks), ring_link_mbps=ring_link, ports=ports,
        telemetry={r.policy: Telemetry(sample_every=sample_every_for(len(ranks)),
                                       events_lost=r.events_lost,
                                       packets_considered=r.packets_sampled,
                                       dequeues_unpaired=r.unpaired,
                                       tracepoint_unseen=tracepoint_unseen(r.lanes),
                                       orchestrator_cpu_share=r.orchestrator_cpu_share)
                   for r in results},
        loss_drops={r.policy: r.loss_drops for r in results},
        tcp_control=sc.transport.tcp, ecn_k_packets=sc.transport.ecn_k_packets,
        ecn_marks={r.policy: r.ecn_marks for r in results if r.ecn_marks},
        commands={r.policy: tuple(Command(**asdict(c)) for c in r.commands)  # the same fields
                  for r in results if r.commands},
        storage_errors={r.policy: r.storage_errors for r in results},
        program=({r.policy: r.program for r in results if r.program is not None}
                 if sc.program else None),
        warmup=sc.program.warmup if sc.program else 0,
        control={r.policy: r.control for r in results if r.control},
        lossless=LosslessMeta(
            lanes=tuple(sc.fabric.lossless),
            budget_us=lossless.REACTION_BUDGET_S * 1e6,
            packet_us=min(p.link.mtu * 8 / p.link.rate_mbps for p in topo.bottleneck_ports()),
            layouts={r.policy: r.port_layout for r in results},
            notes={r.policy: tuple(r.pause_notes) for r in results})
        if sc.fabric.lossless else None)
