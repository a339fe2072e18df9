"""labkit's one JSON codec: every JSON document it writes and reads back (a run's summary,
:mod:`labkit.model.summary`; its manifests, :mod:`labkit.model.manifest`; the traffic
agents' configs and results, :mod:`labkit.model.traffic.configs` and ``.results``) is a
frozen dataclass, key for key. :meth:`Record.from_json` reads a document, checking each
value against its field's type; :meth:`Record.to_json` gives it back with its keys in the
order of the fields, so ``json.dumps(R.from_json(doc).to_json()) == json.dumps(doc)``.
:func:`read` and :func:`written` do the same for any dataclass.

A field's JSON key is its name (:func:`key` in its metadata when that is a Python
keyword). Its type says how a value is read: a dataclass as a nested document,
``tuple[X, ...]`` and ``list[X]`` as a list, a NamedTuple or ``tuple[X, Y]`` as a list of
those items, ``dict[K, X]`` as an object (int keys read from their text), ``bytes`` as hex
text, ``Any`` and a bare ``dict`` as they are, ``float`` from any number.

Versions: a key that documents of every version hold is a field without a default; one
that only newer ones hold has a default. A record read from a document that lacks such a
key names it in ``unrecorded``, and writes it back missing (while it keeps its default).
None is written as null, but for a field made with :func:`when_set`: its key is left out
while it is None. A field with ``init=False`` is a constant of its type (a manifest's
``kind``): written, and checked when read. A :func:`flat` field holds a record whose keys
sit in its parent's document at its place; a :func:`one_of` field one of several records,
under the key of its kind (a summary's workload).

A document that does not fit raises :class:`DocumentError`, whose message names the key
path and what is wrong; a family of documents words its errors its own way by a subclass
(:class:`~labkit.model.summary.SummaryError`, :class:`~labkit.model.manifest.ManifestError`).
Standard library only: the traffic agents import it.
"""

from __future__ import annotations

import itertools
import keyword
import types
from collections.abc import Callable, Collection
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from typing import (
    Any,
    ClassVar,
    NamedTuple,
    Self,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

UNRECORDED = "unrecorded"  # the field naming the keys the document read did not hold
R = TypeVar("R")


class DocumentError(ValueError):
    """A document does not fit its record type: the message names the key and why. The
    templates and :meth:`wanted` and :meth:`got` word each misfit (a subclass words them
    its own way)."""

    MISSING = "{where}: {key!r} is missing"
    UNKNOWN = "{where}: unknown key {keys[0]!r}"  # also: {sorted}, the keys sorted
    EXPECTED = "{where}: expected {wanted}, got {got}"

    @classmethod
    def missing(cls, where: str, key: str) -> DocumentError:
        return cls(cls.MISSING.format(where=where, key=key))

    @classmethod
    def unknown(cls, where: str, keys: list[str]) -> DocumentError:
        return cls(cls.UNKNOWN.format(where=where, keys=keys, sorted=sorted(keys)))

    @classmethod
    def expected(cls, where: str, tp: type, value: Any) -> DocumentError:
        return cls(cls.EXPECTED.format(where=where, wanted=cls.wanted(tp),
                                       got=cls.got(tp, value)))

    @staticmethod
    def wanted(tp: type) -> str:
        """What a value of type ``tp`` is called, in ``expected ...``."""
        return _name((int, float) if tp is float else tp)

    @staticmethod
    def got(tp: type, value: Any) -> str:
        """What a value that is no ``tp`` is called, in ``got ...``."""
        return _name(value)

    @classmethod
    def constant(cls, where: str, wanted: Any, value: Any) -> DocumentError:
        return cls(f"{where}: expected {wanted!r}, got {value!r}")

    @classmethod
    def other(cls, where: str, reason: str) -> DocumentError:
        return cls(f"{where}: {reason}")


@dataclass(frozen=True, kw_only=True)
class Record:
    """A JSON document (or a part of one) as a frozen dataclass: ``ERROR`` words its
    errors, ``DOCUMENT`` names it in them (by default, the class's name)."""

    ERROR: ClassVar[type[DocumentError]] = DocumentError
    DOCUMENT: ClassVar[str] = ""
    unrecorded: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Any, where: str = "") -> Self:
        """The record a JSON object holds (``where``: its key path, for errors)."""
        return read(cls, doc, where or cls.DOCUMENT or cls.__name__, cls.ERROR)

    def to_json(self) -> dict[str, Any]:
        """The JSON object as written: plain dicts, lists and scalars."""
        return written(self)


