"""Storage agent: one process per host, NVMe/TCP target and/or host for storage entries.

A scenario's storage entries (dataset reads, checkpoint writes, metadata I/O) each
have a server and clients. On a host this agent serves the entries the host is the
server of (``serve``) and runs a client for each entry it is a client of
(``clients``), one TCP connection per I/O queue. After the ICReq/ICResp exchange:

* read: CapsuleCmd(Read) → target sends C2HData with the blocks → CapsuleResp;
* write: CapsuleCmd(Write) → target sends R2T → host sends H2CData → CapsuleResp.

The target takes every length from the command it answers. A client's
:class:`Issuer` decides when commands go out (its arrival process): ``constant``
keeps ``queue_depth`` in flight, ``on_off`` only while its window is open (every
client's windows are aligned to the shared start time, so checkpoints burst
together), ``poisson`` at exponential gaps drawn from a seeded generator, queueing
arrivals that find the queue full. Each I/O's time from arrival to completion is
recorded.

The data sender paces its socket to the entry's share of the offered load with
SO_MAX_PACING_RATE (TCP's own pacing; no fq needed) and knows nothing of valves: a
controller holds it in the kernel like any program (bpf/valve.bpf.c). The target knows
a connection's entry from the client's source port, which falls in the entry's range.
The data receiver samples the running total of data bytes every 50 ms.

Same controller protocol as the collective agent: ``READY``, then ``GO <t0_ns>`` on
stdin; runs until ``STOP`` on stdin or SIGTERM; writes results JSON; ``DONE``.
Standard library only (plus ``wire``), so it starts fast.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import sys
import threading
import time
from collections import deque

from labkit.model.traffic import configs, wire
from labkit.model.traffic.results import IoDone, StorageResult

SO_MAX_PACING_RATE = 47
SAMPLE_NS = 50_000_000


class Counter:
    """Running total of one entry's data bytes, sampled every SAMPLE_NS."""

    def __init__(self):
        self.samples: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        now = time.monotonic_ns()
        with self.lock:
            total = (self.samples[-1][1] if self.samples else 0) + n
            if not self.samples or now - self.samples[-1][0] >= SAMPLE_NS:
                self.samples.append((now, total))
            else:
                self.samples[-1] = (self.samples[-1][0], total)


class Stream:
    """One NVMe/TCP connection: exact reads of PDUs, counted data bytes, locked sends."""

    def __init__(self, conn: socket.socket, counter: Counter | None):
        self.conn = conn
        self.counter = counter  # counts data this side receives, if it is the receiver
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)
        self.send_lock = threading.Lock()

    def send(self, *parts: bytes | bytearray) -> None:
        with self.send_lock:
            for part in parts:
                self.conn.sendall(part)

    def read_exact(self, n: int) -> memoryview:
        if n > len(self.buf):
            self.buf = bytearray(n)
            self.view = memoryview(self.buf)
        got = 0
        while got < n:
            k = self.conn.recv_into(self.view[got:n])
            if k == 0:
                raise ConnectionError("peer closed the connection")
            got += k
        return self.view[:n]

    def read_pdu(self) -> tuple[int, memoryview]:
        """(pdu type, header) — the data, if any, is read, counted and dropped."""
        common = bytes(self.read_exact(wire.CH.size))
        kind, _, hlen, _, plen = wire.CH.unpack(common)
        header = common + bytes(self.read_exact(hlen - wire.CH.size))
        data = plen - hlen
        if data:
            self.read_exact(data)
            if self.counter:
                self.counter.add(data)
        return kind, memoryview(header)


def _pdu(template: bytes, *patches: tuple[int, int, int]) -> bytearray:
    """A copy of ``template`` with (offset, width, value) little-endian patches."""
    pdu = bytearray(template)
    for offset, width, value in patches:
        pdu[offset:offset + width] = value.to_bytes(width, "little")
    return pdu


def _uint(view: memoryview, offset: int, width: int = 2) -> int:
    return int.from_bytes(view[offset:offset + width], "little")


