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
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, fields, replace
from pathlib import Path

from labkit.analysis import jobtiming, nccltests
from labkit.control import CONTROLLERS, Controller
from labkit.kernel import cgroups, interrupts, tc
from labkit.kernel.capture import POLL_MS, CpuSampler, QueuePoller
from labkit.kernel.ecnmark import ETH_HLEN
from labkit.kernel.fabric import Fabric
from labkit.kernel.jobmark import JobMarks
from labkit.kernel.pcap import PacketCapture, PcapRequest
from labkit.kernel.registry import Registry
from labkit.kernel.telemetry import sample_every_for
from labkit.model import lossless
from labkit.model.scenario_spec import (
    AllReduceSpec,
    JobEntry,
    JobSpec,
    Policy,
    ProgramSpec,
    Scenario,
)
from labkit.model.summary import Command, ProgramRank, Telemetry
from labkit.model.summary_meta import (
    JobMeta,
    LosslessMeta,
    PortMeta,
    ProgramReport,
    SummaryMeta,
)
from labkit.model.tables import (
    CollectiveRow,
    FlowRow,
    IoRow,
    LaneRow,
    OpRow,
    PhaseRow,
    TransportRow,
)
from labkit.model.topo import Topology
from labkit.model.traffic.jobs import sent_bytes
from labkit.model.traffic.results import (
    NOT_COUNTED,
    CollectiveResult,
    StorageResult,
)
from labkit.runs.features import (
    FEATURES,
    Control,
    F,
    Feature,
    JobMarking,
    LossyLinks,
    Pausing,
    Probes,
    Stack,
)
from labkit.runs.result import PolicyResult
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
from labkit.traffic.programs import Programs, wait_all

# Storage (and the user's commands) start before the ranks, which start into the queues
# they built: once the watched ports' backlog has not grown for WARMUP_STEADY_S, no sooner
# than WARMUP_MIN_S and no later than STORAGE_WARMUP_S after storage started (always that
# long when no port is watched: nothing tells). A backlog "grows" past its peak by more than
# WARMUP_GROWTH of it and WARMUP_SLACK_B (the largest frame), so a full queue's jitter
# does not count.
WARMUP_MIN_S = 0.2
WARMUP_STEADY_S = 0.1
STORAGE_WARMUP_S = 1.0
WARMUP_GROWTH = 0.05
WARMUP_SLACK_B = 9000
SWEEP = Policy("sweep", "isolated")  # a sweep's fabric: FIFO ports, no storage


