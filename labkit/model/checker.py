"""The scenario checker's means: :class:`ScenarioError` (the file, the key as a dotted
path, the reason) and :class:`Checker`, whose typed accessors raise it, a section's keys,
numbers, sizes and flags checked as :mod:`labkit.model.scenario_doc` declares them.

:mod:`labkit.model.scenario` and the modules it reads sections with
(:mod:`.scenario_fabric`, :mod:`.scenario_traffic`) check with it; a grid's errors
(:mod:`labkit.model.grid`) are ScenarioErrors too. Pure.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from fractions import Fraction
from typing import Any, NoReturn

from labkit.model import inputs
from labkit.model.scenario_doc import LABEL_RE, LIMITS, NAME_RE, SIZE_RE
from labkit.model.shapes import FLAG, NULL, AnyOf, Keys, Num, Shape, Size, kind_of, number_text


class ScenarioError(ValueError):
    """A scenario file is invalid: ``file``, ``key`` and ``reason`` say where and why."""

    def __init__(self, file: str, key: str, reason: str):
        self.file, self.key, self.reason = file, key, reason
        super().__init__(inputs.one_line(f"{file}: {key or '<top>'}: {reason}"))


class Checker:
    """Typed accessors that raise ScenarioError with the key path of the offending value."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, key: str, reason: str) -> NoReturn:
        raise ScenarioError(self.file, key, reason)

    def mapping(self, value, key: str, allowed: set[str] | None,
                required: AbstractSet[str] = frozenset()):
        """``value`` as a mapping whose keys are all ``allowed`` (None: any string)."""
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping, got {kind_of(value)}")
        for k in value:
            if allowed is None and not isinstance(k, str):
                self.fail(join(key, k), "a key must be a string")
            if allowed is not None and (not isinstance(k, str) or k not in allowed):
                self.fail(join(key, k), f"unknown key (allowed: {', '.join(sorted(allowed))})")
        for k in sorted(required - set(value)):
            self.fail(join(key, k), "is required")
        return value

    def keys(self, value, key: str, shape: Keys):
        """``value`` as a mapping of the keys ``shape`` declares, its required ones in it."""
        return self.mapping(value, key, shape.keys, shape.required)

    def get(self, doc: dict, key: str, shape: Keys, name: str, default: Any = None) -> Any:
        """``doc[name]`` (``default`` when missing) checked as ``shape`` declares it."""
        return self.check(shape[name], doc.get(name, default), join(key, name))

    def check(self, shape: Shape, value, key: str) -> Any:
        """``value`` checked as ``shape``, a number, a size or a flag (or one of them or
        null), declares it."""
        if isinstance(shape, Num):
            return self.number(value, key, shape.limit)
        if isinstance(shape, Size):
            n = self.size(value, key, shape.limit)
            if shape.multiple_of and n % shape.multiple_of:
                self.fail(key, f"must be a multiple of {shape.multiple_of} bytes, got {n}")
            return n
        if shape == FLAG:
            return self.boolean(value, key)
        if isinstance(shape, AnyOf) and len(shape.arms) == 2 and shape.arms[1] == NULL:
            return None if value is None else self.check(shape.arms[0], value, key)
        raise TypeError(f"{key}: a {type(shape).__name__} is checked by its section")  # a slip

    def seq(self, value, key: str) -> list:
        if not isinstance(value, list):
            self.fail(key, f"must be a list, got {kind_of(value)}")
        return value

    def string(self, value, key: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(key, f"must be a non-empty string, got {as_text(value)}")
        if "\0" in value:
            self.fail(key, "must not hold a NUL character")
        return value

    def name(self, value, key: str) -> str:
        value = self.string(value, key)
        if not NAME_RE.fullmatch(value):
            self.fail(key, f"{value!r} is not a node name (a-z then up to 8 of a-z0-9)")
        return value

    def label(self, value, key: str, like: str) -> str:
        if not isinstance(value, str) or not LABEL_RE.fullmatch(value):
            got = repr(value) if isinstance(value, str) and value else as_text(value)
            self.fail(key, f"must be a label like {like} (a-z, then a-z0-9_-, at most 32), "
                           f"got {got}")
        return value

    def number(self, value, key: str, limit: str) -> float:
        """``value`` within ``LIMITS[limit]``: an int for an integer limit, else a float."""
        bound = LIMITS[limit]
        if problem := bound.problem(value):
            self.fail(key, problem)
        return value if bound.integer else float(value)

    def integer(self, value, key: str, limit: str) -> int:
        """``value`` within ``LIMITS[limit]``, an integer limit."""
        if not LIMITS[limit].integer:
            raise TypeError(f"LIMITS[{limit!r}] is not an integer limit")  # labkit's own slip
        return int(self.number(value, key, limit))

    def boolean(self, value, key: str) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {kind_of(value)}")
        return value

    def size(self, value, key: str, limit: str = "size_bytes") -> int:
        """A size in bytes (``4MiB``, ``64K``, ``65536``) within ``LIMITS[limit]``."""
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        elif isinstance(value, str) and (m := SIZE_RE.fullmatch(value)):
            unit = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]
            n = int(Fraction(m.group(1)) * unit)
        else:
            self.fail(key, f"must be a size like 4MiB, 64K or 65536, got "
                           f"{number_text(value) or repr(value)}")
        if problem := LIMITS[limit].problem(n, value):
            self.fail(key, problem)
        return n


def as_text(value) -> str:
    """What an error says of a value that should have been text: an empty string, or how
    YAML 1.1 came to read a name as a boolean or a number, and the quotes that fix it."""
    if value == "" or value is None:
        return "an empty string" if value == "" else "nothing (null)"
    if isinstance(value, bool):
        words = "yes, on and true" if value else "no, off and false"
        return (f"the boolean {str(value).lower()} (YAML 1.1 reads {words} so: write a name "
                f"in quotes, e.g. '{'yes' if value else 'no'}')")
    if isinstance(value, int | float):
        return f"the number {value!r} (write it in quotes, '{value}', to make it text)"
    return kind_of(value)


def join(key: str, sub) -> str:
    """The key path of ``sub`` (a key or an index) within ``key``."""
    if isinstance(sub, int):
        return f"{key}[{sub}]"
    return f"{key}.{sub}" if key else str(sub)
