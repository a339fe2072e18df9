"""Storage agent: NVMe/TCP reads or writes between a storage host and its clients.

``server`` mode is the NVMe/TCP target on the storage port (4420 by default),
``client`` mode the host, with one TCP connection per I/O queue (``queues``).
After the ICReq/ICResp exchange each queue keeps ``QUEUE_DEPTH`` commands of
``io_bytes`` in flight:

* read: CapsuleCmd(Read) → target sends C2HData with the blocks → CapsuleResp;
* write: CapsuleCmd(Write) → target sends R2T → host sends H2CData → CapsuleResp.

Whichever side sends data paces its socket to its share of the offered load with
SO_MAX_PACING_RATE (TCP's own pacing; no fq needed). The side that receives data
samples the running total of data bytes every 50 ms. PDUs are copies of templates
built with scapy (:mod:`labkit.traffic.nvme`), patched at the offsets in
:mod:`labkit.traffic.wire`; tshark dissects the streams as NVMe/TCP.

Same controller protocol as the ring agent: ``READY``, then ``GO <t0_ns>`` on
stdin; runs until ``STOP`` on stdin or SIGTERM; writes results JSON; ``DONE``.
Standard library only (plus ``wire``), so it starts fast.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time

from labkit.traffic import wire

SO_MAX_PACING_RATE = 47
SAMPLE_NS = 50_000_000
QUEUE_DEPTH = 4


class Stream:
    """One NVMe/TCP connection: exact reads of PDUs, counted data bytes."""

    def __init__(self, conn: socket.socket, samples: list, counting: bool):
        self.conn = conn
        self.samples = samples  # (t_ns, data bytes so far), shared by a process's streams
        self.counting = counting
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)

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

    def read_pdu(self) -> tuple[int, memoryview, int]:
        """(pdu type, header, data length) — the data itself is read and dropped."""
        common = bytes(self.read_exact(wire.CH.size))
        kind, _, hlen, _, plen = wire.CH.unpack(common)
        header = common + bytes(self.read_exact(hlen - wire.CH.size))
        data = plen - hlen
        if data:
            self.read_exact(data)
            if self.counting:
                self.count(data)
        return kind, memoryview(header), data

    def count(self, n: int) -> None:
        total = (self.samples[-1][1] if self.samples else 0) + n
        now = time.monotonic_ns()
        if not self.samples or now - self.samples[-1][0] >= SAMPLE_NS:
            self.samples.append((now, total))
        else:
            self.samples[-1] = (self.samples[-1][0], total)


def _pdu(template: bytes, *patches: tuple[int, int, int]) -> bytearray:
    """A copy of ``template`` with (offset, width, value) little-endian patches."""
    pdu = bytearray(template)
    for offset, width, value in patches:
        pdu[offset:offset + width] = value.to_bytes(width, "little")
    return pdu


def _u16(view: memoryview, offset: int) -> int:
    return int.from_bytes(view[offset:offset + 2], "little")


def serve(stream: Stream, cfg: dict, stop: threading.Event) -> None:
    """The target: answer the host's commands until it goes away."""
    t = cfg["pdus"]
    kind, _, _ = stream.read_pdu()
    if kind != wire.ICREQ:
        raise ValueError(f"expected ICReq, got PDU type {kind}")
    stream.conn.sendall(t["icresp"])
    payload = bytes(cfg["io_bytes"])
    while not stop.is_set():
        kind, hdr, _ = stream.read_pdu()
        if kind != wire.CAPSULE_CMD:
            continue
        cid = _u16(hdr, wire.CMD_CID)
        if hdr[wire.CMD_OPCODE] == wire.NVME_READ:
            stream.conn.sendall(_pdu(t["c2h"], (wire.DATA_CCCID, 2, cid)))
            stream.conn.sendall(payload)
        else:  # write: ask for the data, take it
            stream.conn.sendall(_pdu(t["r2t"], (wire.DATA_CCCID, 2, cid)))
            stream.read_pdu()  # H2CData (counted: this side receives the data)
        stream.conn.sendall(_pdu(t["resp"], (wire.RESP_CID, 2, cid)))


def host(stream: Stream, cfg: dict, stop: threading.Event) -> None:
    """The host: keep QUEUE_DEPTH reads or writes in flight."""
    t = cfg["pdus"]
    stream.conn.sendall(t["icreq"])
    if stream.read_pdu()[0] != wire.ICRESP:
        raise ValueError("expected ICResp")
    command = t["read" if cfg["pattern"] == "read" else "write"]
    blocks = cfg["io_bytes"] // wire.BLOCK
    payload = bytes(cfg["io_bytes"])
    next_lba = 0

    def submit(cid: int) -> None:
        nonlocal next_lba
        stream.conn.sendall(_pdu(command, (wire.CMD_CID, 2, cid), (wire.CMD_SLBA, 8, next_lba)))
        next_lba += blocks

    for cid in range(QUEUE_DEPTH):
        submit(cid)
    while not stop.is_set():
        kind, hdr, _ = stream.read_pdu()
        if kind == wire.R2T:  # the target is ready for a write's data
            stream.conn.sendall(_pdu(t["h2c"], (wire.DATA_CCCID, 2, _u16(hdr, wire.DATA_CCCID))))
            stream.conn.sendall(payload)
        elif kind == wire.CAPSULE_RESP:
            submit(_u16(hdr, wire.RESP_CID))


def run(cfg: dict, stdin) -> dict:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sends_data = (cfg["mode"] == "server") == (cfg["pattern"] == "read")
    samples: list[tuple[int, int]] = []
    conns: list[socket.socket] = []
    errors: list[str] = []
    if cfg["mode"] == "server":
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("0.0.0.0", cfg["port"]))
        lsock.listen(64)
        lsock.settimeout(0.2)
    print("READY", flush=True)
    line = stdin.readline().split()
    if not line or line[0] != "GO":
        return {"samples": [], "aborted": True}

    def start(conn: socket.socket, role) -> None:
        if sends_data and cfg["pacing_bytes_per_s"]:
            conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, cfg["pacing_bytes_per_s"])
        conns.append(conn)

        def body() -> None:
            try:
                role(Stream(conn, samples, counting=not sends_data), cfg, stop)
            except (OSError, ConnectionError, ValueError) as exc:
                if not stop.is_set():
                    errors.append(str(exc))

        threading.Thread(target=body, daemon=True).start()

    if cfg["mode"] == "server":
        def accept_loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = lsock.accept()
                except TimeoutError:
                    continue
                start(conn, serve)
        threading.Thread(target=accept_loop, daemon=True).start()
    else:
        for _ in range(cfg.get("queues", 1)):  # one TCP connection per I/O queue
            start(socket.create_connection((cfg["server_ip"], cfg["port"]), timeout=5), host)

    threading.Thread(target=lambda: (stdin.readline(), stop.set()), daemon=True).start()
    while not stop.is_set():
        stop.wait(0.2)
    for conn in conns:  # wake threads blocked in send or receive
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    return {"samples": samples, "aborted": False, "errors": errors}


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    cfg["pdus"] = {k: bytes.fromhex(v) for k, v in cfg["templates"].items()}
    result = run(cfg, sys.stdin)
    with open(cfg["out"], "w") as f:
        json.dump(result, f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