def serve(stream: Stream, t: dict, stop: threading.Event) -> None:
    """The target: answer the host's commands until it goes away."""
    kind, _ = stream.read_pdu()
    if kind != wire.ICREQ:
        raise ValueError(f"expected ICReq, got PDU type {kind}")
    stream.send(t["icresp"])
    zeros = bytes(0)
    while not stop.is_set():
        kind, hdr = stream.read_pdu()
        if kind != wire.CAPSULE_CMD:
            continue
        cid = _uint(hdr, wire.CMD_CID)
        length = _uint(hdr, wire.CMD_SGL_LEN, 4)
        if hdr[wire.CMD_OPCODE] == wire.NVME_READ:
            if len(zeros) != length:
                zeros = bytes(length)
            stream.send(_pdu(t["c2h"], (4, 4, wire.DATA_HDR_LEN + length),
                             (wire.DATA_CCCID, 2, cid), (wire.DATA_LEN_AT, 4, length)), zeros)
        else:  # write: ask for the data, take it (counted: this side receives it)
            stream.send(_pdu(t["r2t"], (wire.DATA_CCCID, 2, cid), (wire.DATA_LEN_AT, 4, length)))
            stream.read_pdu()
        stream.send(_pdu(t["resp"], (wire.RESP_CID, 2, cid)))


class Issuer:
    """A client connection's command slots and arrival queue.

    ``arrive`` queues one I/O (poisson), ``set_open`` opens or closes the window in
    which free slots are filled without waiting for arrivals (constant, on_off), and
    ``complete`` frees a slot. Decisions are taken under a lock; commands are sent
    after it is released, so a blocked send never holds up the reader.
    """

    def __init__(self, stream: Stream, entry: configs.Client, ios: list[IoDone]):
        self.stream, self.entry, self.ios = stream, entry, ios
        self.command = entry.templates["read" if entry.pattern == "read" else "write"]
        self.blocks = entry.io_bytes // wire.BLOCK
        self.free = list(range(entry.queue_depth))
        self.pending: deque[int] = deque()  # arrival times of queued I/Os
        self.arrived: dict[int, int] = {}  # cid -> arrival time
        self.open = entry.arrival["process"] == "constant"
        self.connected = False  # no command before the ICReq/ICResp exchange
        self.next_lba = 0
        self.lock = threading.Lock()

    def connect(self) -> None:
        with self.lock:
            self.connected = True
        self._fill()

    def arrive(self) -> None:
        with self.lock:
            self.pending.append(time.monotonic_ns())
        self._fill()

    def set_open(self, is_open: bool) -> None:
        with self.lock:
            self.open = is_open
        self._fill()

    def complete(self, cid: int) -> None:
        now = time.monotonic_ns()
        with self.lock:
            t = self.arrived.pop(cid, None)
            if t is None:
                return
            self.ios.append(IoDone(self.entry.name, t, now - t, self.entry.io_bytes))
            self.free.append(cid)
        self._fill()

    def _fill(self) -> None:
        commands = []
        with self.lock:
            while self.connected and self.free and (self.pending or self.open):
                cid = self.free.pop()
                self.arrived[cid] = self.pending.popleft() if self.pending else time.monotonic_ns()
                commands.append(_pdu(self.command, (wire.CMD_CID, 2, cid),
                                     (wire.CMD_SLBA, 8, self.next_lba)))
                self.next_lba += self.blocks
        if commands:
            self.stream.send(*commands)


def host(stream: Stream, entry: configs.Client, issuer: Issuer, stop: threading.Event) -> None:
    """The host's reader: answer R2Ts with data, complete I/Os on CapsuleResp."""
    t = entry.templates
    stream.send(t["icreq"])
    if stream.read_pdu()[0] != wire.ICRESP:
        raise ValueError("expected ICResp")
    payload = bytes(entry.io_bytes)
    issuer.connect()
    while not stop.is_set():
        kind, hdr = stream.read_pdu()
        if kind == wire.R2T:  # the target is ready for a write's data
            stream.send(_pdu(t["h2c"], (wire.DATA_CCCID, 2, _uint(hdr, wire.DATA_CCCID))),
                        payload)
        elif kind == wire.CAPSULE_RESP:
            issuer.complete(_uint(hdr, wire.RESP_CID))


