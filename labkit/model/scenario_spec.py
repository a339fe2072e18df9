"""A scenario as frozen dataclasses: :class:`Scenario` and its parts (lane rules, the
traffic's entries, the policies, control and emulation knobs), with the names and defaults
they carry.

Plain data: nothing here reads a file or checks a value (:func:`policy` takes a policy's
name apart, nothing more). :mod:`labkit.model.scenario` validates a YAML file into these
types and re-exports every one of them, so ``from labkit.model.scenario import Scenario``
works as it always has; a module that only reads a scenario imports them from here. The
fabric's types are :mod:`labkit.model.fabric_spec`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from labkit.model.fabric_spec import FabricSpec

LAYOUTS = ("isolated", "fifo", "priority")  # what the router ports do (and whether storage runs)
# with several jobs (docs/jobs.md): all of them without storage; every job's collectives
# vip in one lane (priority's ports); the most GPU-intense job's alone, learned as they
# run; each job a share of the port by its weight; fair's lane, their iterations shifted
# in time so that their communication does not meet at the bottleneck
JOB_LAYOUTS = ("together", "fair", "job-priority", "job-weights", "interleave")
SHARED_LAYOUTS = ("together", "job-priority", "job-weights", "interleave")  # need 2+ jobs
CONTROLLERS = ("reactive", "proactive", "state-aware")  # labkit.control
POLICIES = LAYOUTS + JOB_LAYOUTS + CONTROLLERS  # plus "<layout>+<controller>": "priority+reactive"
ROCEV2_PORT = 4791  # RoCEv2's UDP port: what a lane rule's `roce` matches
NETWORK_CONTROL = 48  # DSCP CS6: a routed fabric's BGP and BFD packets, as FRR marks them


@dataclass(frozen=True)
class Policy:
    """A policy name taken apart: the router ports' layout and the controller, if any.
    A controller alone runs over FIFO ports (``reactive`` = ``fifo+reactive``)."""

    name: str
    layout: str
    controller: str | None = None

    @property
    def storage(self) -> bool:
        return self.layout not in ("isolated", "together")

    @property
    def port_layout(self) -> str:
        """The router ports' queue layout (:mod:`labkit.kernel.tc`): lanes, weights or fifo."""
        if self.layout == "job-weights":
            return "weights"
        return "lanes" if self.layout in ("priority", "fair", "job-priority", "interleave") \
            else "fifo"

    @property
    def alone(self) -> bool:
        """Each job runs alone, one after another (``isolated``: the jobs' baselines)."""
        return self.layout == "isolated"


def policy(name: str, controllers: Sequence[str] = ()) -> Policy:
    """The :class:`Policy` called ``name``, where ``controllers`` names controllers besides
    the built-in ones; ValueError says what is wrong with it."""
    known = (*CONTROLLERS, *controllers)
    layout, _, controller = name.rpartition("+") if "+" in name else (name, "", "")
    if not controller and name in known:
        layout, controller = "fifo", name
    if layout not in LAYOUTS + JOB_LAYOUTS:
        raise ValueError(f"unknown policy {name!r} (known: "
                         f"{', '.join(LAYOUTS + JOB_LAYOUTS + known)}, "
                         "or <fifo|priority>+<controller>)")
    if controller and controller not in known:
        raise ValueError(f"unknown controller {controller!r} in {name!r} "
                         f"(known: {', '.join(known)})")
    if controller and layout in ("isolated", "together"):
        raise ValueError(f"{name!r}: without storage there is nothing to control")
    return Policy(name, layout, controller or None)


