"""What each traffic agent is started with: records shared by the launcher
(:mod:`labkit.traffic.agents`, which writes them as JSON) and the agents (which read them back),
in :mod:`labkit.model.records`' codec.

A field renamed on one side fails when the file is read (tier 0 reads every kind back),
not as a missing key in a host halfway through a run. Packet templates travel as hex in
the JSON and are bytes in the agents. Standard library only: agents start fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from labkit.model.records import Record


@dataclass(frozen=True)
class Collective(Record):
    """One rank of a collective or a training job (:mod:`labkit.traffic.collective`)."""

    rank: int
    n: int
    ip: str
    workload: dict  # {"kind": "collective", op, algo, size_bytes} or {"kind": "job", "job": …}
    iterations: int
    compute_ms: float
    duration_s: float | None
    payload_bytes: int  # RoCE payload per packet
    peers: dict[int, str]  # rank -> address
    sport_base: int  # the UDP source port towards rank p is sport_base + p
    templates: dict[str, bytes]  # RDMA WRITE first/middle/last/only, QPN 0
    ack_template: bytes
    nak_template: bytes
    cnp_template: bytes
    phase_map_fd: int | None = None  # the host's lk_phase, inherited (state-aware control)
    dcqcn_line_mbps: float | None = None  # set: ECN-capable packets, rate cuts on CNPs
    gso_segments: int = 1  # packets of equal size sent as one UDP GSO run (traffic.hotpath)
    lossless: bool = False  # the fabric pauses instead of dropping: long transport timeouts
    netns_fd: int | None = None  # the rank's host's namespace, inherited (None: the engine's)
    dscp: int = 0  # every packet the rank sends carries it: its job's, with several jobs


@dataclass(frozen=True)
class Engine(Record):
    """A collective engine (:mod:`labkit.traffic.collective`): the ranks one process drives."""

    ranks: list[Collective]
    out: str = ""  # where the engine writes its ranks' results


@dataclass(frozen=True)
class Entry(Record):
    """What the server and the clients of one storage entry both know of it."""

    name: str
    pattern: str  # read: the server sends; write: it receives
    port: int
    pacing_bytes_per_s: int  # per connection; 0: unpaced


@dataclass(frozen=True)
class ServedFlow(Entry):
    """The connections of one storage entry as its server sees them."""

    sport_lo: int  # the clients' source ports, which tell the entry of a connection
    sport_hi: int


@dataclass(frozen=True)
class Served(Record):
    ports: list[int]
    flows: list[ServedFlow]
    templates: dict[str, bytes]  # the server's NVMe/TCP PDUs


@dataclass(frozen=True)
class Client(Entry):
    """One storage entry as one of its clients runs it."""

    queues: int  # one TCP connection per I/O queue
    io_bytes: int
    queue_depth: int
    arrival: dict  # scenario.Arrival as a dict
    ios_per_s: float
    seed: str
    server_ip: str
    sport_base: int
    templates: dict[str, bytes]  # the client's NVMe/TCP PDUs


@dataclass(frozen=True)
class Storage(Record):
    """A host's storage agent (:mod:`labkit.traffic.storage`): what it serves and the
    entries it is a client of."""

    serve: Served | None = None
    clients: list[Client] = field(default_factory=list)
    out: str = ""


def write(cfg: Engine | Storage, path: Path) -> None:
    path.write_text(json.dumps(cfg.to_json()))


def read_engine(path: str | Path) -> Engine:
    return Engine.from_json(json.loads(Path(path).read_text()), str(path))


def read_storage(path: str | Path) -> Storage:
    return Storage.from_json(json.loads(Path(path).read_text()), str(path))