def drive_arrivals(issuers: list[Issuer], arrival: dict, t0_ns: int, rng: random.Random,
                   ios_per_s: float, stop: threading.Event) -> None:
    """Open and close on/off windows, or draw Poisson arrivals, until stopped."""
    if arrival["process"] == "on_off":
        on, period = int(arrival["on_ms"] * 1e6), int((arrival["on_ms"] + arrival["off_ms"]) * 1e6)
        start = t0_ns + int(arrival["phase_ms"] * 1e6)
        while not stop.is_set():
            now = time.monotonic_ns()
            into = (now - start) % period if now >= start else period - (start - now)
            is_open = now >= start and into < on
            for issuer in issuers:
                issuer.set_open(is_open)
            wait = (on - into if is_open else period - into) / 1e9
            stop.wait(max(wait, 0.0005))
    elif arrival["process"] == "poisson":
        due = time.monotonic_ns()
        while not stop.is_set():
            due += int(rng.expovariate(ios_per_s) * 1e9)
            stop.wait(max(due - time.monotonic_ns(), 0) / 1e9)
            rng.choice(issuers).arrive()


def run(cfg: configs.Storage, stdin) -> StorageResult:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counters: dict[str, Counter] = {}
    ios: list[IoDone] = []
    conns: list[socket.socket] = []
    errors: list[tuple[int, str]] = []  # (when, what)
    serve_cfg = cfg.serve
    listeners = []
    if serve_cfg:
        for port in serve_cfg.ports:
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind(("0.0.0.0", port))
            lsock.listen(64)
            lsock.settimeout(0.2)
            listeners.append(lsock)
    print("READY", flush=True)
    line = stdin.readline().split()
    if not line or line[0] != "GO":
        return StorageResult(samples={}, ios=(), aborted=True, errors=())
    t0_ns = int(line[1])

    def start(stream: Stream, pacing: int, body) -> None:
        conns.append(stream.conn)
        if pacing:
            stream.conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, pacing)

        def guarded() -> None:
            try:
                body(stream)
            except (OSError, ConnectionError, ValueError) as exc:
                if not stop.is_set():
                    errors.append((time.monotonic_ns(), str(exc)))

        threading.Thread(target=guarded, daemon=True).start()

    def counter(name: str) -> Counter:
        return counters.setdefault(name, Counter())

    def accept_loop(lsock: socket.socket, served: configs.Served) -> None:
        templates = served.templates
        while not stop.is_set():
            try:
                conn, (_, sport) = lsock.accept()
            except TimeoutError:
                continue
            flow = next((f for f in served.flows if f.sport_lo <= sport <= f.sport_hi), None)
            if flow is None:
                errors.append((time.monotonic_ns(), f"connection from unknown source port {sport}"))
                conn.close()
                continue
            sends = flow.pattern == "read"
            start(Stream(conn, None if sends else counter(flow.name)),
                  flow.pacing_bytes_per_s if sends else 0,
                  lambda s: serve(s, templates, stop))

    if serve_cfg:  # the listeners are its
        for lsock in listeners:
            threading.Thread(target=accept_loop, args=(lsock, serve_cfg), daemon=True).start()
    for entry in cfg.clients:
        sends = entry.pattern == "write"
        issuers = []
        for q in range(entry.queues):  # one TCP connection per I/O queue
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            conn.bind(("0.0.0.0", entry.sport_base + q))
            conn.settimeout(5)
            conn.connect((entry.server_ip, entry.port))
            conn.settimeout(None)
            stream = Stream(conn, None if sends else counter(entry.name))
            issuer = Issuer(stream, entry, ios)
            issuers.append(issuer)
            start(stream, entry.pacing_bytes_per_s if sends else 0,
                  lambda s, e=entry, i=issuer: host(s, e, i, stop))
        threading.Thread(target=drive_arrivals, daemon=True,
                         args=(issuers, entry.arrival, t0_ns, random.Random(entry.seed),
                               entry.ios_per_s, stop)).start()

    def stop_at_next_line() -> None:
        stdin.readline()
        stop.set()

    threading.Thread(target=stop_at_next_line, daemon=True).start()
    while not stop.is_set():
        stop.wait(0.2)
    for conn in conns:  # wake threads blocked in send or receive
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    return StorageResult(samples={name: tuple(c.samples) for name, c in counters.items()},
                         ios=tuple(ios), aborted=False, errors=tuple(errors))


def main() -> None:
    cfg = configs.read_storage(sys.argv[1])
    result = run(cfg, sys.stdin)
    with open(cfg.out, "w") as f:
        json.dump(result.to_json(), f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
