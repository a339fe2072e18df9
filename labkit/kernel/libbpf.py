"""A small ctypes binding over the system libbpf (``libbpf.so.1``): the library loaded
once with every function's argument types, its messages captured per thread, its errors
(:class:`BpfError`, :class:`VerifierError`), the mirrors of its option structs, and the
calls on programs and maps the kernel holds by id (what a killed run left, run-time stats).

Why hand-written: there is no maintained Python binding for libbpf, and BCC needs
kernel headers this machine does not have. Only libbpf's stable C API is used.
Objects, maps and programs are :mod:`labkit.kernel.bpf`'s; their BTF is :mod:`.btf`'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno as errno_mod
import os
import threading
from collections.abc import Iterator
from pathlib import Path

LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG = 0, 1, 2
LOG_BUF_BYTES = 4 << 20


class BpfError(RuntimeError):
    """A libbpf call failed; ``errno`` and libbpf's own messages are attached."""

    def __init__(self, what: str, err: int, log: str = ""):
        self.errno = abs(err)
        self.log = log
        msg = f"{what}: {os.strerror(self.errno)} (errno {self.errno})"
        if log:
            msg += "\n" + log
        super().__init__(msg)


class VerifierError(BpfError):
    """The kernel's verifier rejected a program; ``log`` holds the verifier's reasoning."""


# --- libbpf and its print callback ---------------------------------------------------------

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_log = threading.local()


class _Lib:
    """Lazily loaded libbpf with argument types declared once."""

    def __init__(self) -> None:
        self._cdll: ctypes.CDLL | None = None
        self._printer: object = None  # the print callback, kept alive while libbpf holds it

    def __getattr__(self, name):
        return getattr(self.cdll, name)

    @property
    def cdll(self) -> ctypes.CDLL:
        if self._cdll is None:
            self._cdll = self._open()
        return self._cdll

    def _open(self) -> ctypes.CDLL:
        try:
            lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
        except OSError as exc:
            raise BpfError(
                "cannot load libbpf.so.1 (install Debian's libbpf1; `make setup` does)",
                errno_mod.ENOENT,
            ) from exc
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        vsnprintf = libc.vsnprintf
        vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]

        def printer(level, fmt, va_list):
            # libbpf hands us printf-style arguments: let libc format them. A verifier
            # log arrives as one message, so the buffer is large (and kept per thread).
            lines = getattr(_log, "lines", None)
            if lines is None or level > LIBBPF_INFO:
                return 0
            if getattr(_log, "buf", None) is None:
                _log.buf = ctypes.create_string_buffer(LOG_BUF_BYTES)
            vsnprintf(_log.buf, LOG_BUF_BYTES, fmt, va_list)
            lines.append(_log.buf.value.decode(errors="replace"))
            return 0

        self._printer = _PRINT_FN(printer)
        lib.libbpf_set_print.argtypes = [_PRINT_FN]
        lib.libbpf_set_print.restype = ctypes.c_void_p
        lib.libbpf_set_print(self._printer)
        for fn, res, args in _SIGNATURES:
            getattr(lib, fn).restype = res
            getattr(lib, fn).argtypes = args
        return lib


