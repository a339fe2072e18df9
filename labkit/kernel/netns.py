"""Entering the network namespace of an emulated node from Python.

Mininet's nodes live in unnamed namespaces held by their shell process, so a
namespace is addressed by that process id (``/proc/<pid>/ns/net``). A
:class:`Netns` keeps the namespace open by file descriptor, and :meth:`Netns.run`
executes a function in a short-lived thread that has joined it with setns(2):
the calling thread, and so the rest of labkit, stays in its own namespace.
Netlink sockets (pyroute2, libbpf's tc calls) opened inside that thread belong
to the node's namespace for their whole life.

Hand-written because Python 3.11 has no ``os.setns`` and pyroute2's namespace
support forks a helper process per socket.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd``."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def in_thread(fn: Callable[[], T], name: str = "labkit-netlink") -> T:
    """Call ``fn()`` in a short-lived thread of its own; its result, or its error raised
    here. Besides :meth:`Netns.run`, for pyroute2 in the caller's namespace: its
    synchronous API runs an asyncio loop of its own, which it cannot in a thread where
    one already runs (a notebook kernel's)."""
    result: list = []
    error: list[BaseException] = []

    def body() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


class Netns:
    """A node's network namespace, held open by fd until :meth:`close`."""

    def __init__(self, pid: int, name: str = ""):
        self.pid = pid
        self.name = name or str(pid)
        self.fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.inode = os.fstat(self.fd).st_ino  # what the kernel calls net->ns.inum

    @classmethod
    def inherited(cls, fd: int, name: str = "") -> Netns:
        """The namespace open at ``fd``, handed over by the process that started this one."""
        ns = cls.__new__(cls)
        ns.pid, ns.name, ns.fd = 0, name or f"fd{fd}", fd
        ns.inode = os.fstat(fd).st_ino
        return ns

    def run(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Call ``fn(*args, **kwargs)`` inside this namespace and return its result."""
        def entered() -> T:
            setns(self.fd)
            return fn(*args, **kwargs)

        return in_thread(entered, f"netns-{self.name}")

    def thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A (not yet started) thread that runs ``target`` inside this namespace."""

        def body() -> None:
            setns(self.fd)
            target()

        return threading.Thread(target=body, name=name, daemon=True)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"Netns({self.name!r}, pid={self.pid})"
