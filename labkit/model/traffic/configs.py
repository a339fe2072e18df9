"""What each traffic agent is started with: dataclasses shared by the launcher
(:mod:`labkit.traffic.agents`, which writes them as JSON) and the agents (which read them back).

A field renamed on one side fails when the file is read (tier 0 reads every kind back),
not as a missing key in a host halfway through a run. Packet templates travel as hex in
the JSON and are bytes in the agents. Standard library only: agents start fast.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path


@dataclass(frozen=True)
class Collective:
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


@dataclass(frozen=True)
class Engine:
    """A collective engine (:mod:`labkit.traffic.collective`): the ranks one process drives."""

    ranks: list[Collective]
    out: str = ""  # where the engine writes its ranks' results


@dataclass(frozen=True)
class Entry:
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
class Served:
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
class Storage:
    """A host's storage agent (:mod:`labkit.traffic.storage`): what it serves and the
    entries it is a client of."""

    serve: Served | None = None
    clients: list[Client] = field(default_factory=list)
    out: str = ""


_BYTES = ("templates", "ack_template", "nak_template", "cnp_template")


def _hex(value):
    """bytes (or a dict of them) as hex, for JSON."""
    return {k: v.hex() for k, v in value.items()} if isinstance(value, dict) else value.hex()


def _unhex(value):
    return ({k: bytes.fromhex(v) for k, v in value.items()} if isinstance(value, dict)
            else bytes.fromhex(value))


def _encode(value):
    """``asdict`` output made JSON-ready: every template field as hex, at any depth."""
    if isinstance(value, dict):
        return {k: _hex(v) if k in _BYTES else _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decoded(cls, doc: dict):
    """``cls(**doc)`` with its template fields back to bytes."""
    names = {f.name for f in fields(cls)}
    unknown = set(doc) - names
    if unknown:
        raise TypeError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    return cls(**{k: _unhex(v) if k in _BYTES else v for k, v in doc.items()})


def write(cfg: Engine | Storage, path: Path) -> None:
    path.write_text(json.dumps(_encode(asdict(cfg))))


def _collective(doc: dict) -> Collective:
    cfg = _decoded(Collective, doc)
    return replace(cfg, peers={int(r): ip for r, ip in cfg.peers.items()})


def read_engine(path: str | Path) -> Engine:
    doc = json.loads(Path(path).read_text())
    return Engine(ranks=[_collective(r) for r in doc["ranks"]], out=doc.get("out", ""))


def read_storage(path: str | Path) -> Storage:
    doc = json.loads(Path(path).read_text())
    serve = doc.get("serve")
    if serve is not None:
        serve = _decoded(Served, {**serve, "flows": [ServedFlow(**f) for f in serve["flows"]]})
    return Storage(serve=serve, clients=[_decoded(Client, c) for c in doc.get("clients", [])],
                   out=doc.get("out", ""))
