"""What an object's BTF says, read through libbpf (no load, no root): the type of each
map's key and value, every named struct's size and field offsets, and the check of an
object against its declaration (:class:`labkit.kernel.bpf.ObjectDecl`): the maps and
programs it names exist, and their key and value types agree with the BTF (size, and a
struct's name when the declared type mirrors one of ``labkit.model.abi``).
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
from dataclasses import dataclass
from pathlib import Path

from labkit.kernel.libbpf import BpfError, each, last_errno, lib
from labkit.model.abi import MIRRORS

KIND_INT, KIND_STRUCT, KIND_ENUM, KIND_ENUM64 = 1, 4, 6, 19  # BTF_KIND_*
KIND_NAMES = {KIND_INT: "int", 2: "pointer", 3: "array", KIND_STRUCT: "struct", 5: "union",
              KIND_ENUM: "enum", KIND_ENUM64: "enum"}
INT_KINDS = {KIND_INT, KIND_ENUM, KIND_ENUM64}
INT_CODES = "BHILQbhilq"  # the ctypes integer types' codes (c_uint32: "I", ...)
C_NAMES = {mirror: name for name, mirror in MIRRORS.items()}  # a mirror's struct in C

CType = type  # a ctypes integer type, a ctypes struct (an abi mirror) or array


class DeclarationError(BpfError):
    """An object does not match its declaration; the message names the object, the map
    or program, and what differs."""

    def __init__(self, message: str):
        self.errno, self.log = errno_mod.EINVAL, ""
        RuntimeError.__init__(self, message)


class _Type(ctypes.Structure):  # struct btf_type: name, info (kind, vlen), size or type
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32),
                ("size", ctypes.c_uint32)]


class _Member(ctypes.Structure):  # struct btf_member, after a struct's btf_type
    _fields_ = [("name_off", ctypes.c_uint32), ("type", ctypes.c_uint32),
                ("offset", ctypes.c_uint32)]


@dataclass(frozen=True)
class BtfType:
    """A type as BTF gives it, typedefs and qualifiers resolved."""

    kind: int
    name: str
    size: int

    def __str__(self) -> str:
        if self.kind == KIND_INT:
            return f"{self.name} ({self.size} bytes)"
        kind = KIND_NAMES.get(self.kind, f"kind {self.kind}")
        return f"{kind} {self.name or '(anonymous)'} ({self.size} bytes)"


@dataclass(frozen=True)
class Struct:
    """A struct of an object's BTF: its size and each field's byte offset."""

    size: int
    fields: dict[str, int]


def _type(btf: int, type_id: int) -> BtfType:
    resolved = lib.btf__resolve_type(btf, type_id)
    if resolved < 0:
        raise BpfError(f"BTF type {type_id}", resolved)
    t = _Type.from_address(lib.btf__type_by_id(btf, resolved))
    return BtfType((t.info >> 24) & 0x1F, lib.btf__name_by_offset(btf, t.name_off).decode(),
                   lib.btf__resolve_size(btf, resolved))


def structs(path: str | os.PathLike) -> dict[str, Struct]:
    """Every named struct of the object file at ``path``, by name."""
    btf = lib.btf__parse(str(path).encode(), None)
    if not btf:
        raise BpfError(f"BTF of {path}", last_errno())
    try:
        out = {}
        for type_id in range(1, lib.btf__type_cnt(btf)):
            t = _Type.from_address(lib.btf__type_by_id(btf, type_id))
            name = lib.btf__name_by_offset(btf, t.name_off).decode()
            if (t.info >> 24) & 0x1F != KIND_STRUCT or not name:
                continue
            members = (_Member * (t.info & 0xFFFF)).from_address(
                lib.btf__type_by_id(btf, type_id) + ctypes.sizeof(_Type))
            bitfields = bool(t.info >> 31)  # kind_flag: the offset's low 24 bits are bits
            out[name] = Struct(t.size, {
                lib.btf__name_by_offset(btf, m.name_off).decode():
                    (m.offset & 0xFFFFFF if bitfields else m.offset) // 8 for m in members})
        return out
    finally:
        lib.btf__free(btf)


def describe(ctype: CType) -> str:
    """A declared type as the messages name it."""
    size, code = ctypes.sizeof(ctype), getattr(ctype, "_type_", None)
    if isinstance(code, str) and code in INT_CODES:
        return f"{'u' if code.isupper() else 's'}{8 * size} ({size} bytes)"
    c_name = C_NAMES.get(ctype)
    return f"{ctype.__name__} ({f'struct {c_name}, ' if c_name else ''}{size} bytes)"


def _differs(ctype: CType, size: int, btf: BtfType | None) -> bool:
    """Whether a declared type disagrees with the map's key or value (``size`` bytes,
    ``btf``: its BTF type, None when the map gives only sizes)."""
    if ctypes.sizeof(ctype) != size:
        return True
    if btf is None:
        return False
    if issubclass(ctype, ctypes.Structure):
        return btf.kind != KIND_STRUCT or btf.name != C_NAMES.get(ctype, btf.name)
    code = getattr(ctype, "_type_", None)
    if isinstance(code, str) and code in INT_CODES:
        return btf.kind not in INT_KINDS
    return btf.kind == KIND_STRUCT  # an array or bytes for a struct: declare its mirror


def map_problems(obj: int, m: int, key: CType | None, value: CType | None) -> list[str]:
    """How map ``m`` of the opened object ``obj`` differs from a key and value declared
    for it (None: not declared, not checked)."""
    btf = lib.bpf_object__btf(obj)
    problems = []
    for what, ctype, size, type_id in (
            ("key", key, lib.bpf_map__key_size(m), lib.bpf_map__btf_key_type_id(m)),
            ("value", value, lib.bpf_map__value_size(m), lib.bpf_map__btf_value_type_id(m))):
        found = _type(btf, type_id) if btf and type_id else None
        if ctype is not None and _differs(ctype, size, found):
            problems.append(f"{what} is {found or f'{size} bytes'} in the object's BTF, "
                            f"declared {describe(ctype)}")
    return problems


def check(obj: int, path: Path, label: str, maps: dict[str, tuple[CType | None, CType | None]],
          programs: list[str]) -> None:
    """DeclarationError unless the opened object ``obj`` (from ``path``) has the maps
    (name: declared key and value types) and ``programs`` its declaration ``label``
    names, alike."""
    found_maps = {lib.bpf_map__name(m).decode(): m for m in each(obj, "map")}
    found_programs = {lib.bpf_program__name(p).decode() for p in each(obj, "program")}
    problems = [f"no program {name}" for name in programs if name not in found_programs]
    for name, (key, value) in maps.items():
        if name not in found_maps:
            problems.append(f"no map {name}")
            continue
        problems += [f"map {name}: {p}" for p in map_problems(obj, found_maps[name], key, value)]
    if problems:
        raise DeclarationError(f"{path} does not match its declaration {label}: "
                               + "; ".join(problems))
