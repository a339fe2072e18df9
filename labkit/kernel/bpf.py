"""BPF objects, their maps and programs, and how an object is declared.

Owns opening and loading objects (a verifier rejection raises :class:`VerifierError`
carrying the verifier's log), maps (read, typed update, per-CPU sums),
``BPF_PROG_TEST_RUN``, and where the objects built from ``bpf/*.bpf.c`` live
(``bpf/build/``, :func:`object_path`).

Each object is declared once, as libbpf's skeletons declare one in C: an
:class:`ObjectDecl` names its maps (:class:`MapDecl`: key and value types) and its
programs (:class:`ProgramDecl`); :mod:`labkit.kernel.skeletons` holds every object's.
:meth:`ObjectDecl.open` checks the object against its BTF before loading it (:mod:`.btf`:
a mismatch is a :class:`DeclarationError` naming the object, the map and what differs)
and gives the maps and programs as attributes (``valve.maps.lk_phase.update(0, phase)``),
so no code names a map or program by a string.

The libbpf binding is :mod:`.libbpf`; links, ring buffers, tc attachment and pins are
:mod:`.attach`; both are re-exported here.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Self, TypeVar, overload

from labkit.kernel import btf
from labkit.kernel.attach import (  # noqa: F401  (re-exported)
    BPF_TC_EGRESS,
    BPF_TC_INGRESS,
    PIN_ROOT,
    Iterator,
    Recorder,
    RingBuffer,
    TcAttachment,
    TracingLink,
    attach_filter,
    detach_all,
    pin_dir,
    tc_attach,
    unpin_dir,
)
from labkit.kernel.btf import DeclarationError  # noqa: F401  (re-exported)
from labkit.kernel.libbpf import (  # noqa: F401  (re-exported)
    LIBBPF_DEBUG,
    LIBBPF_INFO,
    LIBBPF_WARN,
    LOG_BUF_BYTES,
    BpfError,
    CapturedLog,
    SkBuff,
    TcHook,
    TcOpts,
    TestRunOpts,
    VerifierError,
    check,
    each,
    last_errno,
    lib,
    libbpf_version,
    map_exists,
    map_info,
    possible_cpus,
    prog_info,
    prog_loaded,
    prog_stats,
    run_time_stats,
    unregister_struct_ops,
)
from labkit.model.paths import REPO_ROOT  # noqa: F401  (re-exported: its old home)

BUILD_DIR = Path(os.environ.get("LABKIT_BPF_BUILD", REPO_ROOT / "bpf" / "build"))

BPF_ANY = 0
MAP_ARRAY, MAP_PERCPU_ARRAY = 2, 6  # enum bpf_map_type
# enum bpf_map_type: PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE
PERCPU_MAP_TYPES = {5, MAP_PERCPU_ARRAY, 10, 19}


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
    """A map of a loaded object. Keys and values are given as ints (little-endian, at the
    map's size), as ctypes values of the declared type (:class:`MapDecl`: another type
    is refused), or as raw bytes of the map's size."""

    def __init__(self, ptr: int):
        self._ptr = ptr
        self.name = lib.bpf_map__name(ptr).decode()
        self.fd = lib.bpf_map__fd(ptr)
        self.type = lib.bpf_map__type(ptr)
        self.key_size = lib.bpf_map__key_size(ptr)
        self.value_size = lib.bpf_map__value_size(ptr)
        self.max_entries = lib.bpf_map__max_entries(ptr)
        self.key_type: type | None = None  # as declared (ObjectDecl.open sets them)
        self.value_type: type | None = None
        self.percpu = self.type in PERCPU_MAP_TYPES
        # a per-CPU value is one slot per possible CPU, each rounded up to 8 bytes
        self.stride = (self.value_size + 7) // 8 * 8
        self.ncpu = possible_cpus() if self.percpu else 1
        self._int_keys: dict[int, ctypes.Array] = {}

    def _raw(self, what: str, given: Any, declared: type | None, size: int) -> bytes:
        """``given`` (a key or value) as the map's bytes."""
        if isinstance(given, int):
            if declared is not None and issubclass(declared, ctypes.Structure):
                raise TypeError(f"map {self.name}: {what} is an int, declared "
                                f"{btf.describe(declared)}")
            raw = given.to_bytes(size, "little")
        elif isinstance(given, ctypes.Structure | ctypes.Array | ctypes._SimpleCData) \
                and declared is not None and type(given) is not declared:
            raise TypeError(f"map {self.name}: {what} is {type(given).__name__}, declared "
                            f"{btf.describe(declared)}")
        else:
            raw = bytes(given)
        if len(raw) != size:
            raise ValueError(f"map {self.name}: {what} is {len(raw)} bytes, expected {size}")
        return raw

    def _key(self, key) -> ctypes.Array:
        if isinstance(key, int) and key in self._int_keys:
            return self._int_keys[key]
        raw = self._raw("key", key, self.key_type, self.key_size)
        buf = ctypes.create_string_buffer(raw, self.key_size)
        if isinstance(key, int) and len(self._int_keys) < 256:  # array indices: reused
            self._int_keys[key] = buf
        return buf

    def update(self, key, value) -> None:
        if self.percpu:
            raise ValueError(f"map {self.name} is per-CPU: per-CPU maps are read-only here")
        raw = self._raw("value", value, self.value_type, self.value_size)
        val = ctypes.create_string_buffer(raw, self.value_size)
        if lib.bpf_map_update_elem(self.fd, self._key(key), val, BPF_ANY) < 0:
            raise BpfError(f"update of map {self.name}", last_errno())

    def lookup_raw(self, key) -> bytes | None:
        """The value as the kernel copies it out: for a per-CPU map, ``ncpu`` slots of
        ``stride`` bytes (cheap to parse in bulk: telemetry polls at 125 Hz)."""
        buf = ctypes.create_string_buffer(self.stride * self.ncpu)
        if lib.bpf_map_lookup_elem(self.fd, self._key(key), buf) < 0:
            err = last_errno()
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
        check(lib.bpf_obj_pin(self.fd, str(path).encode()), f"pin of map {self.name} at {path}")

    def attach_struct_ops(self) -> TracingLink:
        """Register a struct_ops map (a TCP congestion control, ...) until the link closes."""
        link = lib.bpf_map__attach_struct_ops(self._ptr)
        if not link:
            raise BpfError(f"registration of struct_ops {self.name}", last_errno())
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
            raise BpfError(f"update of inherited map fd {self.fd}", last_errno())

    def lookup(self, key: int, size: int) -> bytes:
        """The value (``size`` bytes) at ``key`` of an array map."""
        k = ctypes.c_uint32(key)
        v = ctypes.create_string_buffer(size)
        if lib.bpf_map_lookup_elem(self.fd, ctypes.byref(k), v) < 0:
            raise BpfError(f"lookup in inherited map fd {self.fd}", last_errno())
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
            raise BpfError(f"test run of {self.name}", last_errno())
        return TestRun(
            opts.retval, data_out.raw[: opts.data_size_out], ctx_out, opts.duration
        )

    def attach(self) -> TracingLink:
        """Attach a tracing program (tp_btf, raw_tp, fentry, ...) where its section says."""
        link = lib.bpf_program__attach(self._ptr)
        if not link:
            raise BpfError(f"attach of {self.name}", last_errno())
        return TracingLink(link)

    def attach_iter(self) -> Iterator:
        """Attach an iterator program (``iter/...``); read it with :meth:`Iterator.run`."""
        link = lib.bpf_program__attach_iter(self._ptr, None)
        if not link:
            raise BpfError(f"attach of iterator {self.name}", last_errno())
        return Iterator(link)

    def attach_cgroup(self, cgroup_fd: int) -> TracingLink:
        """Attach a cgroup program (sock_ops, ...) to the cgroup open at ``cgroup_fd``."""
        link = lib.bpf_program__attach_cgroup(self._ptr, cgroup_fd)
        if not link:
            raise BpfError(f"attach of {self.name} to a cgroup", last_errno())
        return TracingLink(link)

    def pin(self, path: Path) -> None:
        check(lib.bpf_obj_pin(self.fd, str(path).encode()), f"pin of {self.name} at {path}")


