"""A batching UDP sender: ``sendmmsg(2)`` over prebuilt packet slots.

``BatchSender`` owns ``batch`` packet slots in one buffer and the ``mmsghdr``
array that points at them, both built once. The caller copies a template into a
slot, patches a few fields in place (PSN, stamp), and :meth:`BatchSender.flush`
hands the whole batch to the kernel in one system call.

Hand-written with ctypes because Python's socket module has no ``sendmmsg``;
standard library only, so traffic agents start fast.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


_sendmmsg = _libc.sendmmsg
_sendmmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_Mmsghdr), ctypes.c_uint, ctypes.c_int]
_sendmmsg.restype = ctypes.c_int
MSG_DONTWAIT = 0x40


def _sockaddr_in(ip: str, port: int) -> ctypes.Array:
    raw = struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(ip)
    return ctypes.create_string_buffer(raw.ljust(16, b"\0"), 16)


class BatchSender:
    """Up to ``batch`` datagrams per ``sendmmsg`` to one destination."""

    def __init__(self, sock: socket.socket, dest: tuple[str, int], batch: int = 32,
                 slot_bytes: int = 9000):
        self.fd = sock.fileno()
        self.batch = batch
        self.slot_bytes = slot_bytes
        self.buf = bytearray(batch * slot_bytes)
        self.view = memoryview(self.buf)
        self._c_buf = (ctypes.c_char * len(self.buf)).from_buffer(self.buf)
        base = ctypes.addressof(self._c_buf)
        self._addr = _sockaddr_in(*dest)
        self._iov = (_Iovec * batch)()
        self._msgs = (_Mmsghdr * batch)()
        for i in range(batch):
            self._iov[i].base = base + i * slot_bytes
            m = self._msgs[i].hdr
            m.name = ctypes.addressof(self._addr)
            m.namelen = 16
            m.iov = ctypes.pointer(self._iov[i])
            m.iovlen = 1
        self.count = 0  # slots filled since the last flush

    def slot(self, data: bytes | bytearray) -> memoryview:
        """Copy ``data`` into the next slot and return the slot for in-place patching."""
        i = self.count
        start = i * self.slot_bytes
        end = start + len(data)
        self.view[start:end] = data
        self._iov[i].len = len(data)
        self.count = i + 1
        return self.view[start:end]

    def flush(self, blocking: bool = False) -> int:
        """Send the filled slots in order; returns how many the kernel took. The slots are
        emptied either way: the caller offers what was not taken again."""
        count, self.count = self.count, 0
        if not count:
            return 0
        sent = _sendmmsg(self.fd, self._msgs, count, 0 if blocking else MSG_DONTWAIT)
        if sent < 0:
            err = ctypes.get_errno()
            if err in (11, 105):  # EAGAIN, ENOBUFS: nothing went out this time
                return 0
            raise OSError(err, f"sendmmsg: {os.strerror(err)}")
        return sent

    def full(self) -> bool:
        return self.count >= self.batch


def blast(dest_ip: str, seconds: float, template: bytes) -> int:
    """Send copies of a RoCEv2 ``template`` (a UDP payload) to ``dest_ip`` for ``seconds``,
    PSN patched per packet; returns how many the kernel took (the sender benchmark)."""
    import time

    from labkit.traffic import wire

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out = BatchSender(sock, (dest_ip, wire.ROCEV2_PORT), batch=64,
                      slot_bytes=len(template))
    psn, sent, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(out.batch):
            out.slot(template)[wire.PSN:wire.PSN + 3] = (psn & wire.PSN_MASK).to_bytes(3, "big")
            psn += 1
        took = out.flush(blocking=True)
        sent += took
        psn -= out.batch - took
    return sent


if __name__ == "__main__":  # python -m labkit.traffic.sender DEST_IP SECONDS TEMPLATE_HEX
    import sys

    print(blast(sys.argv[1], float(sys.argv[2]), bytes.fromhex(sys.argv[3])))