class PolicyFabric:
    """A policy's fabric, everything but the traffic: nodes and links, then each feature
    of :data:`labkit.runs.features.FEATURES` the scenario and policy want, in order (lossy
    links' droppers, TCP's congestion control and ECN marking, the lane classifier on
    every router port, the probes, a lossless fabric's pauser, a controller and its
    valves, a program's job markers), none started. Use as a context manager; everything
    is torn down on exit, also after a failure while it was being built."""

    def __init__(self, sc: Scenario, topo: Topology, policy: Policy, registry: Registry,
                 telemetry: bool = True,
                 controllers: Mapping[str, type[Controller]] = CONTROLLERS,
                 classifier_object: Path | None = None,
                 features: Sequence[type[Feature]] = FEATURES):
        if policy.controller and policy.controller not in controllers:
            raise ValueError(f"policy {policy.name}: no controller {policy.controller!r} "
                             f"(known: {', '.join(controllers)})")
        if policy.controller and not telemetry:
            raise ValueError(f"policy {policy.name} steers its valves from telemetry: keep it on")
        fabric = Fabric(topo, registry, router_layout=policy.port_layout,
                        host_layout="fifo" if policy.controller is None else "held",
                        pausable=bool(sc.fabric.lossless),
                        cgroup=cgroups.fabric_path(registry.run_id, policy.name),
                        spliced=frozenset(e.link for e in sc.events if e.change == "delay_ms"))
        self.stack = Stack(sc, topo, policy, registry, fabric, telemetry, controllers,
                           classifier_object)
        self.wanted = [f for f in features if f.wanted(sc, policy, telemetry)]

    @property
    def fabric(self) -> Fabric:
        return self.stack.fabric

    @property
    def topo(self) -> Topology:
        return self.stack.topo

    def get(self, kind: type[F]) -> F | None:
        """The feature of this kind, if this policy has it."""
        return self.stack.get(kind)

    def __enter__(self) -> PolicyFabric:
        """The features load (their BPF objects: the kernel's verifier) in a second thread
        while the fabric is built (Mininet's shells, netlink), then build on it in turn."""
        try:  # a signal held during the build arrives as the block ends: torn down too
            with interrupts.deferred("building the fabric"):
                with ThreadPoolExecutor(1, thread_name_prefix="labkit-load") as loader:
                    loading = loader.submit(self._load)
                    self.fabric.build()  # (an error: the loads end, then close())
                loading.result()  # a load's error, raised once the fabric is up
                for feature in self.stack.built:
                    feature.build(self.stack)
        except BaseException:
            self.close()
            raise
        return self

    def _load(self) -> None:
        for kind in self.wanted:
            feature = kind()
            self.stack.built.append(feature)  # closed even if its load or build fails
            feature.load(self.stack)

    def start(self, recording: bool = True) -> None:
        """The traffic starts: every feature, in order (not ``recording``: only those that
        act on the traffic, as in ``labkit shell``)."""
        for feature in self.stack.built:
            if recording or not feature.records_only:
                feature.start()

    def jobs_started(self, engines: Mapping[str, Sequence[Engine]]) -> None:
        """labkit's jobs have started (each job's engines): every feature is told."""
        for feature in self.stack.built:
            feature.jobs_started(engines)

    def op_done(self, job: str, op: int, compute_ns: int) -> None:
        """A job's op or iteration has completed: every feature is told, in order."""
        for feature in self.stack.built:
            feature.op_done(job, op, compute_ns)

    def stop(self) -> None:
        """The traffic has ended: every feature, newest first (each one, whichever
        raised; the error after)."""
        with ExitStack() as steps:
            for feature in self.stack.built:
                steps.callback(feature.stop)

    def collect(self, result: PolicyResult) -> None:
        for feature in self.stack.built:
            feature.collect(result)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the features, newest first, then tear the fabric down by the registry,
        then what must outlive it: every step runs whichever of them raised, and the error
        is raised after."""
        with interrupts.deferred("tearing the fabric down"), ExitStack() as steps:
            built = self.stack.built
            for feature in built:
                if feature.after_fabric:
                    steps.callback(feature.close)
            steps.callback(self.fabric.stop)
            for feature in built:
                if not feature.after_fabric:
                    steps.callback(feature.close)


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
    if policy.alone and sc.several:  # each job alone on a fabric of its own, in turn
        return merged(policy.name, [
            run_policy(sc.alone(job), topo, policy, registry, workdir / job.name, duration_s,
                       progress if i == 0 else None, pcap,
                       (pcap_dir or workdir) / job.name, telemetry, controllers,
                       classifier_object) for i, job in enumerate(sc.jobs)])
    with PolicyFabric(sc, topo, policy, registry, telemetry, controllers,
                      classifier_object) as pf:
        return _run_traffic(pf, workdir, duration_s, progress, pcap, pcap_dir)


def _run_traffic(pf: PolicyFabric, workdir: Path, duration_s: float | None,
                 progress: Callable[[int], None] | None, pcap: PcapRequest | None,
                 pcap_dir: Path | None) -> PolicyResult:
    """The scenario's traffic on a built policy fabric, recorded."""
    stack = pf.stack
    sc, topo, fabric, pol = stack.sc, stack.topo, stack.fabric, stack.policy
    control, marking = pf.get(Control), pf.get(JobMarking)
    phase_maps = control.session.phase_maps if control and control.session else None
    result = PolicyResult(pol.name, pol.port_layout)
    commands = None
    programs: list[Programs] = []  # the user's programs among the jobs
    by_job: dict[str, list[Engine]] = {}  # labkit's jobs' engines
    ring: list[Engine] = []  # ... all of them
    ring_ops = 0
    agents: list[Engine | Agent[StorageResult]] = []
    try:
        rng = random.Random(f"{sc.seed}/{pol.name}")
        for job in sc.jobs:  # all started held, released together; progress follows the first
            if isinstance(job, ProgramSpec):
                assert marking, "a program's fabric marks its ranks' traffic"
                programs.append(Programs(
                    job, topo, fabric, marking.groups,
                    workdir / job.name if sc.several else workdir / "program",
                    phase_maps).launch())
                continue
            work, gap_ms, ops = job_workload(job, sc.fabric.gpus_per_host)
            ring_ops = ring_ops or ops
            ring += by_job.setdefault(job.name, start_collective(
                fabric, topo, job.ranks, work, iterations=ops, compute_ms=gap_ms,
                workdir=workdir / job.name if sc.several else workdir, rng=rng,
                duration_s=duration_s, phase_maps=phase_maps, dcqcn=sc.control.dcqcn,
                # a capture shows packets as the fabric carries them: whole packets, so
                # tshark reads each one (and checks its ICRC)
                gso_packets=1 if pcap else sc.emulation.gso_packets,
                lossless=lossless.carries_collectives(sc.fabric, pol.port_layout),
                engines=sc.emulation.engines, dscp=job.dscp))
        storage = start_storage(sc, topo, fabric, workdir) if pol.storage else []
        agents = [*ring, *storage]
        if pol.storage and sc.commands:  # the user's programs compete as storage does
            commands = Commands(sc.commands, topo, fabric, workdir / "commands").serve()
        await_ready(agents)
        capture = PacketCapture(fabric, topo, pcap, pcap_dir or workdir).start() if pcap \
            else None
        try:
            _drive(result, pf, ring, storage, duration_s, ring_ops, progress, commands,
                   programs, by_job)
        finally:
            if capture:
                capture.stop()
        _collect(result, [rank for engine in ring for rank in engine.ranks()], storage)
        for program in programs:
            assert marking and marking.marks, "a program's fabric marks its ranks' traffic"
            _collect_program(result, program, marking.marks)
        pf.collect(result)
        return result
    finally:
        for program in programs:  # after a failure or an interrupt too: nothing outlives it
            program.stop()
        if commands:  # still running after a failure: stop them too
            result.commands += commands.stop()
        for a in agents:
            a.close()


