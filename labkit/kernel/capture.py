"""Recorders that sample state beside the traffic (the probes are in
:mod:`labkit.kernel.telemetry`).

* :class:`QueuePoller` — at a fixed rate (125 Hz) for each watched port: its
  HTB leaf classes over netlink, through a socket opened in the port's namespace
  (bytes and packets sent, drops, overlimits, backlog), and its per-lane
  counters: offered (the classifier's), enqueued and dropped (the tracepoints');
  with several jobs, each job's enqueued and dropped too (the tracepoints', by
  the DSCP the job marks its packets with).
* :class:`CpuSampler` — machine-wide CPU busy fraction from ``/proc/stat``
  (10 Hz), so a run that was CPU-bound can say so.

Recorders collect rows in memory while running; the caller turns them into Parquet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from labkit.kernel import sched, tc
from labkit.kernel.netns import Netns
from labkit.model.abi import LANES
from labkit.model.tables import CpuRow, JobLaneRow, LaneRow, QueueRow

LaneReader = Callable[[], dict[str, tuple[int, int]]]
# per DSCP: (enqueued packets, enqueued bytes, dropped packets, dropped bytes), tracepoints
JobReader = Callable[[], dict[int, tuple[int, int, int, int]]]
NO_JOBS: Mapping[int, str] = MappingProxyType({})


@dataclass(frozen=True)
class WatchedPort:
    ns: Netns
    ifname: str
    ifindex: int
    offered: LaneReader  # the classifier's per-lane counters for this port
    queued: Callable[[], tuple[dict, dict]]  # (enqueued, dropped) per lane, tracepoints
    jobs: JobReader | None = None  # per job's DSCP (QueueProbe.job_reader); None: one job

    @property
    def label(self) -> str:
        return self.ifname


POLL_MS = 8  # the queue poller's period: the fabric telemetry a controller sees
LANES_EVERY = 4  # lane counters read with every this many queue samples (no controller)


class QueuePoller:
    """Sample the tc classes of ``ports`` every ``period_s`` until :meth:`stop`."""

    def __init__(self, ports: list[WatchedPort], period_s: float = POLL_MS / 1e3,
                 listener: Callable[[int, str, list, dict], None] | None = None,
                 job_names: Mapping[int, str] = NO_JOBS):
        self.ports = ports
        self.listener = listener  # told of every sample: (t_ns, port, classes, offered)
        # DSCP: job name. With any, each port's job counters (WatchedPort.jobs) are read
        # with its lane counters; with none (one job), nothing more is read
        self.jobs = tuple(job_names.items())
        self.period_ns = int(period_s * 1e9)
        # the lane counters cost two thirds of a sample (nine map reads, measured 33 of
        # 52 us): a controller gets them every sample, the run's record every fourth
        self.lanes_every = 1 if listener else LANES_EVERY
        self._samples: dict[str, int] = {}  # per port: the poller thread alone counts them
        # per class and sample: (t_ns, port, classid, its counters in QueueRow's order),
        # a plain tuple, the cheapest to make; :meth:`queue_rows` names class and lane
        self.queue_samples: list[tuple] = []
        self.lane_rows: list[LaneRow] = []
        self.job_rows: list[JobLaneRow] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._read_to = 0  # queue_samples read by backlog() so far
        self._backlogs: dict[tuple[str, int], int] = {}  # per port and class, as last read
        self._last_ns = 0

    def start(self) -> QueuePoller:
        """One thread samples every port. Its netlink sockets are opened in the ports'
        namespaces (a socket stays in the namespace it was opened in), so one wake-up
        reads them all: a thread per namespace cost half as much again under load."""
        readers: dict[int, tc.StatsReader] = {}
        try:
            for p in self.ports:
                if id(p.ns) not in readers:
                    readers[id(p.ns)] = p.ns.run(tc.StatsReader)
        except BaseException:
            for r in readers.values():
                r.close()
            raise
        t = threading.Thread(target=self._loop, args=(readers,), name="queue-poller",
                             daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _loop(self, readers: dict[int, tc.StatsReader]) -> None:
        sched.control_thread()
        try:
            tick = time.monotonic_ns()
            while not self._stop.is_set():
                for p in self.ports:
                    self._sample(readers[id(p.ns)], p)
                tick += self.period_ns
                now = time.monotonic_ns()
                if tick <= now:  # fell behind: the next sample a period after this one,
                    tick = now + self.period_ns  # not at once (a sample 0.1 ms after the
                    # last shows a controller no new vip bytes, and hides the build-up)
                self._stop.wait((tick - now) / 1e9)
            for p in self.ports:  # the last row of each port: taken after the traffic ended
                self._sample(readers[id(p.ns)], p, last=True)
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)
        finally:
            for r in readers.values():
                r.close()

    def _sample(self, reader: tc.StatsReader, p: WatchedPort, last: bool = False) -> None:
        now = time.monotonic_ns()
        classes = reader.read(p.ifindex)
        for s in classes:
            self.queue_samples.append((now, p.label, s.classid, s.bytes, s.packets,
                                       s.drops, s.overlimits, s.backlog_bytes,
                                       s.backlog_packets))
        n = self._samples[p.label] = self._samples.get(p.label, -1) + 1
        if not last and n % self.lanes_every:
            return
        # tracepoint counts first: a packet they count was offered before, so a row
        # never shows more enqueued + dropped than offered; the jobs' before the lanes'
        # (the kernel counts a packet in its lane first): theirs never add up to more
        jobs = p.jobs() if self.jobs and p.jobs else None
        (enqueued, dropped), offered = p.queued(), p.offered()
        if self.listener:
            self.listener(now, p.label, classes, offered)
        for lane in LANES:
            self.lane_rows.append(LaneRow(now, p.label, lane, *offered[lane], *enqueued[lane],
                                          *dropped[lane]))
        if jobs is not None:
            for dscp, name in self.jobs:
                self.job_rows.append(JobLaneRow(now, p.label, name, *jobs[dscp]))

    def backlog(self) -> tuple[int, int]:
        """(when, bytes): the latest sample's time and the bytes queued at every watched
        port then, each class as last sampled (0, 0 before the first). For one reader
        (the run's thread) while the poller appends."""
        samples = self.queue_samples
        end = len(samples)  # rows appended meanwhile are read next time
        for t, port, classid, *_, backlog_bytes, _ in samples[self._read_to:end]:
            self._backlogs[port, classid] = backlog_bytes
            self._last_ns = t
        self._read_to = end
        return self._last_ns, sum(self._backlogs.values())

    def queue_rows(self, layout: str) -> list[QueueRow]:
        """The ``queue`` table's rows: each class by its name and its lane under the
        ports' ``layout`` (:mod:`labkit.kernel.tc`)."""
        names = {c: (tc.classid_str(c), tc.lane_of_class(c, layout))
                 for c in {s[2] for s in self.queue_samples}}
        return [QueueRow(t, port, *names[c], *counters)
                for t, port, c, *counters in self.queue_samples]

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        if self.errors:
            raise RuntimeError(f"queue poller failed: {self.errors[0]}") from self.errors[0]


class CpuSampler:
    """Machine-wide CPU busy fraction, sampled from /proc/stat."""

    def __init__(self, period_s: float = 0.1):
        self.period_s = period_s
        self.rows: list[CpuRow] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    @staticmethod
    def _read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    @classmethod
    def busy_over(cls, seconds: float) -> float:
        """The machine's busy fraction over the next ``seconds`` (blocks that long)."""
        total0, idle0 = cls._read()
        time.sleep(seconds)
        total, idle = cls._read()
        return 1 - (idle - idle0) / max(total - total0, 1)

    def _loop(self) -> None:
        total0, idle0 = self._read()
        while not self._stop.wait(self.period_s):
            total, idle = self._read()
            if total > total0:
                self.rows.append(CpuRow(time.monotonic_ns(),
                                        1 - (idle - idle0) / (total - total0)))
            total0, idle0 = total, idle

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> list[CpuRow]:
        self._stop.set()
        self._thread.join(timeout=2)
        return self.rows
