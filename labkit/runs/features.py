"""A policy's stack, feature by feature: what the kernel does for one policy besides the
fabric itself.

A :class:`Feature` is one capability: it says whether a policy wants it
(:meth:`Feature.wanted`), attaches itself to a started fabric (:meth:`Feature.build`,
in the order of :data:`FEATURES`, each seeing the ones built before it), starts and
stops around the traffic, puts its figures into the policy's result
(:meth:`Feature.collect`) and closes. :class:`labkit.runs.experiment.PolicyFabric` is a
loop over them; a new capability is a class here (or in a module of its own) and one
line in :data:`FEATURES`.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import ClassVar, TypeVar

from labkit.control import Controller
from labkit.control.session import ControlSession
from labkit.kernel import bpf, cgroups, loss
from labkit.kernel.capture import WatchedPort
from labkit.kernel.dctcp import Dctcp, tcp_congestion_control
from labkit.kernel.ecnmark import EcnMarks
from labkit.kernel.fabric import Fabric
from labkit.kernel.jobmark import JobMarks
from labkit.kernel.lanes import Classifier
from labkit.kernel.pauser import Pauser
from labkit.kernel.registry import Registry
from labkit.kernel.telemetry import EventReader, LatencyProbe, QueueProbe, sample_every_for
from labkit.model import lossless
from labkit.model.abi import EV_GAP, EV_SOJOURN, LANES, DctcpSample
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import DctcpRow, GapRow, HistRow, LatencyRow, PauseRow, SojournRow
from labkit.model.topo import Port, Topology
from labkit.runs.result import PolicyResult


@dataclass
class Stack:
    """What every feature of one policy's stack is built with, and the features built so
    far (:meth:`get`)."""

    sc: Scenario
    topo: Topology
    policy: Policy
    registry: Registry
    fabric: Fabric
    telemetry: bool = True
    controllers: Mapping[str, type[Controller]] = field(default_factory=dict)
    classifier_object: Path | None = None  # the user's classifier (None: labkit's)
    built: list[Feature] = field(default_factory=list)

    def get(self, kind: type[F]) -> F | None:
        """The feature of this kind, if the policy has it."""
        return next((f for f in self.built if isinstance(f, kind)), None)

    def need(self, kind: type[F], by: str) -> F:
        """The feature of this kind, which ``by`` cannot do without."""
        if (found := self.get(kind)) is None:
            raise RuntimeError(f"{by} needs {kind.__name__}, which this policy has not built")
        return found


class Feature:
    """One capability of a policy's stack (see the module docstring)."""

    after_fabric: ClassVar[bool] = False  # closed once the fabric (and its sockets) is gone
    records_only: ClassVar[bool] = False  # does nothing to the traffic (a shell skips it)

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return True

    def build(self, stack: Stack) -> None:
        """Attach to ``stack.fabric`` (started), recording what is made in its registry."""

    def start(self) -> None:
        """The traffic is about to start."""

    def stop(self) -> None:
        """The traffic has ended (also after a failure)."""

    def collect(self, result: PolicyResult) -> None:
        """This feature's figures and rows into the policy's result."""

    def close(self) -> None:
        """Undo :meth:`build` (also after a failed build: what was made)."""


F = TypeVar("F", bound=Feature)


class LossyLinks(Feature):
    """Packet loss on purpose, on the links that ask for it (:mod:`labkit.kernel.loss`)."""

    links: loss.LossyLinks | None = None

    def build(self, stack: Stack) -> None:
        self.links = loss.attach(stack.topo, stack.fabric, record=stack.registry.add)

    def collect(self, result: PolicyResult) -> None:
        if self.links:
            result.loss_drops = self.links.drops()

    def close(self) -> None:
        if self.links:
            self.links.close()


class TcpControl(Feature):
    """``transport.tcp``: lk_dctcp for the TCP sockets of the hosts it names, chosen per
    socket from the fabric's cgroup, or a kernel congestion control in each host's
    namespace. lk_dctcp is unregistered once the fabric's sockets are gone."""

    after_fabric = True
    dctcp: Dctcp | None = None

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return sc.transport.tcp != "default"

    def build(self, stack: Stack) -> None:
        t, fabric = stack.sc.transport, stack.fabric
        self.topo = stack.topo
        hosts = t.hosts or stack.topo.hosts
        if t.tcp != "dctcp":
            for host in hosts:
                fabric.ns[host].run(tcp_congestion_control, t.tcp)
            return
        if fabric.group is None:
            raise RuntimeError("transport.tcp: dctcp picks lk_dctcp per socket from the "
                               "fabric's cgroup, and this machine has no cgroup v2")
        self.dctcp = Dctcp(stack.registry.add)
        self.dctcp.attach(fabric.group.path)
        for host in hosts:
            self.dctcp.select(fabric.ns[host])

    def collect(self, result: PolicyResult) -> None:
        if self.dctcp:
            result.dctcp = dctcp_rows(self.dctcp.samples(), self.topo)

    def close(self) -> None:
        if self.dctcp:
            self.dctcp.close()


