"""The queue and latency probes as a feature of a policy's stack."""

from __future__ import annotations

from functools import partial

from labkit.kernel.capture import WatchedPort
from labkit.kernel.telemetry import EventReader, LatencyProbe, QueueProbe, sample_every_for
from labkit.model.abi import EV_GAP, EV_SOJOURN, LANES
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import GapRow, HistRow, LatencyRow, SojournRow
from labkit.runs.features.base import Feature, Stack, pin_dir, watched_ports
from labkit.runs.features.lanes import Lanes
from labkit.runs.result import PolicyResult


class Probes(Feature):
    """The queue probe on the bottleneck ports (per-lane counters, sojourn, dequeue gaps;
    with several jobs, per job too, by each job's DSCP) and the latency probe at the
    receivers' NICs; their events read while the traffic runs."""

    records_only = True
    queues: QueueProbe | None = None
    latency: LatencyProbe | None = None
    reader: EventReader | None = None

    def __init__(self) -> None:
        self.watched: list[WatchedPort] = []
        self.events: list[tuple] = []
        self.jobs: dict[int, str] = {}  # DSCP: job name, with several jobs

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return telemetry

    @classmethod
    def job_names(cls, sc: Scenario) -> dict[int, str]:
        """DSCP: job name, of a scenario with several jobs (each job's packets carry its
        own DSCP); empty with one job, whose run reads nothing more."""
        return {j.dscp: j.name for j in sc.jobs} if sc.several else {}

    def load(self, stack: Stack) -> None:
        lanes = stack.need(Lanes, "the probes")
        assert lanes.classifier, "loaded"
        self.queues = QueueProbe(sample_every_for(len(stack.sc.ranks)),
                                 record=stack.registry.add)
        self.latency = LatencyProbe(lanes.config_map, self.queues, record=stack.registry.add)

    def build(self, stack: Stack) -> None:
        queues, latency = self.queues, self.latency
        classifier = stack.need(Lanes, "the probes").classifier
        assert queues and latency and classifier, "loaded"
        for host in stack.sc.ranks:
            nic = stack.fabric.nic(host)
            latency.attach(nic.ns, nic.ifname, nic.ifindex)
        self.jobs = self.job_names(stack.sc)
        for port in watched_ports(stack.topo):
            h = stack.fabric.handle(port)
            queued = queues.watch(h.ns, h.ifindex, h.ifname)
            self.watched.append(WatchedPort(
                h.ns, h.ifname, h.ifindex, offered=partial(classifier.counters, h.key),
                queued=queued,
                jobs=queues.job_reader(h.ifname, self.jobs) if self.jobs else None))
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
                                for row in self.latency.histograms()]
                             + [HistRow("job_sojourn", *row)
                                for row in self.queues.job_histograms(self.jobs)])
        result.events_lost, result.packets_sampled, result.unpaired = self.queues.delivery()

    def close(self) -> None:
        for probe in (self.latency, self.queues):
            if probe is not None:
                probe.close()
