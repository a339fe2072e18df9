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
SO_MAX_PACING_RATE (TCP's own pacing; no fq needed), or, under a valve, paces its
writes with the valve's :class:`Allowance`; the target knows a
connection's entry from the client's source port, which falls in the entry's range.
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

from labkit import abi
from labkit.traffic import configs, wire

SO_MAX_PACING_RATE = 47
SAMPLE_NS = 50_000_000
VALVED_SNDBUF = 8 * 1024  # the kernel doubles it
VALVED_CHUNK = 16 * 1024  # under a valve, data is written in chunks it allows


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

    def __init__(self, conn: socket.socket, counter: Counter | None,
                 allowance: Allowance | None = None):
        self.conn = conn
        self.counter = counter  # counts data this side receives, if it is the receiver
        self.allowance = allowance  # what the host's valve lets this side send
        self.pacing = 0  # bytes/s the entry offers (0: as fast as it can)
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)
        self.send_lock = threading.Lock()

    def send(self, *parts: bytes) -> None:
        with self.send_lock:
            for part in parts:
                self.conn.sendall(part)

    def send_data(self, header: bytes, data: bytes, stop: threading.Event) -> None:
        """A data PDU; under a valve, each chunk once the valve's allowance covers it."""
        if not self.allowance:
            self.send(header, data)
            return
        with self.send_lock:
            self.conn.sendall(header)
            view = memoryview(data)
            for at in range(0, len(data), VALVED_CHUNK):
                chunk = view[at:at + VALVED_CHUNK]
                self.allowance.take(len(chunk), stop, self.pacing)
                self.conn.sendall(chunk)

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
            stream.send_data(_pdu(t["c2h"], (4, 4, wire.DATA_HDR_LEN + length),
                                  (wire.DATA_CCCID, 2, cid), (wire.DATA_LEN_AT, 4, length)),
                             zeros, stop)
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

    def __init__(self, stream: Stream, entry: configs.Client, ios: list):
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
            self.ios.append((self.entry.name, t, now - t, self.entry.io_bytes))
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
            stream.send_data(_pdu(t["h2c"], (wire.DATA_CCCID, 2, _uint(hdr, wire.DATA_CCCID))),
                             payload, stop)
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


def rate_in_force(setting: tuple[int, int, int, int], now_ns: int) -> tuple[int, int]:
    """Under a valve's ``setting`` (rate and busy rate in bytes/s, the busy window's
    start and end), the rate in force at ``now_ns`` (0: open) and when it changes
    next (the window's next edge; 0: not before the setting does)."""
    rate, busy, start, end = setting
    if not busy or now_ns >= end:
        return rate, 0
    return (busy, end) if now_ns >= start else (rate, start)