def key(name: str) -> dict[str, str]:
    """Metadata for a field whose JSON key is ``name`` (a Python keyword)."""
    assert keyword.iskeyword(name), name
    return {"key": name}


def when_set() -> Any:
    """A field whose key is written only when it holds a value (None: left out)."""
    return field(default=None, metadata={"when_set": True})


def flat(**kwargs: Any) -> Any:
    """A field holding a record whose keys are its parent's, at the field's place; if it
    may be None, it is when the document holds none of them."""
    return field(metadata={"flat": True}, **kwargs)


def one_of(kinds: dict[str, type], noun: str) -> Any:
    """A field holding one of ``kinds``' records, under its kind's key (``noun`` names
    the field in errors)."""
    return field(metadata={"one_of": kinds, "noun": noun})


def keys(cls: type) -> tuple[str, ...]:
    """The keys of ``cls``'s documents (a flat field's and a one-of field's aside)."""
    return tuple(p.key for p in _plan(cls) if p.kind == "key")


def read(cls: type[R], doc: Any, where: str, error: type[DocumentError] = DocumentError) -> R:
    """The record of type ``cls`` (any dataclass) that ``doc`` holds; ``error`` (``where``:
    the document's name) names the key that is missing, unknown or of the wrong type."""
    try:
        return _reader(cls)(doc)
    except _Misfit as misfit:
        raise misfit.make(error, where + "".join(reversed(misfit.steps))) from None


def written(record: Any, nulls: Collection[str] = ()) -> dict[str, Any]:
    """``record`` (any dataclass) as its JSON document (``nulls``: fields written in this
    document even as None, although made with :func:`when_set` or unrecorded)."""
    absent: frozenset[str] = getattr(record, UNRECORDED, frozenset())
    doc: dict[str, Any] = {}
    for p, write in _writing(type(record)):
        value = getattr(record, p.name)
        if p.kind == "flat":
            if value is not None:
                doc.update(written(value))
        elif p.kind == "one_of":
            doc[next(k for k, t in p.kinds.items() if type(value) is t)] = _plain(value)
        elif p.name in nulls or (value is not None or not p.when_set) and not (
                absent and p.name in absent and value == p.default):
            doc[p.key] = value if write is None or value is None else write(value)
    return doc


# --- how a record type is read and written, worked out once per type -----------------------


class _Field(NamedTuple):
    name: str
    key: str
    kind: str  # "key", "flat" or "one_of"
    hint: Any
    required: bool
    default: Any  # the default (MISSING: none)
    init: bool
    when_set: bool
    kinds: dict[str, type]
    noun: str


_PLANS: dict[type, tuple[_Field, ...]] = {}
# JSON's scalars, and what a field of each type accepts
_SCALARS: dict[Any, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,),
                                         bool: (bool,)}  # a float may be written 4000


def _plan(cls: type) -> tuple[_Field, ...]:
    if cls not in _PLANS:
        hints = get_type_hints(cls)
        _PLANS[cls] = tuple(_field(f, hints[f.name]) for f in fields(cls)
                            if f.name != UNRECORDED)
    return _PLANS[cls]


def _field(f: Field[Any], hint: Any) -> _Field:
    meta = f.metadata
    default = f.default if f.default_factory is MISSING else f.default_factory()
    kind = "flat" if meta.get("flat") else "one_of" if "one_of" in meta else "key"
    return _Field(f.name, meta.get("key", f.name), kind, hint, default is MISSING, default,
                  f.init, bool(meta.get("when_set")), meta.get("one_of", {}),
                  meta.get("noun", ""))


