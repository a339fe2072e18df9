"""A small ctypes binding over the system libbpf (``libbpf.so.1``).

Owns every call into libbpf: opening and loading objects (a verifier rejection
raises :class:`VerifierError` carrying the verifier's log), maps (read, update,
per-CPU sums), ``BPF_PROG_TEST_RUN``, tc attachment through clsact hooks
(``bpf_tc_hook_create``/``bpf_tc_attach``), tracing links, and pins.

Why hand-written: there is no maintained Python binding for libbpf, and BCC needs
kernel headers this machine does not have. Only libbpf's stable C API is used.

Objects built from ``bpf/*.bpf.c`` live in ``bpf/build/`` (see :func:`object_path`).
tc calls act on the network namespace of the calling thread: wrap them in
:func:`labkit.kernel.netns.run_in` to reach a node's interfaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno as errno_mod
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("LABKIT_BPF_BUILD", REPO_ROOT / "bpf" / "build"))
PIN_ROOT = Path("/sys/fs/bpf/labkit")

BPF_ANY = 0
BPF_TC_INGRESS = 1 << 0
BPF_TC_EGRESS = 1 << 1
MAP_ARRAY, MAP_PERCPU_ARRAY = 2, 6  # enum bpf_map_type
# enum bpf_map_type: PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE
PERCPU_MAP_TYPES = {5, MAP_PERCPU_ARRAY, 10, 19}
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


def object_names() -> list[str]:
    """Every object ``make bpf`` builds, by name (``bpf/<name>.bpf.c``)."""
    return sorted(p.name.removesuffix(".bpf.c") for p in (REPO_ROOT / "bpf").glob("*.bpf.c"))


def compile_object(source: Path, out: Path) -> Path:
    """Compile a user's ``.bpf.c`` into ``out`` as ``make bpf`` compiles labkit's own (the
    flags of the Makefile's ``bpf-flags``, labkit's headers on the include path), by an
    argument list: a path with spaces or ``$`` in it is only a path. ValueError carries
    the compiler's message."""
    flags = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO_ROOT),
                            "bpf-flags"], capture_output=True, text=True)
    done = flags if flags.returncode else subprocess.run(
        ["clang", *flags.stdout.split(), "-c", str(Path(source).resolve()), "-o",
         str(Path(out).resolve())], capture_output=True, text=True, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise ValueError(f"{source.name} does not compile:\n{(done.stderr or done.stdout)[-2000:]}")
    return out


def object_path(name: str) -> Path:
    """Path of the built object for ``bpf/<name>.bpf.c``."""
    return BUILD_DIR / f"{name}.bpf.o"


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
]

lib = _Lib()


class _CapturedLog:
    """Collect libbpf's messages emitted by this thread while the block runs."""

    def __enter__(self) -> list[str]:
        _log.lines = []
        return _log.lines

    def __exit__(self, *exc) -> None:
        _log.lines = None


def _check(ret: int, what: str) -> int:
    if ret < 0:
        raise BpfError(what, ret)
    return ret


def _errno() -> int:
    return ctypes.get_errno() or errno_mod.EINVAL


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


# --- objects, programs, maps --------------------------------------------------------------


@dataclass
class TestRun:
    """What one ``BPF_PROG_TEST_RUN`` returned."""

    __test__ = False
    retval: int
    data: bytes
    ctx: SkBuff
    duration_ns: int