_vp, _int, _u32, _cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_char_p
_SIGNATURES = [
    ("bpf_object__open_file", _vp, [_cp, _vp]),
    ("bpf_object__load", _int, [_vp]),
    ("bpf_object__close", None, [_vp]),
    ("bpf_object__next_program", _vp, [_vp, _vp]),
    ("bpf_object__find_map_by_name", _vp, [_vp, _cp]),
    ("bpf_map__reuse_fd", _int, [_vp, _int]),
    ("bpf_object__next_map", _vp, [_vp, _vp]),
    ("bpf_program__name", _cp, [_vp]),
    ("bpf_program__fd", _int, [_vp]),
    ("bpf_program__attach", _vp, [_vp]),
    ("bpf_program__attach_iter", _vp, [_vp, _vp]),
    ("bpf_program__attach_cgroup", _vp, [_vp, _int]),
    ("bpf_map__attach_struct_ops", _vp, [_vp]),
    ("bpf_link__fd", _int, [_vp]),
    ("bpf_iter_create", _int, [_int]),
    ("bpf_map__name", _cp, [_vp]),
    ("bpf_map__fd", _int, [_vp]),
    ("bpf_map__type", _int, [_vp]),
    ("bpf_map__key_size", _u32, [_vp]),
    ("bpf_map__value_size", _u32, [_vp]),
    ("bpf_map__max_entries", _u32, [_vp]),
    ("bpf_link__destroy", _int, [_vp]),
    ("bpf_link__pin", _int, [_vp, _cp]),
    ("bpf_link__unpin", _int, [_vp]),
    ("bpf_obj_pin", _int, [_int, _cp]),
    ("bpf_enable_stats", _int, [_int]),
    ("bpf_map_lookup_elem", _int, [_int, _vp, _vp]),
    ("bpf_map_update_elem", _int, [_int, _vp, _vp, ctypes.c_uint64]),
    ("bpf_prog_test_run_opts", _int, [_int, _vp]),
    ("bpf_tc_hook_create", _int, [_vp]),
    ("bpf_tc_hook_destroy", _int, [_vp]),
    ("bpf_tc_attach", _int, [_vp, _vp]),
    ("bpf_tc_detach", _int, [_vp, _vp]),
    ("libbpf_num_possible_cpus", _int, []),
    ("libbpf_version_string", _cp, []),
    ("bpf_prog_get_fd_by_id", _int, [_u32]),
    ("bpf_map_get_fd_by_id", _int, [_u32]),
    ("bpf_map_delete_elem", _int, [_int, _vp]),
    ("ring_buffer__new", _vp, [_int, _vp, _vp, _vp]),
    ("ring_buffer__poll", _int, [_vp, _int]),
    ("ring_buffer__consume", _int, [_vp]),
    ("ring_buffer__free", None, [_vp]),
    ("bpf_obj_get_info_by_fd", _int, [_int, _vp, _vp]),
    ("bpf_object__btf", _vp, [_vp]),
    ("bpf_map__btf_key_type_id", _u32, [_vp]),
    ("bpf_map__btf_value_type_id", _u32, [_vp]),
    ("btf__parse", _vp, [_cp, _vp]),
    ("btf__free", None, [_vp]),
    ("btf__type_cnt", _u32, [_vp]),
    ("btf__type_by_id", _vp, [_vp, _u32]),
    ("btf__name_by_offset", _cp, [_vp, _u32]),
    ("btf__resolve_type", _int, [_vp, _u32]),
    ("btf__resolve_size", ctypes.c_int64, [_vp, _u32]),
]

lib = _Lib()


class CapturedLog:
    """Collect libbpf's messages emitted by this thread while the block runs."""

    def __enter__(self) -> list[str]:
        _log.lines = []
        return _log.lines

    def __exit__(self, *exc) -> None:
        _log.lines = None


def check(ret: int, what: str) -> int:
    if ret < 0:
        raise BpfError(what, ret)
    return ret


def last_errno() -> int:
    return ctypes.get_errno() or errno_mod.EINVAL


def each(obj: int, what: str) -> Iterator[int]:
    """The maps (``what``: ``"map"``) or programs (``"program"``) of an opened object."""
    step = getattr(lib, f"bpf_object__next_{what}")
    item = step(obj, None)
    while item:
        yield item
        item = step(obj, item)


# --- ctypes mirrors of libbpf's option structs (libbpf.h / bpf.h) ---------------------------


class TcHook(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("ifindex", ctypes.c_int),
        ("attach_point", ctypes.c_int),
        ("parent", ctypes.c_uint32),
    ]


class TcOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("prog_fd", ctypes.c_int),
        ("flags", ctypes.c_uint32),
        ("prog_id", ctypes.c_uint32),
        ("handle", ctypes.c_uint32),
        ("priority", ctypes.c_uint32),
    ]


class TestRunOpts(ctypes.Structure):
    __test__ = False  # not a pytest class
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


def _u32s(names: str) -> list[tuple[str, type[ctypes.c_uint32]]]:
    return [(name, ctypes.c_uint32) for name in names.split()]