@dataclass(frozen=True)
class ControlSpec:
    """Knobs of the adaptive policies (docs/control.md)."""

    target_us: float = 1000.0  # reactive: the vip lane's queueing delay to hold
    interval_ms: float = 10.0  # how often a controller decides
    telemetry_delay_ms: float = 5.0  # age of fabric telemetry when a controller sees it
    relay_delay_ms: float = 2.0  # state-aware: job phase to the storage hosts' valves
    lead_ms: float = 5.0  # proactive and state-aware: start holding storage this early
    busy_share: float = 0.005  # each storage sender's share of its fair share while collectives run
    idle_share: float = 0.98  # ... and at most, when they leave it idle (below 1: no queue)
    ce_us: float = 500.0  # host gates mark ECN-capable packets this far behind their rate
    horizon_ms: float = 50.0  # ... and refuse a packet that would leave them further behind
    fabric_ce_us: float = 1000.0  # bottleneck ports mark CE past this queueing delay
    dcqcn: bool = False  # collective senders mark ECT and react to CNPs (labkit.traffic.rc)
    # the scenario's own controllers: (name, "file.py:Class") pairs, the file's path
    # resolved against the scenario's directory; a policy may name them like the built-in
    # ones (docs/control.md, "Your own controller")
    controllers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EmulationSpec:
    """How labkit emulates, not what: ``gso_packets`` RoCE packets of a rank's message
    travel the fabric as one GSO run (labkit.traffic.hotpath). 1 keeps every packet on its
    own; more costs the machine less per packet (a bigger fabric fits) but a full FIFO
    then drops a run whole (docs/scenarios.md has the measurements). ``rate_factor`` runs
    every link at its rate times the factor, compute times and the scale factor divided by
    it: the same experiment, faster or slower (labkit.analysis.calibration.scaled); ``auto`` takes
    the factor the newest ``labkit calibrate`` of this scenario on this machine found.
    ``engines`` says how labkit's ranks are grouped into processes (labkit.traffic.collective):
    ``leaf``, one engine for the GPU hosts behind each leaf (each rank still sends from its
    own namespace and NIC), or ``rank``, one process per rank."""

    gso_packets: int = 1
    rate_factor: float | str = 1.0
    engines: str = "leaf"


ENGINES = ("leaf", "rank")  # emulation.engines
TCP_CONTROLS = ("default", "dctcp", "reno")  # transport.tcp
DEFAULT_K_PACKETS = 20  # DCTCP's K at 1-10 Gbit/s (Alizadeh et al.): a port's marking step


@dataclass(frozen=True)
class TransportSpec:
    """How the fabric's TCP senders control congestion. ``tcp: dctcp`` runs lk_dctcp
    (labkit.kernel.dctcp, DCTCP in eBPF) for every TCP socket of ``hosts`` (None: every
    host; list both ends of a flow, as DCTCP's receivers echo each CE mark). With
    ``ecn_k_packets`` (DCTCP's K; 20 under dctcp unless set) the bottleneck ports mark
    each ECN-capable packet CE once that many packets are queued (labkit.kernel.ecnmark),
    for whatever reacts to ECN: lk_dctcp, the hosts' own TCP (labkit's namespaces
    negotiate ECN), RoCE ranks under DCQCN. ``tcp: reno`` makes the kernel's Reno the
    ``hosts``' own (the DCTCP paper's TCP; a setting of each namespace), ``tcp: default``
    keeps each namespace's own congestion control (BBR here)."""

    tcp: str = "default"
    hosts: tuple[str, ...] | None = None
    ecn_k_packets: int | None = None


AUTO = "auto"  # a value labkit chooses: algo (labkit tune), rate_factor (labkit calibrate)


@dataclass(frozen=True)
class LaneRule:
    """A classifier rule: every field that is set must match (ports 0 = any)."""

    lane: str
    proto: str | None = None  # "tcp", "udp" or None
    sport: int = 0
    dport: int = 0
    port: int = 0
    dscp: int | None = None
    roce: bool = False  # UDP to 4791 carrying a RoCEv2 BTH
    job: str | None = None  # a job's packets: the parser sets ``dscp`` to the job's


@dataclass(frozen=True)
class AllReduceSpec:
    ranks: tuple[str, ...]
    size_bytes: int
    iterations: int
    algo: str = "ring"
    compute_ms: float = 0.0
    kind: str = "allreduce"
    name: str = "allreduce"  # unique among the scenario's jobs
    dscp: int = 0  # every packet of its ranks carries it (a job's own, with several jobs)


