"""Kernel-side telemetry: what labkit's eBPF probes count, time and sample.

* :class:`QueueProbe` — ``bpf/queues.bpf.c`` on the ``qdisc_enqueue``,
  ``qdisc_dequeue`` and ``kfree_skb`` tracepoints. Per watched port and lane:
  packets accepted and dropped, and each packet's time in the queue (sojourn),
  as log2 histograms and sampled per-packet events. Per watched port and DSCP
  (IPv4 packets: each job marks its own), the same counters and histograms, read
  for the DSCPs a run's jobs use (:meth:`QueueProbe.job_reader`).
* :class:`LatencyProbe` — ``bpf/latency.bpf.c`` at tc ingress of receiving
  hosts: the one-way delay of packets that carry a sender's stamp, per lane.
* :class:`EventReader` — a thread consuming the ``lk_events`` ring buffer that
  both probes share; what the kernel could not deliver is counted in ``lk_lost``.

Lanes are the classifier's: the probes read them from ``skb->priority`` (queues)
or apply the classifier's own ``lk_config`` rules (latency).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from labkit.kernel import bpf, sched, tc
from labkit.kernel.lanes import read_lane_counters
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import LATENCY, QUEUES
from labkit.model import abi
from labkit.model.abi import (
    EVENT,
    HIST_BUCKETS,
    LANE_COUNTERS,
    LANES,
    NR_DSCP,
    Hist,
    PortKey,
    TelemetryConfig,
)

DEFAULT_SAMPLE_EVERY = 4
SAMPLED_RANKS = 8  # a ring up to this size gets DEFAULT_SAMPLE_EVERY ...


def sample_every_for(ranks: int) -> int:
    """... a larger one a proportionally sparser sample: its packets per second grow with
    it, and so would the records the orchestrator reads (measured: at 32 ranks, reading
    one in 4 took most of the run process's 6.6 % of a core). The kernel's histograms and
    counters still see every packet."""
    return DEFAULT_SAMPLE_EVERY * max(1, -(-ranks // SAMPLED_RANKS))
READ_MS = 50  # how often the event reader drains lk_events


def read_hist(hists: bpf.Map, key: int) -> list[int]:
    """A per-CPU ``struct lk_hist``, summed over CPUs."""
    per_cpu = [Hist.from_buffer_copy(v) for v in hists.per_cpu(key)]
    return [sum(h.buckets[b] for h in per_cpu) for b in range(HIST_BUCKETS)]


def read_counters(counters: bpf.Map, key: int) -> tuple[int, int]:
    """A per-CPU ``struct lk_lane_counters``, summed over CPUs: (packets, bytes)."""
    packets = nbytes = 0
    for p, b in LANE_COUNTERS.iter_unpack(counters.raw(key)):
        packets += p
        nbytes += b
    return packets, nbytes


# per DSCP: (enqueued packets, enqueued bytes, dropped packets, dropped bytes)
JobCounters = dict[int, tuple[int, int, int, int]]


class QueueProbe:
    """Counters, sojourn histograms and sampled sojourns of the watched ports."""

    def __init__(self, sample_every: int = DEFAULT_SAMPLE_EVERY,
                 record: bpf.Recorder | None = None):
        self.sample_every = sample_every
        self.obj = bpf.record_programs(QUEUES.open(), record)
        self.record = record
        self.links: list[bpf.TracingLink] = []
        self.slots: dict[tuple[int, int], int] = {}
        self.labels: list[str] = []  # port label per slot
        self.obj.maps.lk_telemetry.update(0, TelemetryConfig(sample_every=sample_every))
        programs = self.obj.programs
        self.tracepoints = (programs.lk_qdisc_enqueue, programs.lk_qdisc_dequeue,
                            programs.lk_qdisc_drop)

    def watch(self, ns: Netns, ifindex: int, label: str) -> Callable[[], tuple[dict, dict]]:
        """Start watching ``ifindex`` in ``ns``; returns a reader of its lane counters."""
        key = (ns.inode, ifindex)
        if key not in self.slots:
            self.slots[key] = len(self.labels)
            self.labels.append(label)
        slot = self.slots[key]
        self.obj.maps.lk_ports.update(PortKey(*key), slot)
        for program in self.tracepoints if not self.links else ():
            self.links.append(program.attach())
            if self.record:
                self.record("tracing_link", prog=program.name, prog_id=program.id)
        first = slot * len(LANES)
        return lambda: (read_lane_counters(self.obj.maps.lk_enqueued, first),
                        read_lane_counters(self.obj.maps.lk_dropped, first))

    def slot_of(self, port: str | int) -> int:
        """A watched port's slot, given by its label (as :meth:`watch` was given it) or
        its slot."""
        if isinstance(port, int):
            if not 0 <= port < len(self.labels):
                raise ValueError(f"no watched port in slot {port} ({len(self.labels)} watched)")
            return port
        if port not in self.labels:
            raise ValueError(f"{port!r} is not a watched port (watched: {self.labels})")
        return self.labels.index(port)

    def job_reader(self, port: str | int, dscps: Iterable[int]) -> Callable[[], JobCounters]:
        """A reader of one watched port's (by label or slot) per-DSCP counters: for each
        of ``dscps``, (enqueued packets, enqueued bytes, dropped packets, dropped bytes),
        summed over CPUs. It reads those DSCPs' entries and no others (two map lookups
        each, in the poller's time)."""
        slot = self.slot_of(port)
        wanted = sorted(set(dscps))
        if bad := [d for d in wanted if not 0 <= d < NR_DSCP]:
            raise ValueError(f"DSCPs are 0..{NR_DSCP - 1}, not {bad}")
        keys = [(d, slot * NR_DSCP + d) for d in wanted]
        enqueued, dropped = self.obj.maps.lk_job_enqueued, self.obj.maps.lk_job_dropped

        def read() -> JobCounters:
            return {d: (*read_counters(enqueued, k), *read_counters(dropped, k))
                    for d, k in keys}

        return read

    def histograms(self) -> list[tuple[str, str, int, int]]:
        """(port, lane, bucket, count) of every non-empty sojourn histogram bucket."""
        rows = []
        for slot, port in enumerate(self.labels):
            for i, lane in enumerate(LANES):
                counts = read_hist(self.obj.maps.lk_sojourn_hist, slot * len(LANES) + i)
                rows += [(port, lane, b, n) for b, n in enumerate(counts) if n]
        return rows

    def job_histograms(self, jobs: Mapping[int, str]) -> list[tuple[str, str, int, int]]:
        """(port, job, bucket, count) of every non-empty bucket of the per-DSCP sojourn
        histograms of ``jobs`` (DSCP: the job's name), each port's in ``jobs``' order."""
        if bad := [d for d in jobs if not 0 <= d < NR_DSCP]:
            raise ValueError(f"DSCPs are 0..{NR_DSCP - 1}, not {bad}")
        rows = []
        for slot, port in enumerate(self.labels):
            for dscp, job in jobs.items():
                counts = read_hist(self.obj.maps.lk_job_sojourn_hist, slot * NR_DSCP + dscp)
                rows += [(port, job, b, n) for b, n in enumerate(counts) if n]
        return rows

    def delivery(self) -> tuple[int, int, int]:
        """(events lost because the ring buffer was full, packets considered for sampling,
        dequeues whose enqueue the tracepoint did not report, so no sojourn was taken).
        Dequeue gaps are counted apart (``abi.SEEN_GAPS``) and not reported here."""
        lost, seen, unpaired = (sum(int.from_bytes(v, "little")
                                    for v in self.obj.maps.lk_lost.per_cpu(k))
                                for k in (abi.LOST_EVENTS, abi.SEEN_PACKETS, abi.LOST_UNPAIRED))
        return lost, seen, unpaired

    def pin(self, directory: Path) -> None:
        for program in self.tracepoints:
            program.pin(directory / program.name.removeprefix("lk_"))
        self.obj.maps.lk_events.pin(directory / "lk_events")

    def close(self) -> None:
        for link in self.links:
            link.close()
        self.links.clear()
        self.obj.close()


class LatencyProbe:
    """The one-way latency program, attached at the ingress of receiving hosts."""

    PROGRAM = LATENCY.programs.lk_latency.name  # by name: benchmarks/telemetry.py

    def __init__(self, config: bpf.Map, queues: QueueProbe, record: bpf.Recorder | None = None):
        shared = queues.obj.maps  # telemetry.h's maps
        reuse = [config, shared.lk_events, shared.lk_telemetry, shared.lk_lost]
        self.obj = bpf.record_programs(LATENCY.open(reuse=reuse), record)
        self.record = record
        self.attachments: list[tuple[Netns, bpf.TcAttachment]] = []

    def attach(self, ns: Netns, ifname: str, ifindex: int) -> None:
        bpf.attach_filter(ns, self.obj.programs.lk_latency, ifname, ifindex, tc.PRIO_LATENCY,
                          self.attachments, self.record, egress=False)

    def histograms(self) -> list[tuple[str, int, int]]:
        """(lane, bucket, count) of every non-empty latency histogram bucket."""
        rows = []
        for i, lane in enumerate(LANES):
            counts = read_hist(self.obj.maps.lk_latency_hist, i)
            rows += [(lane, b, n) for b, n in enumerate(counts) if n]
        return rows

    def close(self) -> None:
        bpf.detach_all(self.attachments)
        self.obj.close()


class EventReader:
    """Drain ``lk_events`` in a thread; :meth:`stop` returns the decoded events."""

    def __init__(self, queues: QueueProbe):
        self._raw: list[bytes] = []
        self._ring = bpf.RingBuffer(queues.obj.maps.lk_events.fd, self._raw.append)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="event-reader", daemon=True)

    def _loop(self) -> None:
        # the programs wake this reader only when the ring is a quarter full: it drains
        # what is there every READ_MS whether woken or not
        sched.control_thread()
        while not self._stop.is_set():
            self._ring.poll(READ_MS)
            self._ring.consume()

    def start(self) -> EventReader:
        self._thread.start()
        return self

    @property
    def received(self) -> int:
        return len(self._raw)

    def stop(self) -> list[tuple]:
        """(t_ns, stamp_ns, value_ns, len, where, lane, kind, seq) per event."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._ring.consume()
        self._ring.close()
        return [EVENT.unpack(raw) for raw in self._raw]