class SkBuff(ctypes.Structure):
    """``struct __sk_buff`` (UAPI), the context of tc programs in test runs."""

    _fields_ = [
        *_u32s("len pkt_type mark queue_mapping protocol vlan_present vlan_tci vlan_proto "
               "priority ingress_ifindex ifindex tc_index"),
        ("cb", ctypes.c_uint32 * 5),
        *_u32s("hash tc_classid data data_end napi_id family remote_ip4 local_ip4"),
        ("remote_ip6", ctypes.c_uint32 * 4),
        ("local_ip6", ctypes.c_uint32 * 4),
        ("remote_port", ctypes.c_uint32),
        ("local_port", ctypes.c_uint32),
        ("data_meta", ctypes.c_uint32),
        ("flow_keys", ctypes.c_uint64),
        ("tstamp", ctypes.c_uint64),
        ("wire_len", ctypes.c_uint32),
        ("gso_segs", ctypes.c_uint32),
        ("sk", ctypes.c_uint64),
        ("gso_size", ctypes.c_uint32),
        ("tstamp_type", ctypes.c_uint8),
        ("hwtstamp", ctypes.c_uint64),
    ]


# --- programs and maps the kernel holds, by id or fd ---------------------------------------


def prog_info(fd: int) -> tuple[int, str]:
    """(id, name) of the program open at ``fd`` (struct bpf_prog_info: id at byte 4,
    name at byte 64)."""
    info = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(len(info))
    check(lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf_obj_get_info_by_fd")
    return (int.from_bytes(info.raw[4:8], "little"),
            info.raw[64:80].split(b"\0", 1)[0].decode(errors="replace"))


def map_info(fd: int) -> tuple[int, str]:
    """(id, name) of the map open at ``fd`` (struct bpf_map_info: id at byte 4, name at
    byte 24)."""
    info = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(len(info))
    check(lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf_obj_get_info_by_fd")
    return (int.from_bytes(info.raw[4:8], "little"),
            info.raw[24:40].split(b"\0", 1)[0].decode(errors="replace"))


def unregister_struct_ops(map_id: int, name: str) -> bool:
    """Unregister the struct_ops map ``map_id`` if it is still the map ``name`` (what a
    killed run registered): True if it was registered. Sockets still using it keep it
    until they close."""
    fd = lib.bpf_map_get_fd_by_id(map_id)
    if fd < 0:
        return False
    try:
        return map_info(fd)[1] == name[:15] and \
            lib.bpf_map_delete_elem(fd, ctypes.byref(ctypes.c_uint32(0))) == 0
    finally:
        os.close(fd)


def map_exists(map_id: int) -> bool:
    """Whether the kernel still holds map ``map_id``."""
    fd = lib.bpf_map_get_fd_by_id(map_id)
    if fd >= 0:
        os.close(fd)
    return fd >= 0


def prog_loaded(prog_id: int, name: str) -> bool:
    """Whether the kernel still holds program ``prog_id`` (and it is still ``name``)."""
    fd = lib.bpf_prog_get_fd_by_id(prog_id)
    if fd < 0:
        return False
    try:
        return prog_info(fd)[1] == name[:15]
    finally:
        os.close(fd)


def prog_stats(fd: int) -> dict[str, int]:
    """run_time_ns, run_cnt and recursion_misses of the program open at ``fd``, as the
    kernel prints them in its fdinfo (run time is counted only while stats are enabled)."""
    fields = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("run_time_ns", "run_cnt", "recursion_misses"):
            fields[key] = int(value)
    return fields


@contextlib.contextmanager
def run_time_stats():
    """Count every BPF program's run time and runs while inside (BPF_ENABLE_STATS: the
    kernel turns them off again when the returned descriptor closes, however we exit)."""
    fd = lib.bpf_enable_stats(0)  # BPF_STATS_RUN_TIME
    if fd < 0:
        raise BpfError("bpf_enable_stats", last_errno())
    try:
        yield
    finally:
        os.close(fd)


def libbpf_version() -> str:
    return lib.libbpf_version_string().decode()


def possible_cpus() -> int:
    return check(lib.libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")