class EcnMarking(Feature):
    """DCTCP's step marking at the bottleneck ports (``transport.ecn_k_packets``)."""

    marks: EcnMarks | None = None

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return bool(sc.transport.ecn_k_packets)

    def build(self, stack: Stack) -> None:
        k = stack.sc.transport.ecn_k_packets
        assert k, "wanted only with ecn_k_packets"
        self.marks = EcnMarks(stack.registry.add)
        for port in stack.topo.bottleneck_ports():
            h = stack.fabric.handle(port)
            self.marks.attach(h.ns, h.ifname, h.ifindex, k, port.link.mtu)

    def collect(self, result: PolicyResult) -> None:
        if self.marks:
            result.ecn_marks = self.marks.counts()

    def close(self) -> None:
        if self.marks:
            self.marks.close()


class Lanes(Feature):
    """The lane classifier on every router port (under the FIFO layouts it only counts),
    watching the bottleneck ports' lanes when the policy has telemetry; pinned."""

    classifier: Classifier | None = None

    def build(self, stack: Stack) -> None:
        self.classifier = Classifier(stack.sc.lanes, stack.policy.port_layout,
                                     record=stack.registry.add, path=stack.classifier_object)
        watch = watched_ports(stack.topo) if stack.telemetry else []
        for port in stack.topo.router_ports():
            h = stack.fabric.handle(port)
            self.classifier.attach(h.ns, h.ifname, h.ifindex, watch=port in watch)
        self.classifier.pin(pin_dir(stack))

    @property
    def config_map(self):
        """The classifier's ``lk_config``, which the probes and valves share."""
        assert self.classifier, "built"
        return self.classifier.shared.maps["lk_config"]

    def close(self) -> None:
        if self.classifier:
            self.classifier.close()


class Probes(Feature):
    """The queue probe on the bottleneck ports (per-lane counters, sojourn, dequeue gaps)
    and the latency probe at the receivers' NICs; their events read while the traffic
    runs."""

    records_only = True
    queues: QueueProbe | None = None
    latency: LatencyProbe | None = None
    reader: EventReader | None = None

    def __init__(self) -> None:
        self.watched: list[WatchedPort] = []
        self.events: list[tuple] = []

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return telemetry

    def build(self, stack: Stack) -> None:
        lanes = stack.need(Lanes, "the probes")
        assert lanes.classifier, "built"
        queues = self.queues = QueueProbe(sample_every_for(len(stack.sc.ranks)),
                                          record=stack.registry.add)
        latency = self.latency = LatencyProbe(lanes.config_map, queues,
                                              record=stack.registry.add)
        for host in stack.sc.ranks:
            nic = stack.fabric.nic(host)
            latency.attach(nic.ns, nic.ifname, nic.ifindex)
        for port in watched_ports(stack.topo):
            h = stack.fabric.handle(port)
            self.watched.append(WatchedPort(
                h.ns, h.ifname, h.ifindex, offered=partial(lanes.classifier.counters, h.key),
                queued=queues.watch(h.ns, h.ifindex, h.ifname)))
        queues.pin(pin_dir(stack))

    def start(self) -> None:
        assert self.queues, "built"
        self.reader = EventReader(self.queues).start()

    def stop(self) -> None:
        if self.reader:
            self.events, self.reader = self.reader.stop(), None

    def collect(self, result: PolicyResult) -> None:
        assert self.queues and self.latency, "built"
        labels = self.queues.labels
        for t_ns, stamp, value, length, where, lane, kind, seq in self.events:
            if kind == EV_SOJOURN:
                result.sojourn.append(SojournRow(t_ns, labels[where], LANES[lane], value,
                                                 length, stamp, seq))
            elif kind == EV_GAP:
                result.gaps.append(GapRow(t_ns, labels[where], value, length, stamp))
            else:
                result.latency.append(LatencyRow(t_ns, LANES[lane], value, length, stamp,
                                                 seq))
        result.histograms = ([HistRow("sojourn", *row) for row in self.queues.histograms()]
                             + [HistRow("latency", "", *row)
                                for row in self.latency.histograms()])
        result.events_lost, result.packets_sampled, result.unpaired = self.queues.delivery()

    def close(self) -> None:
        for probe in (self.latency, self.queues):
            if probe is not None:
                probe.close()


