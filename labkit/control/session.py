"""The adaptive part of one policy's run: valves on every host's NIC and CE marking on
the bottleneck ports, the fabric telemetry feed, the job's phase maps, and the
controller — set up, started, stopped, and read back.
"""

from __future__ import annotations

import time

from labkit.control.base import Controller, Plant
from labkit.kernel import bpf, tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.feed import FabricFeed
from labkit.kernel.gates import Gates
from labkit.kernel.valve import LaneSetting, Valves
from labkit.model.abi import LANES
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.summary import MarksAndDrops
from labkit.model.summary_meta import ControlCounters, ValveTotals
from labkit.model.topo import Topology

NEVER_MS = 10_000.0  # a horizon no queue reaches: fabric ports mark, their qdisc drops


def _flows(sc: Scenario) -> list[tuple[str, str]]:
    """(source, destination) of the storage entries' data and of the command entries'
    traffic (from their host to each host their command names)."""
    out = []
    for st in sc.storage:
        out += [(st.server, c) if st.pattern == "read" else (c, st.server) for c in st.clients]
    for cmd in sc.commands:
        out += [(cmd.host, peer) for peer in cmd.peers]
    return out


def storage_senders(sc: Scenario, topo: Topology) -> dict[str, float]:
    """Hosts whose storage (or command) data meets the collectives on its way — across a
    bottleneck port, or out of a NIC that also carries a rank's traffic — each with its
    fair share in Mbit/s: a contended port's rate split evenly among the senders through
    it (a host crossing several takes its smallest share). These are the hosts a
    controller holds back (servers of reads, clients of writes)."""
    contended: dict[str, tuple[float, set[str]]] = {
        f"{p.node}->{p.peer}": (p.link.rate_mbps, set()) for p in topo.bottleneck_ports()}
    for rank in sc.ranks:
        nic = topo.ports[rank][0]
        contended[f"{rank}->{nic.peer}"] = (nic.link.rate_mbps, set())
    for src, dst in _flows(sc):
        path = topo.path(src, dst)
        for a, b in zip(path, path[1:], strict=False):
            if f"{a}->{b}" in contended:
                contended[f"{a}->{b}"][1].add(src)
    shares: dict[str, float] = {}
    for rate, hosts in contended.values():
        for host in hosts:
            shares[host] = min(shares.get(host, rate), rate / len(hosts))
    return dict(sorted(shares.items()))


class ControlSession:
    """Everything adaptive in one policy's run; :meth:`close` releases it all (also when
    setting it up failed half-way)."""

    def __init__(self, sc: Scenario, topo: Topology, pol: Policy, rules: bpf.Map,
                 record: bpf.Recorder | None = None):
        """Every host's and bottleneck port's valve, loaded: they need no fabric, so a run
        loads them while its fabric is built; :meth:`build` attaches them once it is."""
        self.sc, self.topo, self.pol, self.record = sc, topo, pol, record
        self.valves = Valves(rules, record)
        self.gates: Gates | None = None
        self.ports: dict[str, float] = {}  # bottleneck port label -> its Mbit/s
        spec = sc.control
        host_setting = LaneSetting(ce_ms=spec.ce_us / 1e3, horizon_ms=spec.horizon_ms)
        try:  # one after another: a valve loads in about 6 ms, while the fabric is built
            for host in topo.hosts:  # every host's NIC is held: its valve is its gate
                self.valves.open(host, host_setting, vip_class=tc.LANE_CLASS["vip"],
                                 lead_ms=spec.lead_ms)
            for port in topo.bottleneck_ports():
                self.valves.open(port.ifname, LaneSetting(port.link.rate_mbps,
                                                          spec.fabric_ce_us / 1e3, NEVER_MS),
                                 one_clock=pol.port_layout == "fifo")
                self.ports[port.ifname] = port.link.rate_mbps
        except BaseException:
            self.close()
            raise

    def build(self, fabric: Fabric, controller: type[Controller]) -> None:
        """The valves on ``fabric``'s ports, and the gates, the telemetry feed and
        ``controller`` over them (:meth:`close` undoes what was made if this fails)."""
        sc, topo, spec = self.sc, self.topo, self.sc.control
        for host in topo.hosts:
            nic = fabric.nic(host)
            self.valves.attach(host, nic.ns, nic.ifname, nic.ifindex)
        for port in topo.bottleneck_ports():
            h = fabric.handle(port)
            self.valves.attach(port.ifname, h.ns, h.ifname, h.ifindex)
        # each rank's agent inherits the fd of its host's phase map
        senders = storage_senders(sc, topo)
        self.gates = Gates(self.valves, fabric, list(senders), self.record)
        self.phase_maps = {host: self.valves.valves[host].obj.maps.lk_phase.fd
                           for host in sc.ranks}
        self.started_ns = self.stopped_ns = 0
        self.feed = FabricFeed(self.ports, self.pol.port_layout, spec.telemetry_delay_ms)
        self.controller = controller(Plant(
            self.valves, senders, list(sc.ranks), min(self.ports.values()), self.feed, spec))

    @property
    def _gates(self) -> Gates:
        """The gates (``gates`` is None only in a session whose build failed, being closed)."""
        if self.gates is None:
            raise RuntimeError("the control session was not built")
        return self.gates

    def start(self) -> None:
        self.started_ns = time.monotonic_ns()
        self._gates.start()
        self.controller.start()

    def stop(self) -> None:
        self.stopped_ns = time.monotonic_ns()
        try:
            self.controller.stop()
        finally:
            self._gates.stop()

    def summary_counters(self) -> ControlCounters:
        """Valve totals per lane: what the hosts' valves passed (mean Mbit/s while the
        controller ran), marked and dropped, and the bottleneck ports' CE marks."""
        counters = self.valves.counters()
        seconds = max(self.stopped_ns - self.started_ns, 1) / 1e9
        hosts = {name: per_lane for name, per_lane in counters.items()
                 if name not in self.ports}
        totals = {lane: ValveTotals(
            mbps=sum(h[lane].bytes for h in hosts.values()) * 8 / seconds / 1e6,
            ce_marked=sum(int(h[lane].ce_marked) for h in hosts.values()),
            dropped=sum(int(h[lane].dropped) for h in hosts.values())) for lane in LANES}
        by_valve = {name: {lane: MarksAndDrops(ce_marked=int(c.ce_marked),
                                               dropped=int(c.dropped))
                           for lane, c in per_lane.items() if c.ce_marked or c.dropped}
                    for name, per_lane in hosts.items()}
        return ControlCounters(
            host_valves=totals, by_valve={k: v for k, v in by_valve.items() if v},
            port_ce_marks={port: {lane: int(counters[port][lane].ce_marked) for lane in LANES}
                           for port in self.ports},
            prediction_error_ms=self.controller.prediction_error_ms,
            wakes=self._gates.wakes, ceiling_changes=self._gates.ceiling_changes,
            senders=self.controller.plant.senders)

    def close(self) -> None:
        try:
            if self.gates:
                self.gates.close()
        finally:
            self.valves.close()
