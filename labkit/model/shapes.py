"""A data file's shape declared as data: its mappings' keys (:class:`Keys`), each key's
type and, for a number, its range (:class:`Limit`); every node gives its part of the
file's JSON Schema (draft-07, :meth:`Shape.schema`), and a checker reads the keys, limits
and choices from the same nodes. :mod:`labkit.model.scenario_doc` declares a scenario
file with them.

Also what an error says of a value that is not what it should be (:func:`kind_of`,
:func:`number_text`). Pure: nothing here touches anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class Limit:
    """A number's finite range: ``lo`` (excluded when ``above``) to ``hi``, whole numbers
    only when ``integer``; ``why`` says where a bound comes from, when it is not plain."""

    lo: float
    hi: float
    integer: bool = False
    above: bool = False
    why: str = ""

    @property
    def range(self) -> str:
        lo, hi = (f"{x:g}" if isinstance(x, float) else str(x) for x in (self.lo, self.hi))
        return f"> {lo} and at most {hi}" if self.above else f"between {lo} and {hi}"

    def problem(self, value, shown: Any = None) -> str | None:
        """What is wrong with ``value`` here (None: nothing; inf and nan never fit);
        ``shown``: the value as written, when ``value`` was read from it."""
        if isinstance(value, bool) or not isinstance(value, int if self.integer else int | float):
            return (f"must be {'an integer' if self.integer else 'a number'}, got "
                    f"{number_text(value) or kind_of(value)}")
        if (value > self.lo if self.above else value >= self.lo) and value <= self.hi:
            return None
        why = f" ({self.why})" if self.why else ""
        return f"must be {self.range}{why}, got {value if shown is None else shown!r}"

    def schema(self) -> dict[str, Any]:
        out = {"type": "integer" if self.integer else "number",
               "exclusiveMinimum" if self.above else "minimum": self.lo, "maximum": self.hi}
        return {**out, "description": self.why} if self.why else out


def kind_of(value) -> str:
    """A value's type in the words errors use ("a mapping", "a list", ...)."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


NUMBER_TEXT = re.compile(r"\s*[-+]?(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][-+]?\d+)?\s*")


def number_text(value) -> str | None:
    """What an error says of text written where a number goes: ``1e3`` (YAML 1.1 reads a
    float only with a '.' and a signed exponent) or a quoted ``'1000'``, with what to
    write instead; None for any other value."""
    if not isinstance(value, str) or not NUMBER_TEXT.fullmatch(value):
        return None
    if yaml.resolver.Resolver().resolve(yaml.ScalarNode, value.strip(), (True, False)) in (
            "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):  # as safe_load reads it
        return f"the text {value!r} (write it without quotes)"
    x = float(value.replace("_", ""))
    mantissa, exponent = f"{x:e}".split("e")
    mantissa = mantissa.rstrip("0") + "0" * mantissa.rstrip("0").endswith(".")
    options = [f"{int(x)}"] if x.is_integer() and abs(x) < 1e15 else []
    options.append(f"{mantissa}e{int(exponent):+d}")
    return (f"the text {value!r} (YAML 1.1 reads {value.strip()} as text, not a number: "
            f"write {' or '.join(options)})")


# --- the nodes ------------------------------------------------------------------------------


class Shape:
    """What one value of the file may be."""

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Num(Shape):
    """A number within ``bound``, which the file's table of limits names ``limit``."""

    limit: str
    bound: Limit

    def schema(self) -> dict[str, Any]:
        return self.bound.schema()


@dataclass(frozen=True)
class Pattern(Shape):
    """A string that ``regex`` matches whole."""

    regex: re.Pattern[str] | str

    def schema(self) -> dict[str, Any]:
        """``(?![\\s\\S])`` is the end of the text in Python's re and ECMA-262 alike
        (Python's ``$`` would let a final newline through)."""
        pattern = self.regex if isinstance(self.regex, str) else self.regex.pattern
        return {"type": "string", "pattern": f"^(?:{pattern})(?![\\s\\S])"}


@dataclass(frozen=True)
class Size(Shape):
    """A whole number of bytes within a limit, or a size with a unit (``64K``, ``4MiB``)
    that ``unit`` matches; ``multiple_of`` bytes when set."""

    num: Num
    unit: Pattern
    multiple_of: int | None = None

    @property
    def limit(self) -> str:
        return self.num.limit

    def schema(self) -> dict[str, Any]:
        extra = {"multipleOf": self.multiple_of} if self.multiple_of else {}
        return {"anyOf": [{**self.num.schema(), **extra}, self.unit.schema()]}


@dataclass(frozen=True)
class Text(Shape):
    """A non-empty string."""

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "minLength": 1}