# --- reading ----------------------------------------------------------------------------------


class _Misfit(Exception):
    """A value that does not fit, on its way up to the record whose path is known:
    ``steps`` collects its key path backwards, ``make`` words the error."""

    def __init__(self, make: Callable[[type[DocumentError], str], DocumentError]):
        super().__init__()
        self.make = make
        self.steps: list[str] = []

    def at(self, step: str | int) -> _Misfit:
        """The misfit, one step further from the record (a key, or a list's index)."""
        self.steps.append(f"[{step}]" if isinstance(step, int) else f".{step}")
        return self


def _expected(tp: type, value: Any) -> _Misfit:
    return _Misfit(lambda error, where: error.expected(where, tp, value))


def _missing(key: str) -> _Misfit:
    return _Misfit(lambda error, where: error.missing(where, key))


def _fits(value: Any, tp: type, accepted: tuple[type, ...]) -> bool:
    """Whether a JSON scalar is one of type ``tp`` (a boolean is no number)."""
    return isinstance(value, accepted) and (value.__class__ is not bool or tp is bool)


Reader = Callable[[Any], Any]
Typevars = tuple[tuple[Any, Any], ...]
_READERS: dict[Any, Reader] = {}


def _reader(tp: Any, typevars: Typevars = ()) -> Reader:
    """How a JSON value is read as ``tp`` (``typevars``: a generic record's arguments)."""
    tp = dict(typevars).get(tp, tp)
    if (tp, typevars) not in _READERS:
        _READERS[tp, typevars] = _make_reader(tp, typevars)
    return _READERS[tp, typevars]


def _make_reader(tp: Any, typevars: Typevars) -> Reader:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return lambda value: value
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if len(arms) != 1:
            raise TypeError(f"{tp}: several types are read by a one_of field")
        inner = _reader(arms[0], typevars)
        return lambda value: None if value is None else inner(value)
    if isinstance(origin or tp, type) and is_dataclass(origin or tp):
        params = getattr(origin, "__parameters__", ())
        return _record_reader(origin or tp, tuple(zip(params, args, strict=True)))
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        hints = get_type_hints(tp)
        return _items_reader(tp, [hints[f] for f in tp._fields], ())
    if origin in (tuple, list) and args and (origin is list or args[-1] is Ellipsis):
        return _list_reader(origin, dict(typevars).get(args[0], args[0]), typevars)
    if origin is tuple:
        return _items_reader(tuple, list(args), typevars)
    if origin is dict:
        return _dict_reader(args[0] is int, _reader(args[1], typevars))
    if tp is bytes:
        return _bytes
    accepted = _SCALARS.get(tp, (tp,))

    def scalar(value: Any) -> Any:
        if not _fits(value, tp, accepted):
            raise _expected(tp, value)
        return value
    return scalar


def _bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _expected(str, value)
    try:
        return bytes.fromhex(value)
    except ValueError as exc:
        reason = f"not hex text: {exc}"
    raise _Misfit(lambda error, where: error.other(where, reason))


def _list_reader(kind: type, tp: Any, typevars: Typevars) -> Reader:
    accepted, item = _SCALARS.get(tp), _reader(tp, typevars)
    types_ = set(accepted or ())

    def read_list(value: Any) -> Any:
        if not isinstance(value, list):
            raise _expected(list, value)
        i = 0
        try:
            if accepted is not None:  # scalars: checked here, at a list's speed
                if set(map(type, value)) <= types_:  # at C's speed
                    return kind(value)
                for i, v in enumerate(value):  # noqa: B007 (i: where it failed)
                    if not isinstance(v, accepted) or (v.__class__ is bool and tp is not bool):
                        raise _expected(tp, v)
                return kind(value)
            out = []
            for i, v in enumerate(value):  # noqa: B007
                out.append(item(v))
            return kind(out)
        except _Misfit as misfit:
            raise misfit.at(i) from None
    return read_list