def _drive(result: PolicyResult, pf: PolicyFabric, ring: list[Engine],
           storage: list[Agent[StorageResult]], duration_s: float | None, ring_ops: int,
           progress: Callable[[int], None] | None, commands: Commands | None = None,
           programs: Sequence[Programs] = (),
           by_job: Mapping[str, Sequence[Engine]] | None = None) -> None:
    """Start storage (and the user's commands), let it warm up, run the jobs to the end
    (labkit's ranks, ``ring_ops`` ops or iterations each for the first, and the user's
    programs), stop storage; record telemetry meanwhile, the policy's features started
    once the queue poller runs (a controller is fed from its first sample)."""
    probes, control = pf.get(Probes), pf.get(Control)
    feed = control.session.feed if control and control.session else None
    programs_first = isinstance(pf.stack.sc.jobs[0], ProgramSpec)
    poller = QueuePoller(probes.watched if probes else [],
                         listener=feed.push if feed else None,
                         job_names=probes.jobs if probes else {}).start()
    cpu = CpuSampler().start()
    try:
        pf.start()  # its controller fed from the poller's first sample on
        t_go = start_time()
        before = _own_cpu_s(), time.monotonic()
        go(storage, t_go)
        if commands:
            commands.start()
        if storage or commands:
            warm_up(poller, t_go)
            t_ranks = start_time()
        else:
            t_ranks = t_go
        if ring:  # labkit's jobs: ring[0] is the first job's unless a program is first
            go(ring, t_ranks)  # before the programs' release, which waits for that instant
        for program in programs:
            program.release(t_ranks)
        if ring:
            pf.jobs_started(by_job or {})
            leads = {engines[0]: job for job, engines in (by_job or {}).items()}

            def on_line(agent: Agent, line: str) -> None:
                if not line.startswith("OP "):
                    return
                _, op, *compute = line.split()
                if progress and agent is ring[0] and not programs_first:
                    progress(int(op) + 1)
                if leads and agent in leads and compute:
                    pf.op_done(leads[agent], int(op), int(compute[0]))

            most = max(j.iterations or 0 for j in pf.stack.sc.jobs)
            limit_s = duration_s + 30 if duration_s else max(120, 5 * most)
            finish_together(ring, limit_s, on_line)
        if programs:
            programs_wait(pf, programs, duration_s, progress if programs_first else None)
        result.orchestrator_cpu_share = ((_own_cpu_s() - before[0])
                                         / max(time.monotonic() - before[1], 1e-3))
        result.storage_stopped_ns = time.monotonic_ns()  # connections close from here on
        for a in storage:
            a.send("STOP")
        await_lines(storage, "DONE", 10)
        if commands:
            result.commands = commands.stop()
    finally:
        pf.stop()
        poller.stop()
        result.queue, result.lanes = poller.queue_rows(result.port_layout), poller.lane_rows
        result.job_lanes = poller.job_rows
        result.cpu = cpu.stop()