# --- a loaded object's maps and programs, as its declaration names them ---------------------

T = TypeVar("T")


class _Decl(Generic[T]):
    """A declared member of an object (a map, a program), named by its attribute."""

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, members: None, owner: type) -> Self: ...
    @overload
    def __get__(self, members: Members[T], owner: type) -> T: ...
    def __get__(self, members: Members[T] | None, owner: type) -> Self | T:
        return self if members is None else members._found[self.name]


class MapDecl(_Decl[Map]):
    """One map: its key and value types, each a ctypes integer type or a mirror of
    :mod:`labkit.model.abi` (None: not typed, as a ring buffer's or a struct_ops')."""

    def __init__(self, key: type | None = None, value: type | None = None):
        self.key, self.value = key, value


class ProgramDecl(_Decl[Program]):
    """One program, by its function's name."""


D = TypeVar("D", bound=_Decl)


def _declared(members: type, kind: type[D]) -> dict[str, D]:
    return {name: d for cls in reversed(members.__mro__) for name, d in vars(cls).items()
            if isinstance(d, kind)}


class Members(Generic[T]):
    """The maps or the programs of one loaded object, as attributes of the declaration's
    subclass of :class:`Maps` or :class:`Programs`. ``in`` and :meth:`get` are for an object
    whose names are not all declared (a user's classifier, checked against labkit's)."""

    def __init__(self, found: dict[str, T]):
        self._found = found

    def __contains__(self, name: object) -> bool:
        return name in self._found

    def get(self, name: str) -> T | None:
        return self._found.get(name)

    def values(self) -> list[T]:
        return list(self._found.values())