class Pausing(Feature):
    """A lossless fabric's pauses (:mod:`labkit.kernel.pauser`), from the traffic's start
    to its end."""

    pauser: Pauser | None = None
    started = False

    def __init__(self) -> None:
        self.rows: list[PauseRow] = []

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return bool(sc.fabric.lossless)

    def build(self, stack: Stack) -> None:
        self.pauser = Pauser(stack.fabric, lossless.queues(stack.topo, stack.sc.fabric.lossless,
                                                           stack.policy.port_layout))

    def start(self) -> None:
        assert self.pauser, "built"
        self.pauser.start()
        self.started = True

    def stop(self) -> None:
        if self.pauser and self.started:
            self.rows, self.started = self.pauser.stop(), False

    def notes(self) -> list[str]:
        """What the pauser could not do."""
        return self.pauser.notes() if self.pauser else []

    def collect(self, result: PolicyResult) -> None:
        result.pauses, result.pause_notes = self.rows, self.notes()

    def close(self) -> None:
        if self.pauser:
            self.pauser.close()


class Control(Feature):
    """A policy's controller over the hosts' valves, fed the fabric's telemetry
    (:class:`labkit.control.session.ControlSession`)."""

    session: ControlSession | None = None
    running = False

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return policy.controller is not None

    def build(self, stack: Stack) -> None:
        controller = stack.policy.controller
        assert controller is not None
        self.session = ControlSession(stack.sc, stack.topo, stack.fabric, stack.policy,
                                      stack.controllers[controller],
                                      stack.need(Lanes, "a controller").config_map,
                                      stack.registry.add)

    def start(self) -> None:
        assert self.session, "built"
        self.session.start()
        self.running = True

    def stop(self) -> None:
        if self.session and self.running:
            self.session.stop()
            self.running = False

    def collect(self, result: PolicyResult) -> None:
        if self.session:
            result.controller = self.session.valves.decisions
            result.control = self.session.summary_counters()

    def close(self) -> None:
        if self.session:
            self.session.close()


class JobMarking(Feature):
    """A cgroup per rank of the user's program, and on each rank host's NIC the job
    marker that knows the cgroup (writing the host's valve's phase, under a
    controller)."""

    marks: JobMarks | None = None

    def __init__(self) -> None:
        self.groups: dict[str, cgroups.Cgroup] = {}

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return sc.program is not None

    def build(self, stack: Stack) -> None:
        spec = stack.sc.program
        assert spec is not None
        base = cgroups.fabric_dir(stack.registry.run_id, stack.policy.name)
        control = stack.get(Control)
        marks = self.marks = JobMarks(stack.registry.add)
        for host in spec.ranks:
            group = self.groups[host] = cgroups.make(base / host, stack.registry.add,
                                                     first=True)
            nic = stack.fabric.nic(host)
            phase = control.session.valves.valves[host].obj.maps["lk_phase"] \
                if control and control.session else None
            far = [stack.topo.host_ip(peer) for peer in spec.ranks
                   if peer != host and stack.topo.crosses_bottleneck(host, peer)]
            marks.attach(host, nic.ns, nic.ifname, nic.ifindex, group, spec.dscp,
                         spec.quiet_ms, spec.quiet_ms, far, phase)

    def close(self) -> None:
        if self.marks:
            self.marks.close()


# the features a policy's stack may have, in the order they are built (each may use the
# ones before it) and started; closed in the reverse order
FEATURES: tuple[type[Feature], ...] = (LossyLinks, TcpControl, EcnMarking, Lanes, Probes,
                                       Pausing, Control, JobMarking)


def watched_ports(topo: Topology) -> list[Port]:
    """The bottleneck ports the probes watch: a router's (a host's own NIC has no lanes),
    in the routers' order."""
    bottlenecks = topo.bottleneck_ports()
    return [p for p in topo.router_ports() if p in bottlenecks]


def pin_dir(stack: Stack) -> Path:
    """The run's pin directory (recorded in its registry once)."""
    pins = bpf.pin_dir(stack.registry.run_id)
    stack.registry.add_pin_dir(pins)
    return pins


def dctcp_rows(samples: list[DctcpSample], topo: Topology) -> list[DctcpRow]:
    """lk_dctcp's windows as rows of the ``dctcp`` table, each with its sending host."""
    hosts = {topo.host_ip(h): h for h in topo.hosts}
    rows = []
    for w in samples:
        src, dst = (socket.inet_ntoa(a.to_bytes(4, sys.byteorder)) for a in (w.saddr, w.daddr))
        rows.append(DctcpRow(w.t_ns, hosts.get(src, src), f"{src}:{w.sport} > {dst}:{w.dport}",
                             w.alpha / 1024, w.cwnd, w.acked, w.marked))
    return rows