class Map:
    """A map of a loaded object, addressed by raw bytes or ctypes values."""

    def __init__(self, ptr: int):
        self._ptr = ptr
        self.name = lib.bpf_map__name(ptr).decode()
        self.fd = lib.bpf_map__fd(ptr)
        self.type = lib.bpf_map__type(ptr)
        self.key_size = lib.bpf_map__key_size(ptr)
        self.value_size = lib.bpf_map__value_size(ptr)
        self.max_entries = lib.bpf_map__max_entries(ptr)
        self.percpu = self.type in PERCPU_MAP_TYPES
        # a per-CPU value is one slot per possible CPU, each rounded up to 8 bytes
        self.stride = (self.value_size + 7) // 8 * 8
        self.ncpu = possible_cpus() if self.percpu else 1
        self._int_keys: dict[int, ctypes.Array] = {}

    def _key(self, key) -> ctypes.Array:
        if isinstance(key, int) and key in self._int_keys:
            return self._int_keys[key]
        raw = key.to_bytes(self.key_size, "little") if isinstance(key, int) else bytes(key)
        if len(raw) != self.key_size:
            raise ValueError(f"map {self.name}: key is {len(raw)} bytes, expected {self.key_size}")
        buf = ctypes.create_string_buffer(raw, self.key_size)
        if isinstance(key, int) and len(self._int_keys) < 256:  # array indices: reused
            self._int_keys[key] = buf
        return buf

    def update(self, key, value) -> None:
        raw = bytes(value)
        if len(raw) != self.value_size or self.percpu:
            raise ValueError(
                f"map {self.name}: value is {len(raw)} bytes, expected {self.value_size}"
                + (" (per-CPU maps are read-only here)" if self.percpu else "")
            )
        val = ctypes.create_string_buffer(raw, self.value_size)
        if lib.bpf_map_update_elem(self.fd, self._key(key), val, BPF_ANY) < 0:
            raise BpfError(f"update of map {self.name}", _errno())

    def lookup_raw(self, key) -> bytes | None:
        """The value as the kernel copies it out: for a per-CPU map, ``ncpu`` slots of
        ``stride`` bytes (cheap to parse in bulk: telemetry polls at 125 Hz)."""
        buf = ctypes.create_string_buffer(self.stride * self.ncpu)
        if lib.bpf_map_lookup_elem(self.fd, self._key(key), buf) < 0:
            err = _errno()
            if err == errno_mod.ENOENT:
                return None
            raise BpfError(f"lookup in map {self.name}", err)
        return buf.raw

    def lookup(self, key) -> bytes | list[bytes] | None:
        """The value as bytes (a list of one value per CPU for per-CPU maps)."""
        raw = self.lookup_raw(key)
        if raw is None:
            return None
        if not self.percpu:
            return raw[: self.value_size]
        return [raw[i * self.stride : i * self.stride + self.value_size]
                for i in range(self.ncpu)]

    def value(self, key) -> bytes:
        """The value at ``key`` of a map that is not per-CPU; KeyError when it has none."""
        if self.percpu:
            raise ValueError(f"map {self.name} is per-CPU: read it with per_cpu()")
        return self._present(self.lookup_raw(key), key)[: self.value_size]

    def per_cpu(self, key) -> list[bytes]:
        """Each CPU's value at ``key`` of a per-CPU map; KeyError when it has none."""
        if not self.percpu:
            raise ValueError(f"map {self.name} is not per-CPU: read it with value()")
        raw = self._present(self.lookup_raw(key), key)
        return [raw[i * self.stride : i * self.stride + self.value_size]
                for i in range(self.ncpu)]

    def raw(self, key) -> bytes:
        """:meth:`lookup_raw`'s bytes; KeyError when the map has no value at ``key``."""
        return self._present(self.lookup_raw(key), key)

    def _present(self, raw: bytes | None, key) -> bytes:
        if raw is None:
            raise KeyError(f"map {self.name} has no value at {key!r}")
        return raw

    def pin(self, path: Path) -> None:
        _check(lib.bpf_obj_pin(self.fd, str(path).encode()), f"pin of map {self.name} at {path}")

    def attach_struct_ops(self) -> TracingLink:
        """Register a struct_ops map (a TCP congestion control, ...) until the link closes."""
        link = lib.bpf_map__attach_struct_ops(self._ptr)
        if not link:
            raise BpfError(f"registration of struct_ops {self.name}", _errno())
        return TracingLink(link)


class InheritedMap:
    """A map known only by a file descriptor this process inherited from the one that
    loaded it: how a job writes its phase into its host's valve. (Pins cannot serve:
    a Mininet node remounts /sys, so it does not see the machine's /sys/fs/bpf.)"""

    def __init__(self, fd: int):
        self.fd = fd

    def update(self, key: int, value: bytes) -> None:
        k = ctypes.c_uint32(key)
        v = ctypes.create_string_buffer(bytes(value), len(value))
        if lib.bpf_map_update_elem(self.fd, ctypes.byref(k), v, BPF_ANY) < 0:
            raise BpfError(f"update of inherited map fd {self.fd}", _errno())

    def lookup(self, key: int, size: int) -> bytes:
        """The value (``size`` bytes) at ``key`` of an array map."""
        k = ctypes.c_uint32(key)
        v = ctypes.create_string_buffer(size)
        if lib.bpf_map_lookup_elem(self.fd, ctypes.byref(k), v) < 0:
            raise BpfError(f"lookup in inherited map fd {self.fd}", _errno())
        return v.raw

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Program:
    """A program of a loaded object."""

    def __init__(self, ptr: int):
        self._ptr = ptr
        self.name = lib.bpf_program__name(ptr).decode()
        self.fd = lib.bpf_program__fd(ptr)
        self.id = prog_info(self.fd)[0]

    def test_run(self, data: bytes, ctx: SkBuff | None = None, repeat: int = 1) -> TestRun:
        """Run the program on one packet through ``BPF_PROG_TEST_RUN``."""
        data_in = ctypes.create_string_buffer(bytes(data), len(data))
        data_out = ctypes.create_string_buffer(len(data) + 512)
        ctx_in = ctx if ctx is not None else SkBuff()
        ctx_out = SkBuff()
        opts = TestRunOpts(
            sz=ctypes.sizeof(TestRunOpts),
            data_in=ctypes.cast(data_in, ctypes.c_void_p),
            data_out=ctypes.cast(data_out, ctypes.c_void_p),
            data_size_in=len(data),
            data_size_out=len(data_out),
            ctx_in=ctypes.addressof(ctx_in),
            ctx_out=ctypes.addressof(ctx_out),
            ctx_size_in=ctypes.sizeof(SkBuff),
            ctx_size_out=ctypes.sizeof(SkBuff),
            repeat=repeat,
        )
        if lib.bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)) < 0:
            raise BpfError(f"test run of {self.name}", _errno())
        return TestRun(
            opts.retval, data_out.raw[: opts.data_size_out], ctx_out, opts.duration
        )

    def attach(self) -> TracingLink:
        """Attach a tracing program (tp_btf, fentry, ...) where its section says."""
        link = lib.bpf_program__attach(self._ptr)
        if not link:
            raise BpfError(f"attach of {self.name}", _errno())
        return TracingLink(link)

    def attach_iter(self) -> Iterator:
        """Attach an iterator program (``iter/...``); read it with :meth:`Iterator.run`."""
        link = lib.bpf_program__attach_iter(self._ptr, None)
        if not link:
            raise BpfError(f"attach of iterator {self.name}", _errno())
        return Iterator(link)

    def attach_cgroup(self, cgroup_fd: int) -> TracingLink:
        """Attach a cgroup program (sock_ops, ...) to the cgroup open at ``cgroup_fd``."""
        link = lib.bpf_program__attach_cgroup(self._ptr, cgroup_fd)
        if not link:
            raise BpfError(f"attach of {self.name} to a cgroup", _errno())
        return TracingLink(link)

    def pin(self, path: Path) -> None:
        _check(lib.bpf_obj_pin(self.fd, str(path).encode()), f"pin of {self.name} at {path}")


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
        fd = _check(lib.bpf_iter_create(lib.bpf_link__fd(self._ptr)), "bpf_iter_create")
        try:
            while os.read(fd, 4096):
                pass
        finally:
            os.close(fd)


