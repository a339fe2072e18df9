"""An unmodified job's steps, from its collectives as they start and end, and its phase
announced from them: what labkit's start-up hook does in a PyTorch rank
(:mod:`labkit.traffic.torchhook`), and what :class:`Follower` does for an MPI job's ranks
from labkit's own process.

:class:`OpSteps` drives a :class:`labkit.torch.Steps` of labkit's own: the first op ends
the first step (the framework's set-up, which teaches the phase nothing, so the second
step is held whole), and from then on the job's rhythm
(:class:`labkit.model.traffic.rhythm.Rhythm`: the pattern of ops it repeats) says which op
ends a step; a DDP job's forward passes cut its steps instead. Each step's end announces
the next step's window to the host's phase map, as ``labkit.torch`` does.

Open MPI's daemons close every descriptor but the standard three when they start a rank,
so an MPI rank cannot reach its host's phase map (``LABKIT_PHASE_FD``). The PMPI shim
(``mpitime.c``) appends each op's start to ``rank<N>.starts`` and the op to
``rank<N>.ops`` as it ends; :class:`Follower` reads those files every :data:`FOLLOW_MS`
and drives one :class:`OpSteps` per rank, on that rank's host's map, as the hook would
in the rank: an op's start holds the window of a rank whose steps cross, and a step's
end announces the next step's, a compute phase ahead. It hears of each a few ms late.

Its line readers serve labkit's processes too: :class:`Tail` (a file another process
appends to) and :class:`PipeLines` (a pipe: the engine's stdin, an agent's stdout).

Standard library only: a job's own interpreter imports it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO, TextIO

from labkit import torch as steps_mod
from labkit.model.traffic import lines
from labkit.model.traffic.rhythm import Rhythm

FOLLOW_MS = 2.0  # how often the follower reads the shim's files


class OpSteps:
    """One rank's steps, cut from its ops (see the module docstring). ``out``: where each
    op is written as a line as it ends (None: it is written elsewhere already);
    ``phase_fd``: the host's phase map (None: from ``LABKIT_PHASE_FD``)."""

    def __init__(self, out: TextIO | None, phase_fd: int | None = None):
        self.out = out
        self.steps = steps_mod.Steps(out=out, phase_fd=phase_fd, by_labkit=True)
        self.rhythm = Rhythm()
        self.ddp = False  # a DDP model's forward passes cut the steps
        self.open = False  # a step has begun
        self._lock = threading.Lock()

    def _begin(self, now: int) -> None:
        if not self.open:
            self.steps.begin(now)
            self.open = True

    def cut(self, now: int) -> None:
        """One step ends and the next begins, at ``now`` (a DDP job's step is reported
        whole; other ops are reported as they end)."""
        with self._lock:
            if self.open:
                self.steps.end(now, report=self.ddp)
                self.open = False
            self._begin(now)

    def starting(self, t0: int, ready: bool = False) -> None:
        """A collective starts at ``t0`` (``ready``: a DDP bucket's)."""
        with self._lock:
            self._begin(t0)
        self.steps.starting(t0, ready)

    def ended(self, name: str, nbytes: int | None, t0: int, t1: int,
              blocking: bool = True) -> None:
        """A collective ran from ``t0`` to ``t1``."""
        with self._lock:
            self._begin(t0)
        self.steps.record(name, nbytes, t0, t1, blocking)
        if self.ddp:
            return
        if self.out is not None:
            print(lines.op_line(name, t0, t1, nbytes), file=self.out)
        if self.rhythm.ended((name, nbytes)) or self.steps.index == 0:
            self.cut(t1)

    def close(self) -> None:
        """The job communicates no more."""
        self.steps.close()


class Tail:
    """A file another process appends to: its whole lines as they come (the file kept open
    once it exists, so that a look at it is one read)."""

    def __init__(self, path: Path):
        self.path = path
        self._file: BinaryIO | None = None
        self._partial = b""  # the start of a line not yet whole

    def new_lines(self) -> str:
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 (kept open: close())
            except OSError:  # not written yet
                return ""
        chunk = self._partial + self._file.read()
        whole = chunk.rfind(b"\n") + 1
        self._partial = chunk[whole:]
        return chunk[:whole].decode(errors="replace")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class PipeLines:
    """Whole lines from a pipe as they come, read with ``os.read``: a buffered reader
    would keep a second line out of ``poll``'s sight (the engine's stdin, the launcher's
    end of an agent's stdout)."""

    def __init__(self, fd: int):
        self.fd, self.pending = fd, b""

    def read(self) -> list[str] | None:
        """The lines complete so far (None: end of file, the writer is gone)."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return None
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return [line.decode().strip() for line in lines]


class Follower(threading.Thread):
    """An MPI job's ranks' phases, from what the shim writes in ``directory`` (the module
    docstring): ``ranks`` maps each rank to its host's phase map's descriptor."""

    def __init__(self, directory: str | Path, ranks: dict[int, int]):
        super().__init__(name="labkit-ops-follower", daemon=True)
        self.ranks = {r: OpSteps(None, fd) for r, fd in ranks.items()}
        self._tails = {r: (Tail(ops_file(directory, r)), Tail(starts_file(directory, r)))
                       for r in ranks}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(FOLLOW_MS / 1e3):
            for rank in self.ranks:
                self.follow(rank)

    def follow(self, rank: int) -> None:
        """What the rank's shim wrote since the last look, replayed in time order: op
        starts (which hold the rank's window once its steps cross) and ends."""
        ops, starts = self._tails[rank]
        _, ended, _ = lines.parse(ops.new_lines())
        began = [int(t) for t in starts.new_lines().split() if t.isdigit()]
        steps = self.ranks[rank]
        events = [(t, None) for t in began] + [(o.end_ns, o) for o in ended]
        for at, op in sorted(events, key=lambda e: (e[0], e[1] is not None)):
            if op is None:
                steps.starting(at)
            else:
                steps.ended(op.op, op.bytes, op.start_ns, op.end_ns)

    def stop(self) -> None:
        """No more announcements: each rank's window ends."""
        self._halt.set()
        if self.is_alive():
            self.join()
        for steps in self.ranks.values():
            steps.close()
        for tails in self._tails.values():
            for tail in tails:
                tail.close()


def ops_file(directory: str | Path, rank: int | str) -> Path:
    """A rank's file of timed ops in ``directory`` (the hook's and the shim's)."""
    return Path(directory) / f"rank{rank}.ops"


def starts_file(directory: str | Path, rank: int | str) -> Path:
    """A rank's file of its ops' start times in ``directory`` (the shim's)."""
    return Path(directory) / f"rank{rank}.starts"
