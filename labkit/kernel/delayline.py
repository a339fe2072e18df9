"""Propagation delay on a kernel that has no qdisc able to hold a packet for later (no
netem, fq, etf or BPF qdisc; HTB, TBF and veth ignore ``skb->tstamp``): labkit's own delay
line, ``_delayline`` (delayline.c says how it works), one process in a namespace spliced
into the delayed links, forwarding each direction of each link (a :class:`Pipe`) after
its delay. This module starts it, records it in the run's registry, stops it and reads
how faithfully it kept time (:class:`PipeStats`).

Why a process of its own in C rather than Python: a frame's send must land within tens
of microseconds of its deadline at up to tens of thousands of frames a second, beside the
run's own work on two cores.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DELAYLINE = Path(__file__).with_name("_delayline")  # built by `make setup`
READY_WAIT_S = 5.0
STOP_WAIT_S = 3.0
FIFO_PRIORITY = 10  # SCHED_FIFO: its sends wait for no ordinary process
MIN_RING_BYTES = 4 << 20


def ring_bytes(rate_mbps: float, delay_ns: int, jitter_ns: int) -> int:
    """Room for twice what a link at ``rate_mbps`` has in flight over its longest delay."""
    in_flight = rate_mbps * 1e6 / 8 * (delay_ns + jitter_ns) / 1e9
    return max(MIN_RING_BYTES, int(2 * in_flight) + (1 << 20))


@dataclass(frozen=True)
class Pipe:
    """One direction of a delayed link inside the delay line's namespace: frames arriving
    on ``into`` leave on ``out`` ``delay_ns`` (± up to ``jitter_ns``, never reordered)
    after the kernel received them."""

    into: str
    out: str
    delay_ns: int
    jitter_ns: int
    ring_bytes: int
    seed: int

    def arg(self) -> str:
        return (f"{self.into},{self.out},{self.delay_ns},{self.jitter_ns},"
                f"{self.ring_bytes},{self.seed}")


@dataclass(frozen=True)
class PipeStats:
    """What one pipe did: frames and bytes forwarded, frames dropped (its ring full, or a
    send refused), and how late sends were against their deadlines (ns, p50, p99 and the
    latest; negative: early, ``early_max_ns`` the earliest; no frame: p50 and p99 -1000000)."""

    into: str
    out: str
    delay_ns: int
    jitter_ns: int
    frames: int
    bytes: int
    dropped: int
    late_p50_ns: int
    late_p99_ns: int
    late_max_ns: int
    early_max_ns: int


@dataclass(frozen=True)
class DelayStats:
    """The delay line's report: whether it ran under SCHED_FIFO, and each pipe's."""

    realtime: bool
    pipes: tuple[PipeStats, ...]

    @classmethod
    def parse(cls, line: str) -> DelayStats | None:
        """The report on one line of its output (None if that is not one)."""
        try:
            doc = json.loads(line)
        except ValueError:
            return None
        return cls(realtime=doc["sched"] == "fifo", pipes=tuple(
            PipeStats(into=p["in"], out=p["out"], **{k: p[k] for k in (
                "delay_ns", "jitter_ns", "frames", "bytes", "dropped", "late_p50_ns",
                "late_p99_ns", "late_max_ns", "early_max_ns")}) for p in doc["pipes"]))


Popen = Callable[..., subprocess.Popen]  # (argv, stdin=, stdout=, stderr=) in the namespace


class DelayLine:
    """The delay line of one namespace: :meth:`start` it (``popen`` starts a command in
    that namespace and records the process for teardown), :meth:`stop` it for its
    :class:`DelayStats`."""

    def __init__(self, popen: Popen, pipes: list[Pipe]):
        self.popen, self.pipes = popen, pipes
        self.proc: subprocess.Popen | None = None
        self._stderr = tempfile.TemporaryFile()

    def start(self) -> DelayLine:
        if not DELAYLINE.exists():
            raise RuntimeError(f"{DELAYLINE} is missing: run `make setup` to build it")
        self.proc = self.popen([str(DELAYLINE), "--fifo", str(FIFO_PRIORITY),
                                *(p.arg() for p in self.pipes)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=self._stderr)
        if self._line(READY_WAIT_S) != "ready":
            self.stop()
            raise RuntimeError(f"the delay line did not start: {self._said() or 'no word'}")
        return self

    def _line(self, timeout_s: float) -> str | None:
        """Its next line on stdout, or None if none comes within ``timeout_s``."""
        out = self.proc.stdout if self.proc else None
        if out is None or not select.select([out], [], [], timeout_s)[0]:
            return None
        return out.readline().decode().strip() or None

    def set_delay(self, into: str, delay_ns: int, jitter_ns: int) -> None:
        """The pipe from ``into`` holds its frames ``delay_ns`` ± ``jitter_ns`` from its
        next frame on (the frames it holds keep theirs; none is reordered)."""
        if self.proc is None or self.proc.stdin is None:
            raise RuntimeError("the delay line is not running")
        self.proc.stdin.write(f"delay {into} {delay_ns} {jitter_ns}\n".encode())
        self.proc.stdin.flush()

    def report(self, timeout_s: float = 2.0) -> DelayStats | None:
        """What it has done so far (it goes on); None if it does not answer in time."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(signal.SIGUSR1)
        line = self._line(timeout_s)
        return DelayStats.parse(line) if line else None

    def stop(self) -> DelayStats | None:
        """Stop it, with its last report (None if it gave none)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        last = out.decode(errors="replace").strip().splitlines()
        return DelayStats.parse(last[-1]) if last else None

    def _said(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()[-500:]
