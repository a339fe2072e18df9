"""Storage agent: bulk TCP flows between a storage host and its clients.

``server`` mode listens on the storage port (NVMe/TCP's 4420 by default) and,
for a read pattern, streams data to every client that connects, each socket
paced to its share of the offered load with SO_MAX_PACING_RATE (TCP's own
pacing; no fq needed). ``client`` mode connects and counts the bytes it
receives, sampling the running total every 50 ms. For a write pattern the
roles of sender and receiver swap.

Same controller protocol as the ring agent: ``READY``, then ``GO <t0_ns>`` on
stdin; runs until ``STOP`` on stdin or SIGTERM; writes results JSON; ``DONE``.
Standard library only, so it starts fast.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time

SO_MAX_PACING_RATE = 47
CHUNK = 1 << 20
SAMPLE_NS = 50_000_000


def _stream_out(conn: socket.socket, pacing_bytes_per_s: int, stop: threading.Event) -> None:
    if pacing_bytes_per_s:
        conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, pacing_bytes_per_s)
    data = memoryview(bytes(CHUNK))
    try:
        while not stop.is_set():
            conn.sendall(data)
    except OSError:
        pass


def _count_in(conn: socket.socket, samples: list, stop: threading.Event) -> None:
    buf = bytearray(CHUNK)
    total, last = 0, 0
    conn.settimeout(0.2)
    while not stop.is_set():
        try:
            n = conn.recv_into(buf)
        except TimeoutError:
            n = -1
        except OSError:
            break
        if n == 0:
            break
        total += max(n, 0)
        now = time.monotonic_ns()
        if now - last >= SAMPLE_NS:
            samples.append((now, total))
            last = now
    samples.append((time.monotonic_ns(), total))


def run(cfg: dict, stdin) -> dict:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sending = (cfg["mode"] == "server") == (cfg["pattern"] == "read")
    samples: list[tuple[int, int]] = []
    threads = []
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

    conns: list[socket.socket] = []

    def worker(conn: socket.socket) -> threading.Thread:
        conns.append(conn)
        target, args = ((_stream_out, (conn, cfg["pacing_bytes_per_s"], stop)) if sending
                        else (_count_in, (conn, samples, stop)))
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        return t

    if cfg["mode"] == "server":
        def accept_loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = lsock.accept()
                except TimeoutError:
                    continue
                threads.append(worker(conn))
        threading.Thread(target=accept_loop, daemon=True).start()
    else:
        conn = socket.create_connection((cfg["server_ip"], cfg["port"]), timeout=5)
        threads.append(worker(conn))

    threading.Thread(target=lambda: (stdin.readline(), stop.set()), daemon=True).start()
    while not stop.is_set():
        stop.wait(0.2)
    for conn in conns:  # wake threads blocked in send or receive
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    for t in threads:
        t.join(timeout=1)
    return {"samples": samples, "aborted": False}


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    result = run(cfg, sys.stdin)
    with open(cfg["out"], "w") as f:
        json.dump(result, f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
