"""What the traffic reports when it ends: dataclasses shared by the agents (which write
them as JSON next to their config) and the run (:mod:`labkit.traffic.agents` reads them
back), as :mod:`.configs` is for what they start with; and how the users' programs ended
(a command entry's, :mod:`labkit.traffic.commands`; a program's ranks,
:mod:`labkit.traffic.programs`), which the summary lists.

``to_json`` writes what has always been written, key for key (the agents' files stay in
a run's ``agents/`` folder); ``from_json`` reads an agent's back. Standard library only:
agents start fast.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple


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
class CollectiveResult:
    """A rank's ops and their phases' spans, whether it stopped short of its iterations
    (``aborted``), and its counters (None: it never started, told no GO)."""

    rank: int
    ops: tuple[OpResult, ...]
    phases: tuple[Span, ...]
    aborted: bool
    counters: RankCounters | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"rank": self.rank, "ops": [asdict(o) for o in self.ops],
               "phases": [list(s) for s in self.phases], "aborted": self.aborted}
        if self.counters is None:
            return doc
        counted = asdict(self.counters)
        return {**{k: counted.pop(k) for k in _CPU}, **doc, **counted}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CollectiveResult:
        counted = [f.name for f in fields(RankCounters)]
        return cls(rank=doc["rank"], ops=tuple(OpResult(**o) for o in doc["ops"]),
                   phases=tuple(Span(*s) for s in doc["phases"]), aborted=doc["aborted"],
                   counters=RankCounters(**{k: doc[k] for k in counted})
                   if "packets_sent" in doc else None)


@dataclass(frozen=True)
class EngineResult:
    """What a collective engine's ranks reported, in the order it drove them."""

    ranks: tuple[CollectiveResult, ...]

    def to_json(self) -> dict[str, Any]:
        return {"ranks": [r.to_json() for r in self.ranks]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EngineResult:
        return cls(ranks=tuple(CollectiveResult.from_json(r) for r in doc["ranks"]))


class IoDone(NamedTuple):
    """A storage I/O completed at a client: its entry, arrival, latency (arrival to
    CapsuleResp) and size."""

    entry: str
    t_ns: int
    latency_ns: int
    bytes: int


@dataclass(frozen=True)
class StorageResult:
    """A host's storage traffic: per entry it received data for, the running total of
    those bytes every 50 ms (``(t_ns, bytes)``); the I/Os it completed as a client; whether
    it never started; and what failed (``(t_ns, message)``)."""

    samples: dict[str, tuple[tuple[int, int], ...]]
    ios: tuple[IoDone, ...]
    aborted: bool
    errors: tuple[tuple[int, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"samples": {entry: [list(s) for s in samples]
                            for entry, samples in self.samples.items()},
                "ios": [list(io) for io in self.ios], "aborted": self.aborted,
                "errors": [list(e) for e in self.errors]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StorageResult:
        return cls(samples={entry: tuple((t, n) for t, n in samples)
                            for entry, samples in doc["samples"].items()},
                   ios=tuple(IoDone(*io) for io in doc["ios"]), aborted=doc["aborted"],
                   errors=tuple((t, message) for t, message in doc["errors"]))


@dataclass(frozen=True)
class CommandEnd:
    """How one program of a scenario's command entry ended: the entry's name, the
    program's role (run or serve), host and argv as started (addresses expanded), its exit
    code, and whether labkit had to stop it."""

    name: str
    role: str
    host: str
    argv: tuple[str, ...]
    exit: int | None
    stopped_by_labkit: bool

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "argv": list(self.argv)}


@dataclass(frozen=True)
class ProgramRankEnd:
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

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "argv": list(self.argv)}
