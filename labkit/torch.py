"""Time a PyTorch job's steps and collectives for labkit, and tell its host when it
communicates.

In a rank of a scenario's ``kind: program`` (:mod:`labkit.traffic.programs` starts it
with torchrun's environment, ``labkit`` importable)::

    import torch.distributed as dist
    from labkit.torch import Steps

    dist.init_process_group("gloo")           # env:// from labkit's environment
    steps = Steps()
    model = steps.watch(DDP(model))           # times each gradient bucket's all_reduce
    for batch in data:
        with steps.step():                    # one iteration: its time, its exposed comm
            model(batch).sum().backward()
            optimizer.step()

``with steps.comm("all_reduce", nbytes): dist.all_reduce(t)`` times a blocking
collective of the job's own. Each iteration and each op is one JSON line on stdout
(:mod:`labkit.model.traffic.lines`); outside labkit those lines are all that changes.

*Exposed communication* of a step: the blocking collectives' whole time, and for DDP
the time from the last gradient bucket becoming ready (backward is then done
computing) to the last bucket's all_reduce ending, which the step waits for.

*The job's phase.* Under a controller labkit passes the rank its host's phase map
(``LABKIT_PHASE_FD``, ``struct lk_job_phase``). The job marker in the kernel
(``bpf/jobmark.bpf.c``) keeps the host's window open while the job's packets cross a
bottleneck port, and notes the first such burst since this helper cleared the note, as
each step starts. As a step ends (and the next begins) this helper announces when the
next step's traffic will cross, learned from the steps before (the median time from a
step's start to its first burst across the bottleneck; the first step left out), so the
host's gate and the state-aware relay hold storage from then
(``control.lead_ms`` earlier) and the bottleneck is clear when the job's packets come.
After the first step, with nothing learned yet, the window opens at once for up to
twice that step. A rank whose last step sent nothing across a bottleneck announces
nothing, and ends what it announced: it never holds storage back. (In the first step
gloo connects every rank to every other, so every rank crosses; in a ring's steps after
it, two.) The announced window is short (:data:`WINDOW_NS`):
the kernel holds it open for as long as the job's packets cross, and no longer. Once a
step's communication has begun (its first bucket, or ``comm``), a rank whose last step
crossed keeps its window open until the step ends, for up to twice the last step: the
job can stall inside a collective for longer than the kernel waits for its next packet.

Imports only the standard library and torch, each when first needed.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import struct
import sys
import threading
import time
from contextlib import contextmanager

from labkit.model.traffic.lines import iteration_line, op_line

PHASE = struct.Struct("=QQQIIQQ")  # struct lk_job_phase (labkit.model.abi.JobPhase)
SOON = 1  # enum lk_phase
HISTORY = 8  # steps learned from
WINDOW_NS = 30_000_000  # an announced window; the kernel holds it open while the job sends
USERS_STEPS = False  # the job made Steps of its own: labkit's start-up hook then steps aside


class PhaseMap:
    """The host's ``lk_phase`` map, by the descriptor labkit passed (None: no controller,
    or no libbpf here: then it reads nothing and announces nothing)."""

    def __init__(self, fd: int | None):
        self.fd, self.update = fd, None
        if fd is None:
            return
        try:
            lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
        except OSError:
            print("labkit.torch: libbpf.so.1 not found: the job's phase is not announced "
                  "(the kernel still sees its traffic)", file=sys.stderr)
            return
        self.update, self.lookup = lib.bpf_map_update_elem, lib.bpf_map_lookup_elem
        self.update.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_uint64]
        self.lookup.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self._key = ctypes.c_uint32(0)
        self._value = ctypes.create_string_buffer(PHASE.size)

    def read(self) -> tuple | None:
        """(busy_from, busy_until, bytes_left, phase, flags, cross_start, crossed), or None."""
        if self.update is None or self.lookup(self.fd, ctypes.byref(self._key), self._value):
            return None
        return PHASE.unpack(self._value.raw)

    def announce(self, start_ns: int, end_ns: int, phase: int) -> None:
        """Write a window, keeping what the kernel recorded of the job's traffic."""
        now = self.read()
        if now is not None:
            self._write(start_ns, end_ns, phase, *now[4:])

    def clear_crossing(self) -> None:
        """Have the kernel note the first burst across a bottleneck from now on."""
        now = self.read()
        if now is not None:
            self._write(now[0], now[1], now[3], now[4], 0, now[6])

    def _write(self, start_ns: int, end_ns: int, phase: int, flags: int, cross_start: int,
               crossed: int) -> None:
        value = ctypes.create_string_buffer(
            PHASE.pack(start_ns, end_ns, 0, phase, flags, cross_start, crossed))
        self.update(self.fd, ctypes.byref(self._key), value, 0)


