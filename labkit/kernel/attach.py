"""Where a loaded program or map reaches the kernel outside its object: links of
tracing and iterator programs, ring-buffer consumers (by a map's fd), filters on clsact
hooks (``bpf_tc_hook_create``/``bpf_tc_attach``, remembered for detaching), and pins
under ``/sys/fs/bpf/labkit/<run>``. Everything here is re-exported by
:mod:`labkit.kernel.bpf`.

tc calls act on the network namespace of the calling thread: wrap them in
:func:`labkit.kernel.netns.run_in` to reach a node's interfaces.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from labkit.kernel.libbpf import BpfError, TcHook, TcOpts, check, last_errno, lib

Recorder = Callable[..., None]  # e.g. Registry.add: record(kind, **fields)


class Attachable(Protocol):
    """A loaded program (:class:`labkit.kernel.bpf.Program`) as tc attaches it."""

    name: str
    fd: int


PIN_ROOT = Path("/sys/fs/bpf/labkit")
BPF_TC_INGRESS = 1 << 0
BPF_TC_EGRESS = 1 << 1


# --- links and ring buffers --------------------------------------------------------------


class TracingLink:
    """A bpf_link of a tracing program; destroyed by :meth:`close`."""

    def __init__(self, ptr: int):
        self._ptr: int | None = ptr

    def close(self) -> None:
        if self._ptr:
            lib.bpf_link__destroy(self._ptr)
            self._ptr = None


class Iterator(TracingLink):
    """A bpf_link of an iterator program."""

    def run(self) -> None:
        """Run the program over every object it iterates, in the calling thread's network
        namespace (where a socket iterator looks): one read of a fresh iterator."""
        fd = check(lib.bpf_iter_create(lib.bpf_link__fd(self._ptr)), "bpf_iter_create")
        try:
            while os.read(fd, 4096):
                pass
        finally:
            os.close(fd)


_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class RingBuffer:
    """A consumer of a BPF_MAP_TYPE_RINGBUF map (by its fd: a :class:`Map`'s, or one a
    process was handed): each record is handed to ``on_record`` as bytes, from the
    thread that calls :meth:`poll`."""

    def __init__(self, ring_fd: int, on_record: Callable[[bytes], None]):
        def sample(_ctx, data, size):
            on_record(ctypes.string_at(data, size))
            return 0

        self._callback = _SAMPLE_FN(sample)  # kept alive as long as the ring buffer
        self._ptr = lib.ring_buffer__new(ring_fd, self._callback, None, None)
        if not self._ptr:
            raise BpfError(f"ring buffer on map fd {ring_fd}", last_errno())

    def poll(self, timeout_ms: int) -> int:
        """Consume what is there, waiting up to ``timeout_ms`` for the first record."""
        n = lib.ring_buffer__poll(self._ptr, timeout_ms)
        if n < 0 and n != -errno_mod.EINTR:
            raise BpfError("ring buffer poll", n)
        return max(n, 0)

    def consume(self) -> int:
        return max(lib.ring_buffer__consume(self._ptr), 0)

    def close(self) -> None:
        if self._ptr:
            lib.ring_buffer__free(self._ptr)
            self._ptr = None


# --- tc attachment (clsact) ---------------------------------------------------------------


@dataclass
class TcAttachment:
    """A program attached to a clsact hook of one interface (in one namespace)."""

    ifindex: int
    attach_point: int
    handle: int
    priority: int
    prog_id: int

    def detach(self) -> None:
        """Remove the filter; call in the namespace it was attached in."""
        hook = TcHook(sz=ctypes.sizeof(TcHook), ifindex=self.ifindex,
                      attach_point=self.attach_point)
        opts = TcOpts(sz=ctypes.sizeof(TcOpts), handle=self.handle, priority=self.priority)
        ret = lib.bpf_tc_detach(ctypes.byref(hook), ctypes.byref(opts))
        if ret < 0 and ret != -errno_mod.ENOENT and ret != -errno_mod.ENODEV:
            raise BpfError(f"tc detach from ifindex {self.ifindex}", ret)


def detach_all(attachments: list) -> None:
    """Detach (namespace, TcAttachment) pairs whose namespace is still open, and forget
    them; a namespace that is going away takes its filters with it anyway."""
    for ns, attachment in attachments:
        if ns.fd >= 0:
            try:
                ns.run(attachment.detach)
            except (BpfError, OSError):
                pass
    attachments.clear()


def tc_attach(program: Attachable, ifindex: int, egress: bool = True,
              priority: int = 0) -> TcAttachment:
    """Attach ``program`` as a direct-action filter on the clsact hook of ``ifindex``.

    Filters run in ``priority`` order (lower first; 0: the kernel picks). Creates the
    clsact qdisc when absent. Acts in the calling thread's namespace.
    """
    point = BPF_TC_EGRESS if egress else BPF_TC_INGRESS
    hook = TcHook(sz=ctypes.sizeof(TcHook), ifindex=ifindex, attach_point=point)
    ret = lib.bpf_tc_hook_create(ctypes.byref(hook))
    if ret < 0 and ret != -errno_mod.EEXIST:
        raise BpfError(f"clsact hook on ifindex {ifindex}", ret)
    opts = TcOpts(sz=ctypes.sizeof(TcOpts), prog_fd=program.fd, priority=priority)
    check(lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts)),
           f"tc attach of {program.name} to ifindex {ifindex}")
    return TcAttachment(ifindex, point, opts.handle, opts.priority, opts.prog_id)


def attach_filter(ns, program: Attachable, ifname: str, ifindex: int, priority: int,
                  attachments: list, record: Recorder | None = None,
                  egress: bool = True) -> TcAttachment:
    """:func:`tc_attach` inside namespace ``ns`` (a :class:`labkit.kernel.netns.Netns`), kept in
    ``attachments`` for :func:`detach_all` and told to ``record``."""
    attachment = ns.run(tc_attach, program, ifindex, egress, priority)
    attachments.append((ns, attachment))
    if record:
        record("tc_filter", node=ns.name, ifname=ifname, prog_id=attachment.prog_id,
               handle=attachment.handle, priority=attachment.priority,
               **({} if egress else {"ingress": True}))
    return attachment


# --- pins ---------------------------------------------------------------------------------


def pin_dir(run_id: str) -> Path:
    """Create (root-only) and return ``/sys/fs/bpf/labkit/<run_id>``."""
    if not os.path.ismount("/sys/fs/bpf"):
        raise BpfError("/sys/fs/bpf is not a bpffs mount (run `make setup` or `labkit doctor`)",
                       errno_mod.ENOENT)
    path = PIN_ROOT / run_id
    PIN_ROOT.mkdir(mode=0o700, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def unpin_dir(path: Path) -> None:
    """Remove the pins in ``path`` and the directory; the root stays if others use it."""
    if not path.exists():
        return
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()
    try:
        PIN_ROOT.rmdir()
    except OSError:
        pass
