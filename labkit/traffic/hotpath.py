"""The rank agents' per-packet work in C (``hotpath.c``, built by ``make setup``).

:class:`Tx` is the send side of one RoCE queue pair: messages queued as descriptors,
packets built from scapy's templates (PSN, RETH, chunk value, stamp and ICRC patched)
and sent a batch per ``sendmmsg``, runs of equal packets as one UDP GSO send.
:class:`Rx` is a rank's receive side: one socket, every peer's queue pair; a drain
reads whole GRO runs, keeps each queue pair's expected PSN, answers with ACK, NAK and
CNP packets, and returns one event per message end, ACK and CNP. The decisions that
take a message or a timer (go-back-N, RTO, DCQCN) stay in :mod:`labkit.traffic.rc`.

Bound with ctypes (standard library only, so agents start fast); ``python -m
labkit.traffic.hotpath DEST_IP SECONDS`` sends full-size packets for the sender
benchmark.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

LIBRARY = Path(__file__).with_name("_hotpath.so")
SOURCE = Path(__file__).with_name("hotpath.c")
KINDS = ("first", "middle", "last", "only")  # enum order in hotpath.c
DELIVER, ACK, CNP = 1, 2, 3  # enum lk_event kinds
EVENT = struct.Struct("=IIQQQ")  # struct lk_event
MIN_MESSAGE, MAX_MESSAGE = 24, 0xFFFFFFFF  # a stamp and a chunk value; RETH's DMA length
READ_EVENTS = 4096  # the most events one read can cause (hotpath.c: MAX_READ_PACKETS)
MAX_EVENTS = 2 * READ_EVENTS  # a drain stops reading once fewer than READ_EVENTS are left


class HotpathMissing(RuntimeError):
    pass


def stale() -> str | None:
    """Why the compiled hot path cannot be used as it is, with the fix (None: it can). A
    library older than its source may not match these bindings."""
    if not LIBRARY.exists():
        return (f"the rank agents' compiled hot path ({LIBRARY}) is not built: run "
                "`make setup` (see `labkit doctor`)")
    if SOURCE.exists() and SOURCE.stat().st_mtime > LIBRARY.stat().st_mtime:
        return f"{LIBRARY} is older than {SOURCE.name}: run `make hotpath` (or `make setup`)"
    return None


def _load() -> ctypes.CDLL:
    if problem := stale():
        raise HotpathMissing(problem)
    lib = ctypes.CDLL(str(LIBRARY), use_errno=True)
    u8p, u32, u64, c_int, vp = (ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64,
                                ctypes.c_int, ctypes.c_void_p)
    lib.lk_tx_new.argtypes = [c_int, u32, u32, ctypes.c_uint16, ctypes.c_uint16, c_int, c_int,
                              u32, u32, ctypes.c_char_p * 4, u32 * 4]
    lib.lk_tx_new.restype = vp
    lib.lk_tx_free.argtypes = [vp]
    lib.lk_tx_enqueue.argtypes = [vp, u32, u64, u64]
    lib.lk_tx_send.argtypes = [vp, u64, u64, c_int]
    lib.lk_rx_new.argtypes = [c_int, u32, ctypes.c_uint16]
    lib.lk_rx_new.restype = vp
    lib.lk_rx_free.argtypes = [vp]
    lib.lk_rx_peer.argtypes = [vp, u32, ctypes.c_uint16, u8p, u32, u8p, u32, u8p, u32]
    lib.lk_rx_stats.argtypes = [vp, c_int, ctypes.POINTER(u64 * 4)]
    lib.lk_rx_drain.argtypes = [vp, ctypes.c_void_p, c_int]
    return lib


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def _addr(ip: str) -> int:
    """An IPv4 address as the C side keeps it: network byte order in a u32."""
    return int.from_bytes(socket.inet_aton(ip), sys.byteorder)


def _checked(result: int, what: str) -> int:
    if result < 0:
        raise OSError(-result, f"hotpath {what}: {os.strerror(-result)}")
    return result


class Tx:
    """The send side of one queue pair: ``sock`` (bound to ``sport`` at ``src_ip``) to
    ``dest``; ``templates`` are RDMA WRITE first/middle/last/only with ``mtu`` bytes of
    data each (:func:`labkit.model.traffic.roce.data_templates`)."""

    def __init__(self, sock: socket.socket, src_ip: str, sport: int, dest: tuple[str, int],
                 templates: Mapping[str, bytes | bytearray], mtu: int, seq_base: int,
                 batch: int = 32, gso: int = 1):
        if not 0 <= seq_base < 1 << 32:
            raise ValueError(f"a stamp's seq base is 32 bits, not {seq_base:#x}")
        self.sock, self.batch, self.packets = sock, batch, 0
        data = [bytes(templates[k]) for k in KINDS]
        self._c = c = lib()
        handle = c.lk_tx_new(sock.fileno(), _addr(src_ip), _addr(dest[0]), sport, dest[1],
                             gso, batch, mtu, seq_base, (ctypes.c_char_p * 4)(*data),
                             (ctypes.c_uint32 * 4)(*map(len, data)))
        if not handle:
            err = ctypes.get_errno()
            raise OSError(err, f"hotpath: cannot set up a queue pair to {dest[0]} "
                               f"(templates of {sorted(set(map(len, data)))} bytes, mtu {mtu})")
        self._h = handle

    def enqueue(self, nbytes: int, chunk: int, value: int) -> int:
        """Queue one message (24 bytes to 4 GiB - 1, RETH's DMA length): how many packets
        it takes."""
        if not MIN_MESSAGE <= nbytes <= MAX_MESSAGE:
            raise ValueError(f"a RoCE message is {MIN_MESSAGE} bytes to 4 GiB - 1, not {nbytes}")
        count = _checked(self._c.lk_tx_enqueue(self._h, nbytes, chunk, value), "enqueue")
        self.packets += count
        return count

    def send(self, first: int, stop: int, blocking: bool = False) -> int:
        """Send packets [first, stop) (at most ``batch``) in one call: how many the kernel
        took; 0 when the socket is full."""
        return _checked(self._c.lk_tx_send(self._h, first, stop, blocking), "sendmmsg")

    def __del__(self):
        if _lib is not None and getattr(self, "_h", None):
            _lib.lk_tx_free(self._h)
            self._h = None


class Rx:
    """A rank's receive side on ``sock``, bound at ``own_ip`` (replies leave from it)."""

    def __init__(self, sock: socket.socket, own_ip: str):
        self.sock = sock
        self._c = c = lib()
        self._h = c.lk_rx_new(sock.fileno(), _addr(own_ip), sock.getsockname()[1])
        if not self._h:
            raise MemoryError("hotpath: lk_rx_new")
        self._events = ctypes.create_string_buffer(MAX_EVENTS * EVENT.size)

    def add_peer(self, ip: str, port: int, ack: bytes | bytearray, nak: bytes | bytearray,
                 cnp: bytes | bytearray | None) -> int:
        """A peer's queue pair at ``ip``:``port``, answered with these templates (``cnp``
        None: marks are not answered): its index in events."""
        cnp = cnp or b""
        return _checked(self._c.lk_rx_peer(self._h, _addr(ip), port, bytes(ack), len(ack),
                                           bytes(nak), len(nak), bytes(cnp), len(cnp)), "peer")

    def drain(self) -> list[tuple[int, int, int, int, int]]:
        """Handle every packet waiting: ``(kind, peer, a, b, c)`` per message end
        (DELIVER: chunk, value, sent_ns), ACK (PSN, syndrome, 0) and CNP."""
        events: list[tuple[int, int, int, int, int]] = []
        while True:
            n = _checked(self._c.lk_rx_drain(self._h, self._events, MAX_EVENTS), "recvmsg")
            if n:
                events += EVENT.iter_unpack(ctypes.string_at(self._events, n * EVENT.size))
            if n <= MAX_EVENTS - READ_EVENTS:  # it stopped because nothing was waiting
                return events

    def stats(self, peer: int) -> dict[str, int]:
        out = (ctypes.c_uint64 * 4)()
        _checked(self._c.lk_rx_stats(self._h, peer, ctypes.byref(out)), "stats")
        return dict(zip(("messages", "bytes", "out_of_order", "cnps"), out, strict=True))

    def __del__(self):
        if _lib is not None and getattr(self, "_h", None):
            _lib.lk_rx_free(self._h)
            self._h = None


def blast(dest_ip: str, seconds: float, payload: int = 1024) -> int:
    """Send RDMA WRITE packets of ``payload`` bytes to ``dest_ip`` for ``seconds`` as a
    rank does, 64 a call, blocking: how many the kernel took. One message as long as the
    RETH's length allows, so all but its first packet are the same size. The sender
    benchmark and the fidelity test's flood."""
    import time

    from labkit.model.traffic import roce, wire

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((dest_ip, wire.ROCEV2_PORT))  # only to learn the source address
        src_ip = probe.getsockname()[0]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((src_ip, 0))
    sport = sock.getsockname()[1]
    out = Tx(sock, src_ip, sport, (dest_ip, wire.ROCEV2_PORT),
             roce.data_templates(0x101, payload), payload, 0, batch=64)
    out.enqueue(0xFFFFFFFF, 0, 0)
    sent, end = 0, time.monotonic() + seconds
    while time.monotonic() < end and sent < out.packets:
        sent += out.send(sent, sent + out.batch, blocking=True)
    return sent


if __name__ == "__main__":  # python -m labkit.traffic.hotpath DEST_IP SECONDS
    import sys

    print(blast(sys.argv[1], float(sys.argv[2])))