class Steps:
    """The job's steps and collectives, as labkit reads them (see the module docstring)."""

    def __init__(self, out=None, phase_fd: int | None = None, by_labkit: bool = False):
        global USERS_STEPS
        USERS_STEPS |= not by_labkit
        self.out = out or sys.stdout
        fd = os.environ.get("LABKIT_PHASE_FD") if phase_fd is None else phase_fd
        self.phase = PhaseMap(int(fd) if fd not in (None, "") else None)
        self.index = 0
        self._start = 0
        self._lock = threading.Lock()
        self._ops: list[tuple[str, int | None, int, int]] = []  # this step's, as they end
        self._blocking_ns = 0
        self._ready_ns = 0  # the last DDP bucket's, this step
        self.offsets: list[int] = []  # step start -> first burst across a bottleneck, ns
        self.hold_ns = 0  # a step's communication holds storage this long at most (0: not)
        self._holding = False  # this step's communication holds already

    # --- what the job tells ------------------------------------------------------------

    @contextmanager
    def step(self):
        """One iteration: printed as an ``iteration`` line with its exposed communication,
        after ``op`` lines for its collectives."""
        self.begin()
        yield self
        self.end()

    @contextmanager
    def comm(self, name: str = "all_reduce", nbytes: int | None = None):
        """A blocking collective of the job's own (its whole time is exposed)."""
        t0 = time.monotonic_ns()
        self._hold(t0)
        yield
        self.record(name, nbytes, t0, time.monotonic_ns())

    def watch(self, ddp):
        """Time every gradient bucket's all_reduce of a ``DistributedDataParallel``
        model (a communication hook around DDP's default one); returns the model."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, self.timed_hook(default_hooks.allreduce_hook))
        return ddp

    # --- the same, for whoever drives the steps (labkit.traffic.torchhook) -----------------

    def begin(self, now: int | None = None) -> None:
        """A step starts (now, or at ``now``)."""
        self._start = time.monotonic_ns() if now is None else now
        self.phase.clear_crossing()
        with self._lock:
            self._ops, self._blocking_ns, self._ready_ns = [], 0, 0
            self._holding = False

    def end(self, now: int | None = None, report: bool = True) -> None:
        """The step begun last ends (now, or at ``now``): its lines (unless not
        ``report``), then the next step's window."""
        start, end = self._start, time.monotonic_ns() if now is None else now
        with self._lock:
            ops, blocking, ready = list(self._ops), self._blocking_ns, self._ready_ns
        tail = max((o[3] for o in ops), default=0) - ready if ready else 0
        exposed = min(end - start, blocking + max(tail, 0))
        if report:
            for name, nbytes, t0, t1 in ops:
                print(op_line(name, t0, t1, nbytes, self.index), file=self.out)
            print(iteration_line(self.index, start, end, exposed), file=self.out, flush=True)
        self.index += 1
        self._learn_and_announce(start, end)

    def record(self, name: str, nbytes: int | None, t0: int, t1: int,
               blocking: bool = True) -> None:
        """A collective of this step ran from ``t0`` to ``t1``; a blocking one's whole
        time is exposed communication."""
        with self._lock:
            self._ops.append((name, nbytes, t0, t1))
            if blocking:
                self._blocking_ns += t1 - t0

    def pending(self) -> bool:
        """Whether the step under way has timed a collective."""
        with self._lock:
            return bool(self._ops)

    def starting(self, t0: int, ready: bool = False) -> None:
        """A collective of this step starts at ``t0`` (``ready``: a DDP bucket, whose
        gradients are ready then): the step's communication holds the window."""
        if ready:
            with self._lock:
                self._ready_ns = t0
        self._hold(t0)

    def timed_hook(self, hook, starting=None, record=None):
        """DDP's communication hook ``hook``, each bucket's all_reduce timed (told to
        ``starting`` and ``record``, by default this step's)."""
        starting, record = starting or self.starting, record or self.record

        def timed(state, bucket):
            t0 = time.monotonic_ns()
            buffer = bucket.buffer()
            nbytes = buffer.numel() * buffer.element_size()
            starting(t0, True)

            def ended(fut):
                record("all_reduce", nbytes, t0, time.monotonic_ns(), False)
                return fut.value()

            return hook(state, bucket).then(ended)

        return timed

    # --- the phase ------------------------------------------------------------------------

    def _hold(self, now: int) -> None:
        """As the step's communication starts, on a rank whose last step crossed a
        bottleneck: a window from now until the step's end says better (it announces the
        next), for up to twice the last step. The kernel's own window closes ``quiet_ms``
        after the job's latest packet across; inside a collective the job can stall
        longer than that (a rank that did not run in time, a retransmission timer: on
        ``pytorch-ddp.yaml`` one stalled 240 ms mid-all_reduce), and what the gates let
        in then met the rest of the collective at the bottleneck."""
        with self._lock:
            if self._holding or not self.hold_ns:
                return
            self._holding = True
        self.phase.announce(now, now + self.hold_ns, SOON)

    def _learn_and_announce(self, start: int, end: int) -> None:
        """After a step: when its traffic first crossed a bottleneck (as the kernel saw
        it), and from that the next step's window; none if this step did not cross (a
        rank whose traffic stays on its side never holds storage back). The first step
        teaches nothing: the framework sets itself up in it (gloo's pairs, autograd's
        first pass), and its offset, up to 400 ms late on ``pytorch-ddp.yaml``, held the
        next two windows' forecasts wrong. With nothing learned yet, the window opens now
        and lasts up to twice the step just done, unless a step's end says better: the
        second step is then held like a known one, not met by whatever storage the
        bottleneck's queue holds when its traffic first crosses (on ``pytorch-ddp.yaml``
        that step was `state-aware`'s slowest in three runs of five)."""
        seen = self.phase.read()
        if seen is None:
            return
        cross_start, crossed = seen[5], seen[6]
        if crossed < start or cross_start < start:  # nothing across from here this step:
            self.hold_ns = 0
            if seen[1] > end:  # ... so what it announced (the second step's hold) ends
                self.phase.announce(0, 0, 0)
            return
        self.hold_ns = 2 * (end - start)
        if self.index == 1:  # index: the steps done, this one included
            self.phase.announce(end, end + self.hold_ns, SOON)
            return
        self.offsets = (self.offsets + [cross_start - start])[-HISTORY:]
        at = end + int(statistics.median(self.offsets))
        self.phase.announce(at, at + WINDOW_NS, SOON)

    def close(self) -> None:
        """Say the job communicates no more."""
        self.phase.announce(0, 0, 0)