class Maps(Members[Map]):
    """The maps of a loaded object; a declaration subclasses it, one :class:`MapDecl` each."""


class Programs(Members[Program]):
    """The programs of a loaded object; a declaration subclasses it, one
    :class:`ProgramDecl` each."""


M = TypeVar("M", bound=Maps, covariant=True)
P = TypeVar("P", bound=Programs, covariant=True)


def open_file(path: Path) -> int:
    """libbpf's object for the file at ``path``, opened (not loaded)."""
    if not path.is_file():
        raise BpfError(f"BPF object {path} not found (build it with `make bpf`)",
                       errno_mod.ENOENT)
    with CapturedLog() as log:
        ptr = lib.bpf_object__open_file(str(path).encode(), None)
    if not ptr:
        raise BpfError(f"open of {path}", last_errno(), "\n".join(log))
    return ptr


class ObjectDecl(Generic[M, P]):
    """One object of ``bpf/``, declared once: its name (``bpf/<name>.bpf.c``), its maps
    and its programs (a :class:`Maps` and a :class:`Programs` subclass)."""

    def __init__(self, name: str, maps: type[M], programs: type[P]):
        self.name, self.maps, self.programs = name, maps, programs
        self.map_decls = _declared(maps, MapDecl)
        self.program_decls = _declared(programs, ProgramDecl)

    def __repr__(self) -> str:
        return f"ObjectDecl({self.name!r})"

    def path(self) -> Path:
        return object_path(self.name)

    def open(self, path: str | os.PathLike | None = None,
             reuse: Sequence[Map] = ()) -> BpfObject[M, P]:
        """Open ``path`` (default: the built object), check it against this declaration
        and load it; each map of ``reuse`` stands in for this object's map of its name."""
        return BpfObject(path or self.path(), {m.name: m for m in reuse}, self)

    def check(self, obj: int, path: Path) -> None:
        """DeclarationError unless the opened (not loaded) object ``obj`` has what this
        declares, alike in its BTF."""
        btf.check(obj, path, f"(object {self.name}, {self.maps.__module__})",
                  {n: (d.key, d.value) for n, d in self.map_decls.items()},
                  list(self.program_decls))

    def verify(self, path: str | os.PathLike | None = None) -> None:
        """Open the object (without loading it: no root needed) and :meth:`check` it."""
        where = Path(path or self.path())
        obj = open_file(where)
        try:
            self.check(obj, where)
        finally:
            lib.bpf_object__close(obj)

    def check_reuse(self, name: str, other: Map, path: Path) -> None:
        """DeclarationError unless map ``other`` may stand in for this object's ``name``."""
        mine = self.map_decls.get(name)
        if mine is None:
            raise DeclarationError(f"{path} reuses map {name}, which its declaration (object "
                                   f"{self.name}) does not declare")
        for what, ours, theirs in (("key", mine.key, other.key_type),
                                   ("value", mine.value, other.value_type)):
            if ours is not None and theirs is not None and ours is not theirs:
                raise DeclarationError(f"{path}: map {name}'s {what} is declared "
                                       f"{btf.describe(ours)}, the map reused for it has "
                                       f"{btf.describe(theirs)}")


