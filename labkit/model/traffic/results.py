"""What the traffic reports when it ends: dataclasses shared by the agents (which write
them as JSON next to their config) and the run (:mod:`labkit.traffic.agents` reads them
back), as :mod:`.configs` is for what they start with; and how the users' programs ended
(a command entry's, :mod:`labkit.traffic.commands`; a program's ranks,
:mod:`labkit.traffic.programs`), which the summary lists.

They are :mod:`labkit.model.records`' records: ``to_json`` writes what has always been
written, key for key (the agents' files stay in a run's ``agents/`` folder), ``from_json``
reads an agent's back, checking every value's type. Standard library only: agents start
fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from labkit.model.records import Record, flat


@dataclass(frozen=True, slots=True)
class OpResult:
    """One op (or training iteration) at one rank: its row of the ``collectives`` table
    but for the host (:class:`labkit.model.tables.CollectiveRow`)."""

    op: int
    rank: int
    start_ns: int
    end_ns: int
    wrong: int  # chunks whose value did not add up
    compute_ns: int
    exposed_ns: int  # waits while the awaited data was on its way
    bubble_ns: int  # waits before it had left its sender
    resent: int = 0  # packets this rank's go-back-N sent again during the op


class Span(NamedTuple):
    """A span of one op in one phase (``compute``, ``bubble`` or ``wire_wait``)."""

    op: int
    phase: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RankCounters:
    """What a rank's transport counted, and the CPU time its agent used."""

    cpu_user_s: float
    cpu_sys_s: float
    retransmits: int
    timeouts: int
    naks: int
    cnps: int  # received, each a rate cut
    out_of_order: int
    bytes_received: int
    packets_sent: int


NOT_COUNTED = RankCounters(cpu_user_s=0.0, cpu_sys_s=0.0, retransmits=0, timeouts=0, naks=0,
                           cnps=0, out_of_order=0, bytes_received=0, packets_sent=0)
_CPU = ("cpu_user_s", "cpu_sys_s")  # the counters written ahead of the rest


@dataclass(frozen=True)
class CollectiveResult(Record):
    """A rank's ops and their phases' spans, whether it stopped short of its iterations
    (``aborted``), and its counters, whose keys sit beside the others (None: it never
    started, told no GO)."""

    rank: int
    ops: tuple[OpResult, ...]
    phases: tuple[Span, ...]
    aborted: bool
    counters: RankCounters | None = flat(default=None)

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        return {**{k: doc.pop(k) for k in _CPU if k in doc}, **doc}


@dataclass(frozen=True)
class EngineResult(Record):
    """What a collective engine's ranks reported, in the order it drove them."""

    ranks: tuple[CollectiveResult, ...]


class IoDone(NamedTuple):
    """A storage I/O completed at a client: its entry, arrival, latency (arrival to
    CapsuleResp) and size."""

    entry: str
    t_ns: int
    latency_ns: int
    bytes: int


@dataclass(frozen=True)
class StorageResult(Record):
    """A host's storage traffic: per entry it received data for, the running total of
    those bytes every 50 ms (``(t_ns, bytes)``); the I/Os it completed as a client; whether
    it never started; and what failed (``(t_ns, message)``)."""

    samples: dict[str, tuple[tuple[int, int], ...]]
    ios: tuple[IoDone, ...]
    aborted: bool
    errors: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class CommandEnd(Record):
    """How one program of a scenario's command entry ended: the entry's name, the
    program's role (run or serve), host and argv as started (addresses expanded), its exit
    code, and whether labkit had to stop it."""

    name: str
    role: str
    host: str
    argv: tuple[str, ...]
    exit: int | None
    stopped_by_labkit: bool


@dataclass(frozen=True)
class ProgramRankEnd(Record):
    """How one rank of a user's program ended: its rank, host and argv, its exit code,
    whether labkit stopped it (and, of those, whether it had reported every iteration and
    lingered), and the CPU seconds its cgroup used."""

    rank: int
    host: str
    argv: tuple[str, ...]
    exit: int | None
    stopped_by_labkit: bool
    lingered: bool
    cpu_s: float