def warm_up(poller: QueuePoller, t_go: int) -> None:
    """Wait until the storage started at ``t_go`` has built its queues at the watched ports
    (see :data:`WARMUP_STEADY_S`): from the poller's samples, as they come."""
    latest = t_go + int(STORAGE_WARMUP_S * 1e9)
    earliest = t_go + int(WARMUP_MIN_S * 1e9)
    steady_ns = int(WARMUP_STEADY_S * 1e9)
    peak, grew = 0, t_go
    while poller.ports and (now := time.monotonic_ns()) < latest:
        t, backlog = poller.backlog()
        if backlog > peak * (1 + WARMUP_GROWTH) + WARMUP_SLACK_B:
            peak, grew = backlog, max(t, t_go)
        elif now >= earliest and t - grew >= steady_ns:
            return
        time.sleep(POLL_MS / 1e3)
    time.sleep(max(0, latest - time.monotonic_ns()) / 1e9)


def programs_wait(pf: PolicyFabric, programs: Sequence[Programs], duration_s: float | None,
                  progress: Callable[[int], None] | None) -> None:
    """Until every program has ended (the first's progress shown), the features told of
    each one's iterations as its first rank reports them (with several jobs)."""
    told = dict.fromkeys((p.spec.name for p in programs), 0)
    heard = dict.fromkeys((p.spec.name for p in programs), 0)  # lines, at the last look

    def look() -> None:
        for p in programs:
            lines = len(p.heard[0]) + len(p.heard[1])
            if lines == heard[p.spec.name]:
                continue  # nothing new: its iterations are as they were
            heard[p.spec.name] = lines
            ended = jobtiming.ended_so_far(*p.heard)
            for k, compute in ended[told[p.spec.name]:]:
                pf.op_done(p.spec.name, k, compute)
            told[p.spec.name] = len(ended)

    wait_all([(p, duration_s or p.spec.duration_s) for p in programs], progress,
             look if pf.stack.sc.several else None)


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
                          o.exposed_ns, o.bubble_ns, o.resent) for o in r.ops)
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
    """One program's iterations and ops, from the best source there is: as it printed
    them (:mod:`labkit.model.traffic.lines`), as labkit's hook or MPI shim timed them
    (``timing: auto``), else as its traffic showed them, when that fits the model
    (:mod:`labkit.analysis.jobtiming`: otherwise none, and why); its ranks and traffic,
    added to the result's (its hosts are its own)."""
    spec = programs.spec
    programs.stop()  # nothing is left running; the cgroups' CPU is read
    per_host, bursts, lost = marks.traffic(spec.ranks)
    result.bursts += bursts
    source, unmeasured = "lines", None
    reported, ops, bad = programs.reported()
    if not (reported or ops) and spec.timing == "auto":
        source = "hook"
        reported, ops, bad = programs.reported(hooked=True)
    program_ops = [OpRow(rank, host, o.i, o.op, o.bytes, o.start_ns, o.end_ns)
                   for rank, host, o in ops]
    if not (reported or ops):
        source = "traffic"
        seen = jobtiming.ops_from_traffic(bursts, {h: r for r, h in enumerate(spec.ranks)},
                                          spec.iterations)
        program_ops, unmeasured = seen.ops, seen.unmeasured
    if not reported:
        program_ops = jobtiming.numbered(program_ops)
    result.program_ops += program_ops
    iterations = reported or jobtiming.iterations_from_ops(program_ops)
    result.collectives += [
        CollectiveRow(op=it.i, rank=rank, host=host, start_ns=it.start_ns, end_ns=it.end_ns,
                      wrong=0, compute_ns=jobtiming.compute_ns(it),
                      exposed_ns=it.exposed_ns or 0, bubble_ns=0, resent=0)
        for rank, host, it in iterations]
    result.programs[spec.name] = ProgramReport(
        name=spec.name, source=source, warmup=spec.warmup, bad_lines=bad, bursts_lost=lost,
        ranks=tuple(ProgramRank(rank=row.rank, host=row.host, argv=row.argv, exit=row.exit,
                                stopped_by_labkit=row.stopped_by_labkit, lingered=row.lingered,
                                cpu_s=row.cpu_s, packets=per_host[row.host][0],
                                bytes=per_host[row.host][1]) for row in programs.rows()),
        unmeasured=unmeasured)


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
    with PolicyFabric(sc, topo, SWEEP, registry, telemetry=False,
                      features=(LossyLinks, Pausing)) as pf:
        pf.start()
        try:
            for size in size_list:
                this = algo if isinstance(algo, str) else algo[size]
                procs = start_collective(pf.fabric, topo, ranks,
                                         collective(op, this, size, sc.fabric.gpus_per_host),
                                         iterations=iterations + 1, compute_ms=0.0,
                                         workdir=workdir / str(size), rng=rng,
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
            pf.stop()
            if notes is not None and (pausing := pf.get(Pausing)):
                notes += pausing.notes()
    return rows


def workload(sc: Scenario) -> tuple[dict, float, int]:
    """The agents' workload for the scenario's one job (:func:`job_workload`)."""
    return job_workload(sc.workload, sc.fabric.gpus_per_host)


def job_workload(job: JobEntry, gpus_per_host: int) -> tuple[dict, float, int]:
    """The agents' workload for one of labkit's jobs, the compute time between its ops
    and how many ops or iterations they run."""
    if isinstance(job, JobSpec):
        return {"kind": "job", "job": job.as_dict()}, 0.0, job.iterations
    if not isinstance(job, AllReduceSpec):
        raise ValueError(f"job {job.name}: a user's program is not run by labkit's agents")
    return (collective("all_reduce", job.algo, job.size_bytes, gpus_per_host),
            job.compute_ms, job.iterations)


def _summed(dicts: Sequence[dict]) -> dict:
    """Dicts of counts (or of dicts of counts) added key by key; any other value: the last."""
    out: dict = {}
    for d in dicts:
        for k, x in d.items():
            if k in out and isinstance(x, int):
                out[k] += x
            elif k in out and isinstance(x, dict):
                out[k] = _summed([out[k], x])
            else:
                out[k] = x
    return out


def merged(policy: str, results: Sequence[PolicyResult]) -> PolicyResult:
    """One policy's result from runs of it one after another (``isolated`` with several
    jobs: each job alone): every table's rows in turn, counts summed, shares the most,
    notes and flags of each."""
    out = PolicyResult(policy, results[0].port_layout)
    for f in fields(PolicyResult):
        if f.name in ("policy", "port_layout"):
            continue
        values = [getattr(r, f.name) for r in results]
        if isinstance(values[0], list):
            value: object = [row for v in values for row in v]
        elif isinstance(values[0], bool):
            value = any(values)
        elif isinstance(values[0], int):
            value = max(values) if f.name.endswith("_ns") else sum(values)
        elif isinstance(values[0], float):
            value = max(values)
        elif isinstance(values[0], dict):  # per link or port: counts summed, else the last
            value = _summed(values)
        else:  # a program's or controller's report: isolated runs neither
            value = next((v for v in values if v is not None), None)
        setattr(out, f.name, value)
    return out


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
    """What :func:`labkit.analysis.summarize.summarize` needs besides the tables; with
    several jobs, the first job's workload at the top (as in a one-job run) and each
    job's in ``jobs``."""
    if sc.several:
        each = [(job, summary_meta(sc.alone(job), topo, run_id, results)) for job in sc.jobs]
        return replace(each[0][1], jobs=tuple(
            JobMeta(name=job.name, kind=job.kind, hosts=job.ranks, dscp=job.dscp,
                    gpus=len(job.ranks),
                    compute_ms=job.compute_ms if isinstance(job, AllReduceSpec) else 0.0,
                    meta=meta) for job, meta in each))
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
        routing=sc.fabric.routing,
        ecn_marks={r.policy: r.ecn_marks for r in results if r.ecn_marks},
        delays={r.policy: tuple(r.delays) for r in results if r.delays},
        commands={r.policy: tuple(Command(**asdict(c)) for c in r.commands)  # the same fields
                  for r in results if r.commands},
        storage_errors={r.policy: r.storage_errors for r in results},
        program=({r.policy: r.programs[sc.program.name] for r in results
                  if sc.program.name in r.programs} if sc.program else None),
        warmup=sc.program.warmup if sc.program else 0,
        control={r.policy: r.control for r in results if r.control},
        lossless=LosslessMeta(
            lanes=tuple(sc.fabric.lossless),
            budget_us=lossless.REACTION_BUDGET_S * 1e6,
            packet_us=min(p.link.mtu * 8 / p.link.rate_mbps for p in topo.bottleneck_ports()),
            layouts={r.policy: r.port_layout for r in results},
            notes={r.policy: tuple(r.pause_notes) for r in results})
        if sc.fabric.lossless else None)