@dataclass(frozen=True)
class JobSpec:
    """A training job (labkit.model.traffic.jobs): its parallelism and that kind's sizes."""

    parallelism: str
    ranks: tuple[str, ...]
    iterations: int
    params: tuple[tuple[str, Any], ...]  # sorted (key, value) pairs, frozen
    name: str = "job"  # unique among the scenario's jobs
    dscp: int = 0  # every packet of its ranks carries it (a job's own, with several jobs)

    kind = "job"  # a class attribute, not a field: the scenario's record stays as it was

    def as_dict(self) -> dict:
        return {"parallelism": self.parallelism, **dict(self.params)}


@dataclass(frozen=True)
class Arrival:
    """When a storage client issues I/O: ``constant`` keeps its queue depth in flight;
    ``on_off`` does so only in the first ``on_ms`` of every ``on_ms + off_ms`` (all
    clients in step, from ``phase_ms``); ``poisson`` issues I/Os at exponential gaps."""

    process: str = "constant"
    on_ms: float = 0.0
    off_ms: float = 0.0
    phase_ms: float = 0.0


@dataclass(frozen=True)
class StorageSpec:
    server: str
    clients: tuple[str, ...]
    name: str = "dataset"  # unique per scenario: labels the entry's flows and I/Os
    mix: str = "dataset"
    pattern: str = "read"  # read: server -> clients; write: clients -> server
    offered_load: float = 1.2  # x the first bottleneck's rate, summed over all flows
    port: int = 4420
    queues: int = 1  # NVMe/TCP I/O queues per client, one TCP connection each
    io_bytes: int = 128 * 1024
    queue_depth: int = 4  # commands in flight per queue
    arrival: Arrival = Arrival()
    kind: str = "storage"


HOST_REF = re.compile(r"\{([A-Za-z0-9_.-]+)\}")  # "{g1}" in a command: g1's address


@dataclass(frozen=True)
class CommandSpec:
    """A program of the user's own run in a host beside the storage traffic (iperf3, a
    data loader...): ``run`` and ``serve`` are argv lists whose ``{host}`` references
    become that host's address when the program starts. ``serve`` (a server the command
    talks to) starts on ``serve_host`` before the traffic does."""

    name: str
    host: str
    run: tuple[str, ...]
    serve_host: str | None = None
    serve: tuple[str, ...] = ()
    kind: str = "command"
    key: str = field(default="", compare=False)  # where in the file: "traffic[3]"

    @property
    def peers(self) -> tuple[str, ...]:
        """The hosts ``run`` names: where its traffic goes, as far as labkit can tell."""
        return tuple(dict.fromkeys(r for arg in self.run for r in HOST_REF.findall(arg)))


# a program's per-rank templates in ``run`` (besides {host} addresses), as torchrun's
# environment names them (docs/programs.md)
RANK_TEMPLATES = ("python", "rank", "world_size", "local_rank", "local_world_size",
                  "master_addr", "master_port", "ifname", "iterations")
# who starts the ranks: labkit, one process per rank with torchrun's environment; or Open
# MPI's mpirun, on the first rank's host, whose daemons labkit starts in the other hosts
LAUNCHERS = ("labkit", "mpirun")
# what mpirun's one command line cannot hold: it is the same for every rank
PER_RANK_TEMPLATES = ("rank", "local_rank", "local_world_size", "ifname")
DEFAULT_PYTHON = "/usr/bin/python3"  # Debian's: `make torch` installs python3-torch for it
# how labkit times a job that prints none of its own lines: its collectives from outside
# its code (PyTorch's through a start-up hook, MPI's through a PMPI shim), or from its
# traffic alone (docs/programs.md)
TIMINGS = ("auto", "traffic")
JOB_DSCP = 26  # the DSCP a program's packets carry (AF31, a common RoCE traffic class)