class BpfObject:
    """An object file opened and loaded into the kernel; close it to release everything."""

    def __init__(self, path: str | os.PathLike, reuse: dict[str, Map] | None = None):
        """Open and load ``path``; maps named in ``reuse`` share those of another object."""
        self.path = Path(path)
        if not self.path.is_file():
            raise BpfError(
                f"BPF object {self.path} not found (build it with `make bpf`)", errno_mod.ENOENT
            )
        with _CapturedLog() as log:
            ptr = lib.bpf_object__open_file(str(self.path).encode(), None)
        if not ptr:
            raise BpfError(f"open of {self.path}", _errno(), "\n".join(log))
        self._ptr = ptr
        for name, other in (reuse or {}).items():
            m = lib.bpf_object__find_map_by_name(ptr, name.encode())
            if not m:
                self.close()
                raise BpfError(f"{self.path.name} has no map {name}", errno_mod.ENOENT)
            if (ret := lib.bpf_map__reuse_fd(m, other.fd)) < 0:
                self.close()
                raise BpfError(f"reuse of map {name}", ret)
        with _CapturedLog() as log:
            ret = lib.bpf_object__load(ptr)
        if ret < 0:
            text = "".join(log).strip()
            self.close()
            cls = VerifierError if "PROG LOAD LOG" in text or ret == -errno_mod.EACCES else BpfError
            raise cls(f"load of {self.path.name}", ret, text)
        self.programs = {p.name: p for p in map(Program, self._iter("next_program"))}
        self.maps = {m.name: m for m in map(Map, self._iter("next_map"))}

    def _iter(self, what: str):
        fn = getattr(lib, f"bpf_object__{what}")
        item = fn(self._ptr, None)
        while item:
            yield item
            item = fn(self._ptr, item)

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            lib.bpf_object__close(self._ptr)
            self._ptr = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prog_info(fd: int) -> tuple[int, str]:
    """(id, name) of the program open at ``fd`` (struct bpf_prog_info: id at byte 4,
    name at byte 64)."""
    info = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(len(info))
    _check(lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf_obj_get_info_by_fd")
    return (int.from_bytes(info.raw[4:8], "little"),
            info.raw[64:80].split(b"\0", 1)[0].decode(errors="replace"))


def map_info(fd: int) -> tuple[int, str]:
    """(id, name) of the map open at ``fd`` (struct bpf_map_info: id at byte 4, name at
    byte 24)."""
    info = ctypes.create_string_buffer(256)
    size = ctypes.c_uint32(len(info))
    _check(lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf_obj_get_info_by_fd")
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
        raise BpfError("bpf_enable_stats", _errno())
    try:
        yield
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
            raise BpfError(f"ring buffer on map fd {ring_fd}", _errno())

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


Recorder = Callable[..., None]  # e.g. Registry.add: record(kind, **fields)


def record_programs(obj: BpfObject, record: Recorder | None) -> BpfObject:
    """Tell ``record`` about every program ``obj`` loaded; returns ``obj``."""
    if record:
        for prog in obj.programs.values():
            record("bpf_prog", id=prog.id, name=prog.name, object=obj.path.name)
    return obj


def libbpf_version() -> str:
    return lib.libbpf_version_string().decode()


def possible_cpus() -> int:
    return _check(lib.libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


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


def tc_attach(program: Program, ifindex: int, egress: bool = True,
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
    _check(lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts)),
           f"tc attach of {program.name} to ifindex {ifindex}")
    return TcAttachment(ifindex, point, opts.handle, opts.priority, opts.prog_id)


def attach_filter(ns, program: Program, ifname: str, ifindex: int, priority: int,
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