class Allowance:
    """What the host's valve lets each of the host's storage senders send, in the
    application, before the data reaches a socket.

    The valve (bpf/valve.bpf.c) polices in the kernel, but TCP facing a policer
    loses packets and waits out retransmission timers, and pacing a socket down
    leaves its next packet stuck behind the slow rate when the rate comes back.
    So the senders take the valve's word before they write: every ``follow_ms`` (set by
    the controller) this reads the valve's maps (file descriptors inherited from labkit) —
    the lane's rate, its busy rate and the job's phase window — and :meth:`take` holds a
    write until the sender's share of the rate in force covers it (a token bucket of one
    write). The busy rate is in force from ``lead_ms`` before the window opens (so what
    sits in socket buffers drains before the collective starts) until it closes; the
    window is known in advance, so senders switch at its edges, not at the next read. An
    open valve passes writes at once.
    """

    def __init__(self, cfg: configs.ValveFollow):
        from labkit.bpf import InheritedMap  # only under a valve: agents start fast
        self.valve, self.phase = InheritedMap(cfg.config_fd), InheritedMap(cfg.phase_fd)
        self.lane = cfg.lane
        self.lead_ns = int(cfg.lead_ms * 1e6)
        self.period_s = cfg.follow_ms / 1e3
        self.senders = 0  # the host's sending connections share the lane's rate
        self.setting = (0, 0, 0, 0)  # see rate_in_force; busy from lead_ms early
        self.changed = threading.Condition()

    def read(self) -> tuple[int, int, int, int]:
        rate, _, _, busy, _ = abi.VALVE_LANE.unpack_from(
            self.valve.lookup(0, abi.VALVE_CONFIG_BYTES), abi.VALVE_LANE.size * self.lane)
        start, end, *_ = abi.JOB_PHASE.unpack(self.phase.lookup(0, abi.JOB_PHASE.size))
        return rate, busy, start - self.lead_ns, end

    def follow(self, stop: threading.Event) -> None:
        while not stop.wait(self.period_s):
            setting = self.read()
            if setting != self.setting:
                with self.changed:
                    self.setting = setting
                    self.changed.notify_all()

    def take(self, nbytes: int, stop: threading.Event, most: int = 0) -> None:
        """Wait until this sender may write ``nbytes``: one sender's share of the rate,
        and at most ``most`` bytes/s (its own pace; 0: none)."""
        waited_since = time.monotonic_ns()
        with self.changed:
            while not stop.is_set():
                now = time.monotonic_ns()
                rate, edge = rate_in_force(self.setting, now)
                limits = [r for r in (rate / max(self.senders, 1), most) if r]
                if not limits:
                    return
                due = waited_since + nbytes / min(limits) * 1e9
                if now >= due:
                    return
                wake = min(due, edge) if edge else due
                self.changed.wait(min((wake - now) / 1e9, 0.05))


def run(cfg: configs.Storage, stdin) -> dict:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counters: dict[str, Counter] = {}
    ios: list[tuple] = []
    conns: list[socket.socket] = []
    errors: list[tuple[int, str]] = []  # (when, what)
    allowance = Allowance(cfg.valve) if cfg.valve else None
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
        return {"samples": {}, "ios": [], "aborted": True, "errors": []}
    t0_ns = int(line[1])

    def start(stream: Stream, pacing: int, sends: bool, body) -> None:
        conns.append(stream.conn)
        if sends and allowance:
            # what waits — for the valve, or for the entry's pace — waits here, not in
            # a socket buffer that would still be draining when a collective starts
            stream.conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, VALVED_SNDBUF)
            stream.allowance, stream.pacing = allowance, pacing
            allowance.senders += 1
        elif pacing:
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

    def accept_loop(lsock: socket.socket) -> None:
        templates = serve_cfg.templates
        while not stop.is_set():
            try:
                conn, (_, sport) = lsock.accept()
            except TimeoutError:
                continue
            flow = next((f for f in serve_cfg.flows if f.sport_lo <= sport <= f.sport_hi), None)
            if flow is None:
                errors.append((time.monotonic_ns(), f"connection from unknown source port {sport}"))
                conn.close()
                continue
            sends = flow.pattern == "read"
            start(Stream(conn, None if sends else counter(flow.name)),
                  flow.pacing_bytes_per_s if sends else 0, sends,
                  lambda s: serve(s, templates, stop))

    for lsock in listeners:
        threading.Thread(target=accept_loop, args=(lsock,), daemon=True).start()
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
            start(stream, entry.pacing_bytes_per_s if sends else 0, sends,
                  lambda s, e=entry, i=issuer: host(s, e, i, stop))
        threading.Thread(target=drive_arrivals, daemon=True,
                         args=(issuers, entry.arrival, t0_ns, random.Random(entry.seed),
                               entry.ios_per_s, stop)).start()

    if allowance:
        threading.Thread(target=allowance.follow, args=(stop,), daemon=True).start()
    threading.Thread(target=lambda: (stdin.readline(), stop.set()), daemon=True).start()
    while not stop.is_set():
        stop.wait(0.2)
    for conn in conns:  # wake threads blocked in send or receive
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    return {"samples": {name: c.samples for name, c in counters.items()},
            "ios": ios, "aborted": False, "errors": errors}


def main() -> None:
    cfg = configs.read_storage(sys.argv[1])
    result = run(cfg, sys.stdin)
    with open(cfg.out, "w") as f:
        json.dump(result, f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