@dataclass(frozen=True)
class ProgramSpec:
    """The user's own program as the collective workload (``kind: program``): one process
    per rank, each in its rank's host with the environment torchrun gives (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, GLOO_SOCKET_IFNAME, ...; labkit.traffic.programs).
    ``run`` is an argv whose {host} and per-rank references (:data:`RANK_TEMPLATES`) are
    filled in per rank; it runs in ``cwd`` (the scenario's directory). Every packet its
    processes send carries ``dscp``, which the vip lane's first rule matches; its traffic
    falls into bursts separated by ``quiet_ms`` without a packet."""

    name: str
    ranks: tuple[str, ...]
    run: tuple[str, ...]
    cwd: str
    python: str = DEFAULT_PYTHON  # what {python} in run becomes: a path, or a venv's directory
    iterations: int | None = None  # what the program will report (progress, {iterations})
    warmup: int = 1  # first iterations left out of the statistics (connections, buckets)
    env: tuple[tuple[str, str], ...] = ()  # added to (and over) the ranks' environment
    master_port: int = 29500
    dscp: int = JOB_DSCP  # the parser gives 0 when the file names none: labkit's choice
    quiet_ms: float = 10.0
    duration_s: float | None = None  # stop the ranks after this long (None: when they exit)
    imports: tuple[str, ...] = ()  # modules the interpreter must import (checked first)
    launcher: str = "labkit"  # or "mpirun" (:data:`LAUNCHERS`)
    timing: str = "auto"  # or "traffic" (:data:`TIMINGS`): what times an unmodified job
    # stuck when rank 0 reports nothing for this long (None: labkit's default, STALL_S)
    stall_s: float | None = None
    kind: str = "program"
    key: str = field(default="", compare=False)  # where in the file: "traffic[0]"


@dataclass(frozen=True)
class KindEntry:
    """A traffic entry of one of the scenario's own kinds, as written, until a run loads
    the kind's class and expands it into command entries."""

    key: str  # where in the file: "traffic[3]"
    kind: str
    entry: dict  # its keys besides ``kind``: the class's to check


EVENT_CHANGES = ("down", "rate_mbps", "loss_percent", "delay_ms")  # what a link's event does
HOST_CHANGES = ("slow",)  # what a host's event does: its ranks compute this many times longer


@dataclass(frozen=True)
class EventSpec:
    """A fault on the scenario's timeline (``events``): ``at_s`` seconds after a policy's
    traffic starts, its ``link`` (the link's name, "a-b") goes down, runs at another rate,
    loses packets or takes another propagation delay (``change``, one of
    :data:`EVENT_CHANGES`, to ``value``: 100 for down), or its ``host``'s ranks compute
    ``value`` times as long (``change`` "slow": a straggler; ``link`` is then empty),
    for ``for_s`` seconds (None: until the run ends), again every ``every_s`` (None:
    once)."""

    at_s: float
    link: str
    change: str
    value: float
    for_s: float | None = None
    every_s: float | None = None
    host: str | None = None

    @property
    def target(self) -> str:
        """What it changes: the link's name, or the host's."""
        return self.host or self.link


JobEntry = AllReduceSpec | JobSpec | ProgramSpec  # a collective workload: one job of the scenario