def _items_reader(kind: Callable[..., Any], tps: list[Any], typevars: Typevars) -> Reader:
    """A list of fixed length read as a NamedTuple or a tuple of those types."""
    n = len(tps)
    items = [(tp, _SCALARS.get(tp), _reader(tp, typevars)) for tp in tps]
    scalars = [accepted for _, accepted, _ in items]
    # every row of types that fits, when the items are scalars: checked at C's speed
    rows = (set(itertools.product(*(a or () for a in scalars)))
            if all(a is not None for a in scalars) else None)

    def read_scalars(value: Any) -> Any:
        if value.__class__ is list and tuple(map(type, value)) in rows:  # type: ignore[operator]
            return tuple(value) if kind is tuple else kind(*value)
        return read_items(value)  # what is wrong, or a subclass of a scalar

    def read_items(value: Any) -> Any:
        if not isinstance(value, list):
            raise _expected(list, value)
        if len(value) != n:
            raise _Misfit(lambda error, where: error.other(
                where, f"expected {n} items, got {len(value)}"))
        out = list(value)
        for i, (tp, accepted, item) in enumerate(items):
            try:
                if accepted is None:
                    out[i] = item(out[i])
                elif not _fits(out[i], tp, accepted):
                    raise _expected(tp, out[i])
            except _Misfit as misfit:
                raise misfit.at(i) from None
        return tuple(out) if kind is tuple else kind(*out)
    return read_items if rows is None else read_scalars


