"""JSON documents as frozen dataclasses, key for key: :func:`read` builds a record from a
document, checking each value against its field's type, and :func:`written` gives the
document back with its keys in the order of the record's fields.

A field's JSON key is its name (``key=`` in its metadata when that is a Python keyword).
Its type says how a value is read: a record type as a nested document, ``tuple[X, ...]``
as a list, ``dict[str, X]`` as an object, ``Any`` as it is. A key that documents of every
version hold is a field without a default; one that only some hold has a default, None,
and None then means the key is not in the document. Some of those keys are written as
``null`` where they have no value (:data:`NULL` in their metadata): such a key missing from
a document read is named in the record's ``unrecorded`` field (the document predates it),
so that it is left out again when written. A field with ``init=False`` is a constant of its
type (a manifest's ``kind``): written, and checked when read. A field marked
:data:`FLAT` holds a record whose keys sit in its parent's document at its place.
"""

from __future__ import annotations

import keyword
import types
from collections.abc import Collection
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any, ClassVar, Protocol, TypeVar, Union, get_args, get_origin, get_type_hints

NULL = {"null": True}  # None is written as null (a field without it leaves None out)
FLAT = {"flat": True}  # the record's keys are its parent's, at the field's place
UNRECORDED = "unrecorded"  # the field naming NULL keys the document read did not hold


class DocumentError(ValueError):
    """A document does not fit its record type: the message names the key and why."""


class Record(Protocol):
    """A dataclass instance (what typeshed calls DataclassInstance)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


R = TypeVar("R", bound=Record)


def key(name: str) -> dict[str, str]:
    """Metadata for a field whose JSON key is ``name`` (a Python keyword)."""
    assert keyword.iskeyword(name), name
    return {"key": name}


def written(record: Record, nulls: Collection[str] = ()) -> dict[str, Any]:
    """``record`` as its JSON document (``nulls``: fields written as null, as if marked
    :data:`NULL`, in this document)."""
    absent: frozenset[str] = getattr(record, UNRECORDED, frozenset())
    doc: dict[str, Any] = {}
    for f in _data_fields(type(record)):
        value = getattr(record, f.name)
        if f.metadata.get("flat"):
            doc.update(written(value))
        elif value is not None or ((f.metadata.get("null") or f.name in nulls)
                                   and f.name not in absent):
            doc[_key(f)] = _plain(value)
    return doc


def read(cls: type[R], doc: Any, where: str) -> R:
    """The record of type ``cls`` that ``doc`` holds; DocumentError names the key (``where``:
    the document's name) that is missing, unknown or of the wrong type."""
    if not isinstance(doc, dict):
        raise DocumentError(f"{where}: expected an object, got {_name(doc)}")
    values, used, unrecorded = _values(cls, doc, where)
    unknown = [k for k in doc if k not in used]
    if unknown:
        raise DocumentError(f"{where}: unknown key {unknown[0]!r}")
    if unrecorded:
        values[UNRECORDED] = frozenset(unrecorded)
    return cls(**values)


def _values(cls: type[Record], doc: dict[str, Any], where: str
            ) -> tuple[dict[str, Any], set[str], set[str]]:
    """The constructor's arguments from ``doc``, the keys they used and the NULL fields
    the document did not hold."""
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    used: set[str] = set()
    unrecorded: set[str] = set()
    for f in _data_fields(cls):
        name = _key(f)
        if f.metadata.get("flat"):
            inner, inner_used, inner_unrecorded = _values(hints[f.name], doc, where)
            if inner_unrecorded:
                inner[UNRECORDED] = frozenset(inner_unrecorded)
            values[f.name] = hints[f.name](**inner)
            used |= inner_used
            continue
        if name not in doc:
            if f.default is MISSING and f.default_factory is MISSING:
                raise DocumentError(f"{where}: {name!r} is missing")
            if f.metadata.get("null"):
                unrecorded.add(f.name)
            continue
        used.add(name)
        if not f.init:
            if doc[name] != f.default:
                raise DocumentError(f"{where}.{name}: expected {f.default!r}, got {doc[name]!r}")
            continue
        values[f.name] = _typed(hints[f.name], doc[name], f"{where}.{name}")
    return values, used, unrecorded


def _typed(tp: Any, value: Any, where: str) -> Any:
    """``value`` read as type ``tp``."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _typed(inner, value, where)
    if tp is Any:
        return value
    if origin is tuple:
        _expect(value, list, where)
        return tuple(_typed(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _expect(value, dict, where)
        return {k: _typed(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and is_dataclass(tp):
        return read(tp, value, where)
    if tp is float:
        _expect(value, (int, float), where)
    else:
        _expect(value, tp, where)
    return value


def _expect(value: Any, tp: type | tuple[type, ...], where: str) -> None:
    if isinstance(value, bool) and bool not in (tp if isinstance(tp, tuple) else (tp,)):
        raise DocumentError(f"{where}: expected {_name(tp)}, got a boolean")
    if not isinstance(value, tp):
        raise DocumentError(f"{where}: expected {_name(tp)}, got {_name(value)}")


def _name(tp: Any) -> str:
    if isinstance(tp, tuple):
        return " or ".join(_name(t) for t in tp)
    if not isinstance(tp, type):
        return "null" if tp is None else _name(type(tp))
    return {dict: "an object", list: "a list", str: "a string", int: "an integer",
            float: "a number", bool: "a boolean"}.get(tp, tp.__name__)


def _plain(value: Any) -> Any:
    """A field's value as JSON has it: records as documents, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return written(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _data_fields(cls: type[Record]) -> list[Field[Any]]:
    return [f for f in fields(cls) if f.name != UNRECORDED]


def _key(f: Field[Any]) -> str:
    return f.metadata.get("key", f.name)