# where the one-job record kept its workload: the key before which each was written
_ONE_JOB_KEYS = {"allreduce": "storage", "job": "control", "program": "events"}


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    scale_factor: float
    seed: int
    fabric: FabricSpec
    lanes: tuple[LaneRule, ...]
    jobs: tuple[JobEntry, ...]  # the collective workloads, in the file's order (at least one)
    storage: tuple[StorageSpec, ...]
    policies: tuple[str, ...]
    description: str = ""
    sha256: str = field(default="", compare=False)
    control: ControlSpec = ControlSpec()
    emulation: EmulationSpec = EmulationSpec()
    transport: TransportSpec = TransportSpec()
    commands: tuple[CommandSpec, ...] = ()
    # the user's own traffic kinds: (name, "file.py:Class") pairs, loaded like controllers
    # when a run starts (never while parsing), which then expands their ``kind_entries``
    # into ``commands`` (see labkit.model.scenario.with_user_kinds)
    kinds: tuple[tuple[str, str], ...] = ()
    kind_entries: tuple[KindEntry, ...] = ()
    # the user's own classifier (lanes.program: a .bpf.c or .bpf.o, absolute path) in
    # place of bpf/classifier.bpf.c; None: the built-in one
    classifier: str | None = None
    events: tuple[EventSpec, ...] = ()  # faults on its timeline

    def to_dict(self) -> dict[str, Any]:
        """The scenario as recorded in a run's manifest: a one-job scenario as before
        several jobs were possible (its job under ``allreduce``, ``job`` or ``program``),
        several jobs under ``jobs``; ``kind_entries`` and ``events`` only while there are
        some."""
        doc = asdict(self)
        jobs = doc.pop("jobs")
        if self.several:
            doc["jobs"] = jobs
        else:  # each of the three keys where it always was, the one job's filled in, and
            # the keys several jobs brought only where they say something
            one = jobs[0]
            if not isinstance(self.jobs[0], ProgramSpec):
                for key, default in (("name", type(self.jobs[0]).name), ("dscp", 0)):
                    if one[key] == default:
                        del one[key]
            for rule in doc["lanes"]:
                if rule["job"] is None:
                    del rule["job"]
            recorded: dict[str, Any] = {}
            for key, value in doc.items():
                for job_key, before in _ONE_JOB_KEYS.items():
                    if key == before:
                        recorded[job_key] = one if self.jobs[0].kind == job_key else None
                recorded[key] = value
            doc = recorded
        for event in doc["events"]:  # a link's event recorded as before hosts had any
            if event["host"] is None:
                del event["host"]
        for job in (doc.get("program"), *doc.get("jobs", ())):  # and a program as before
            if isinstance(job, dict) and job.get("kind") == "program" and \
                    job["stall_s"] is None:
                del job["stall_s"]
        for key in ("kind_entries", "events"):
            if not doc[key]:
                del doc[key]
        defaults = asdict(TransportSpec())  # recorded only as far as a scenario sets it
        doc["transport"] = {k: v for k, v in doc["transport"].items() if v != defaults[k]}
        if not doc["transport"]:
            del doc["transport"]
        return doc

    @property
    def several(self) -> bool:
        """Whether several jobs share the fabric (docs/jobs.md)."""
        return len(self.jobs) > 1

    def _only(self, kind: type) -> Any:
        return self.jobs[0] if len(self.jobs) == 1 and isinstance(self.jobs[0], kind) else None

    @property
    def allreduce(self) -> AllReduceSpec | None:
        """The scenario's All-Reduce, when it is its only job."""
        return self._only(AllReduceSpec)

    @property
    def job(self) -> JobSpec | None:
        """The scenario's training job, when it is its only job."""
        return self._only(JobSpec)

    @property
    def program(self) -> ProgramSpec | None:
        """The user's program, when it is the scenario's only job."""
        return self._only(ProgramSpec)

    @property
    def programs(self) -> tuple[ProgramSpec, ...]:
        """The user's programs among the jobs (alone, or beside others)."""
        return tuple(j for j in self.jobs if isinstance(j, ProgramSpec))

    @property
    def workload(self) -> JobEntry:
        """The collective workload: labkit's All-Reduce or job, or the user's program,
        when the scenario has one job (several: :attr:`jobs` and :meth:`alone`)."""
        if self.several:
            raise ValueError(f"scenario {self.name!r} has {len(self.jobs)} jobs: each is in "
                             "`jobs`")
        return self.jobs[0]

    @property
    def ranks(self) -> tuple[str, ...]:
        """The GPU hosts of the collective workload (of every job, in their order)."""
        return tuple(dict.fromkeys(h for job in self.jobs for h in job.ranks))

    @property
    def iterations(self) -> int | None:
        """Ops or iterations of the workload, or of the first job (a run's progress
        follows it); None: a program that does not say."""
        return self.jobs[0].iterations

    def alone(self, job: JobEntry) -> Scenario:
        """This scenario with ``job`` as its only job: the job alone on the same fabric."""
        return replace(self, jobs=(job,))