def _dict_reader(int_keys: bool, item: Reader) -> Reader:
    def read_dict(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _expected(dict, value)
        out = {}
        for k, v in value.items():
            try:
                out[int(k) if int_keys else k] = item(v)
            except ValueError:
                raise _expected(int, k) from None
            except _Misfit as misfit:
                raise misfit.at(k) from None
        return out
    return read_dict


Values = Callable[[dict[str, Any]], tuple[dict[str, Any], set[str]]]
_VALUES: dict[Any, Values] = {}


def _record_reader(cls: type, typevars: Typevars) -> Reader:
    values = _values(cls, typevars)

    def read_record(doc: Any) -> Any:
        if not isinstance(doc, dict):
            raise _expected(dict, doc)
        out, used = values(doc)
        if len(used) != len(doc):
            unknown = [k for k in doc if k not in used]
            raise _Misfit(lambda error, where: error.unknown(where, unknown))
        return cls(**out)
    return read_record


def _values(cls: type, typevars: Typevars) -> Values:
    """How the constructor's arguments of ``cls`` are read from a document: they, and the
    keys they used (a flat field's record reads its keys from its parent's document)."""
    if (cls, typevars) in _VALUES:
        return _VALUES[cls, typevars]
    plan = [(p, dict(typevars).get(p.hint, p.hint)) for p in _plan(cls)]
    # in the fields' order (the first misfit is reported): a special field (flat, one-of,
    # constant) with no reader, a keyed one with its scalar types or its reader
    steps: list[tuple[_Field, Any, tuple[type, ...] | None, Reader | None]] = [
        (p, tp, _SCALARS.get(tp), _reader(tp, typevars)) if p.kind == "key" and p.init
        else (p, tp, None, None) for p, tp in plan]
    versioned = UNRECORDED in {f.name for f in fields(cls)}

    def values(doc: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        out: dict[str, Any] = {}
        used: set[str] = set()
        unrecorded: set[str] = set()
        for p, tp, accepted, read in steps:
            if read is None:
                _special(p, doc, out, used)
            elif p.key not in doc:
                if p.required:
                    raise _missing(p.key)
                if versioned:  # left out again when written
                    unrecorded.add(p.name)
            elif accepted is not None:  # a scalar: checked here, at a record's speed
                value = doc[p.key]
                if not _fits(value, tp, accepted):
                    raise _expected(tp, value).at(p.key)
                out[p.name] = value
                used.add(p.key)
            else:
                try:
                    out[p.name] = read(doc[p.key])
                except _Misfit as misfit:
                    raise misfit.at(p.key) from None
                used.add(p.key)
        if unrecorded:
            out[UNRECORDED] = frozenset(unrecorded)
        return out, used

    _VALUES[cls, typevars] = values
    return values


def _special(p: _Field, doc: dict[str, Any], out: dict[str, Any], used: set[str]) -> None:
    """A flat, one-of or constant field read from ``doc`` into ``out``."""
    if p.kind == "flat":
        tp = _inner_type(p.hint)
        if tp is not p.hint and not _all_keys(tp) & doc.keys():
            out[p.name] = None  # an optional record none of whose keys is there
            return
        inner, inner_used = _values(tp, ())(doc)
        out[p.name] = tp(**inner)
        used |= inner_used
    elif p.kind == "one_of":
        found = [k for k in p.kinds if k in doc]
        if len(found) != 1:
            raise _Misfit(lambda error, where: error.other(
                where, f"expected one {p.noun} of {', '.join(p.kinds)}, found "
                       f"{found or 'none'}"))
        try:
            out[p.name] = _reader(p.kinds[found[0]])(doc[found[0]])
        except _Misfit as misfit:
            raise misfit.at(found[0]) from None
        used.add(found[0])
    elif p.key in doc:  # a constant (init=False): what the type says, or nothing
        if doc[p.key] != p.default:
            got = doc[p.key]
            raise _Misfit(lambda error, where: error.constant(f"{where}.{p.key}", p.default,
                                                              got))
        used.add(p.key)


def _inner_type(hint: Any) -> Any:
    """A flat field's record type (``X`` of ``X | None``)."""
    arms = [a for a in get_args(hint) if a is not type(None)]
    return arms[0] if get_origin(hint) in (Union, types.UnionType) else hint


def _all_keys(cls: type) -> set[str]:
    """Every key a document of ``cls`` may hold, its flat fields' included."""
    out: set[str] = set()
    for p in _plan(cls):
        out |= _all_keys(_inner_type(p.hint)) if p.kind == "flat" else (
            set(p.kinds) if p.kind == "one_of" else {p.key})
    return out


# --- writing ----------------------------------------------------------------------------------


Writer = Callable[[Any], Any]
_WRITING: dict[type, tuple[tuple[_Field, Writer | None], ...]] = {}


def _writing(cls: type) -> tuple[tuple[_Field, Writer | None], ...]:
    """Each field of ``cls`` and how its value (not None) is written (None: as it is)."""
    if cls not in _WRITING:
        _WRITING[cls] = tuple((p, _writer(p.hint)) for p in _plan(cls))
    return _WRITING[cls]


def _writer(tp: Any) -> Writer | None:
    """How a value of type ``tp`` is written as JSON (None: as it is)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp in _SCALARS:
        return None
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        inner = _writer(arms[0]) if len(arms) == 1 else _plain
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if isinstance(origin or tp, type) and is_dataclass(origin or tp):
        return _plain
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _items_writer([get_type_hints(tp)[f] for f in tp._fields])
    if origin in (tuple, list) and args and (origin is list or args[-1] is Ellipsis):
        item = _writer(args[0])
        return list if item is None else (lambda v: [item(x) for x in v])
    if origin is tuple:
        return _items_writer(list(args))
    if origin is dict:
        value = _writer(args[1])
        return dict if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    if tp is bytes:
        return bytes.hex
    return _plain  # Any, a bare dict or list, a generic record's type variable


def _items_writer(tps: list[Any]) -> Writer:
    items = [_writer(tp) for tp in tps]
    if all(w is None for w in items):
        return list
    return lambda v: [x if w is None else w(x) for w, x in zip(items, v, strict=True)]


def _plain(value: Any) -> Any:
    """A value as JSON has it, whatever its type: records as documents, tuples as lists,
    bytes as hex."""
    if isinstance(value, Record):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return written(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _name(tp: Any) -> str:
    if isinstance(tp, tuple):
        return " or ".join(_name(t) for t in tp)
    if not isinstance(tp, type):
        return "null" if tp is None else _name(type(tp))
    return {dict: "an object", list: "a list", str: "a string", int: "an integer",
            float: "a number", bool: "a boolean"}.get(tp, tp.__name__)