@dataclass(frozen=True)
class Type(Shape):
    """Any value of a JSON type (``string``, ``boolean``, ``null``...) or of several."""

    name: str | tuple[str, ...]

    def schema(self) -> dict[str, Any]:
        return {"type": self.name if isinstance(self.name, str) else list(self.name)}


FLAG = Type("boolean")
NULL = Type("null")


@dataclass(frozen=True)
class Choice(Shape):
    """One of ``values``."""

    values: tuple[Any, ...]

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


@dataclass(frozen=True)
class Const(Shape):
    value: Any

    def schema(self) -> dict[str, Any]:
        return {"const": self.value}


@dataclass(frozen=True)
class ListOf(Shape):
    """A list of ``item``; ``bounds`` (JSON Schema's ``minItems``, ``maxItems``,
    ``uniqueItems``) in the order written, after the items or, ``bounds_first``, before."""

    item: Shape
    bounds: tuple[tuple[str, Any], ...] = ()
    bounds_first: bool = False

    def schema(self) -> dict[str, Any]:
        items = {"items": self.item.schema()}
        bounds = dict(self.bounds)
        return {"type": "array", **(bounds | items if self.bounds_first else items | bounds)}


def list_of(item: Shape, *, first: bool = False, **bounds: Any) -> ListOf:
    """A :class:`ListOf` with its bounds as keywords (``minItems=1``...)."""
    return ListOf(item, tuple(bounds.items()), first)


@dataclass(frozen=True)
class AnyOf(Shape):
    arms: tuple[Shape, ...]
    one: bool = False  # oneOf: exactly one arm

    def schema(self) -> dict[str, Any]:
        return {"oneOf" if self.one else "anyOf": [a.schema() for a in self.arms]}


@dataclass(frozen=True)
class Keys(Shape):
    """A mapping of these keys only (``props``, in the order the schema lists them), of
    which ``required`` must be there; ``extra``: more of the schema (``minProperties``)."""

    props: Mapping[str, Shape]
    required: AbstractSet[str] = frozenset()
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def keys(self) -> set[str]:
        """The keys a mapping may hold: what the checker allows."""
        return set(self.props)

    def __getitem__(self, key: str) -> Shape:
        return self.props[key]

    def schema(self) -> dict[str, Any]:
        out = {"type": "object", "properties": {k: v.schema() for k, v in self.props.items()},
               "additionalProperties": False}
        return {**out, **({"required": sorted(self.required)} if self.required else {}),
                **dict(self.extra)}


@dataclass(frozen=True)
class MapOf(Shape):
    """A mapping of any keys ``names`` matches, each to a ``value``."""

    names: Shape
    value: Shape

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "propertyNames": self.names.schema(),
                "additionalProperties": self.value.schema()}


@dataclass(frozen=True)
class Tagged(Shape):
    """A mapping whose ``tag`` key says its kind: one of ``kinds`` (each with its own
    keys), or any name ``other`` matches (whose keys the schema leaves open)."""

    tag: str
    kinds: Mapping[str, Shape]
    names: tuple[str, ...]  # the kinds' names as errors list them
    other: Shape

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "required": [self.tag],
                "properties": {self.tag: {"anyOf": [Choice(self.names).schema(),
                                                    self.other.schema()]}},
                "allOf": [{"if": {"properties": {self.tag: {"const": kind}},
                                  "required": [self.tag]}, "then": then.schema()}
                          for kind, then in self.kinds.items()]}


@dataclass(frozen=True)
class Described(Shape):
    """The root of a file's schema: its title and description."""

    title: str
    description: str
    shape: Shape
    draft: str = "http://json-schema.org/draft-07/schema#"  # what editors' YAML extensions read

    def schema(self) -> dict[str, Any]:
        return {"$schema": self.draft, "title": self.title, "description": self.description,
                **self.shape.schema()}