class BpfObject(Generic[M, P]):
    """An object file opened and loaded into the kernel; close it to release everything.
    Opened through its declaration (:meth:`ObjectDecl.open`), its maps and programs are
    attributes of ``maps`` and ``programs``."""

    maps: M
    programs: P

    @overload
    def __init__(self: BpfObject[Maps, Programs], path: str | os.PathLike,
                 reuse: dict[str, Map] | None = None) -> None: ...
    @overload
    def __init__(self, path: str | os.PathLike, reuse: dict[str, Map] | None,
                 decl: ObjectDecl[M, P]) -> None: ...
    def __init__(self, path: str | os.PathLike, reuse: dict[str, Map] | None = None,
                 decl: ObjectDecl[M, P] | None = None):
        """Open ``path``, check it against ``decl`` and load it; maps named in ``reuse``
        share those of another object."""
        self.path = Path(path)
        ptr = open_file(self.path)
        self._ptr: int | None = ptr
        try:
            self._load(ptr, reuse or {}, decl)
        except BaseException:
            self.close()
            raise
        decls = decl.map_decls if decl else {}
        maps = {}
        for m in map(Map, each(ptr, "map")):
            if d := decls.get(m.name):
                m.key_type, m.value_type = d.key, d.value
            maps[m.name] = m
        self.maps = (decl.maps if decl else Maps)(maps)  # type: ignore[assignment]
        self.programs = (decl.programs if decl else Programs)(  # type: ignore[assignment]
            {p.name: p for p in map(Program, each(ptr, "program"))})

    def _load(self, ptr: int, reuse: dict[str, Map], decl: ObjectDecl[M, P] | None) -> None:
        if decl:
            decl.check(ptr, self.path)
        for name, other in reuse.items():
            if decl:
                decl.check_reuse(name, other, self.path)
            m = lib.bpf_object__find_map_by_name(ptr, name.encode())
            if not m:
                raise BpfError(f"{self.path.name} has no map {name}", errno_mod.ENOENT)
            if (ret := lib.bpf_map__reuse_fd(m, other.fd)) < 0:
                raise BpfError(f"reuse of map {name}", ret)
        with CapturedLog() as log:
            ret = lib.bpf_object__load(ptr)
        if ret < 0:
            text = "".join(log).strip()
            cls = VerifierError if "PROG LOAD LOG" in text or ret == -errno_mod.EACCES else BpfError
            raise cls(f"load of {self.path.name}", ret, text)

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            lib.bpf_object__close(self._ptr)
            self._ptr = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


Obj = TypeVar("Obj", bound=BpfObject)


def record_programs(obj: Obj, record: Recorder | None) -> Obj:
    """Tell ``record`` about every program ``obj`` loaded; returns ``obj``."""
    if record:
        for prog in obj.programs.values():
            record("bpf_prog", id=prog.id, name=prog.name, object=obj.path.name)
    return obj


