"""The JSON Schema of scenario files, made from :mod:`labkit.model.scenario`'s declarations: its
limits (``LIMITS``), name patterns, keys and choices.

Editors check and complete scenario files with it (docs/scenarios.md); `labkit schema`
prints it and docs/scenario.schema.json holds a copy. labkit itself checks a scenario with
:func:`labkit.model.scenario.parse`, which also checks what a schema cannot say: references
between keys (routers, hosts, links), the address plan, port names, sizes written with
units (``1024G``), combinations (``busy_share`` below ``idle_share``) and the keys of the
scenario's own traffic kinds. Pure: nothing here touches anything.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from labkit.model import scenario

DRAFT = "http://json-schema.org/draft-07/schema#"  # what editors' YAML extensions read


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of a scenario file."""
    link = _link("rate_mbps", scenario.LINK_KEYS)
    layouts = "|".join(x for x in scenario.LAYOUTS if x != "isolated")  # <layout>+<controller>
    return {"$schema": DRAFT, "title": "labkit scenario",
            "description": "A labkit scenario file (docs/scenarios.md)",
            **_closed({
                "name": _whole(scenario.SCENARIO_NAME_RE.pattern),
                "description": {"type": "string", "minLength": 1},
                "scale_factor": _number("scale_factor"),
                "seed": _number("seed"),
                "defaults": _closed({"link": _closed(link)}),
                "fabric": _fabric(link),
                "lanes": _lanes(),
                "traffic": {"type": "array", "items": _entry()},
                "policies": {"type": "array", "minItems": 1, "items": {"anyOf": [
                    {"enum": list(scenario.POLICIES)},
                    _whole(rf"(?:(?:{layouts})\+)?{scenario.LABEL_RE.pattern}")]}},
                "control": _closed({
                    **{k: _number(k) for k in scenario.ControlSpec.__dataclass_fields__
                       if k not in ("dcqcn", "controllers")},
                    "dcqcn": {"type": "boolean"}, "controllers": _class_files()}),
                "kinds": _class_files(),
                "transport": _closed({
                    "tcp": {"enum": list(scenario.TCP_CONTROLS)},
                    "hosts": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "ecn_k_packets": _number("ecn_k_packets")}),
                "emulation": _closed({
                    "gso_packets": _number("gso_packets"),
                    "rate_factor": {"anyOf": [_number("rate_factor"), {"const": scenario.AUTO}]},
                    "engines": {"enum": list(scenario.ENGINES)}}),
            }, {"name", "fabric", "traffic"})}


def _number(limit: str) -> dict:
    bound = scenario.LIMITS[limit]
    out = {"type": "integer" if bound.integer else "number",
           "exclusiveMinimum" if bound.above else "minimum": bound.lo, "maximum": bound.hi}
    return {**out, "description": bound.why} if bound.why else out


def _whole(pattern: str) -> dict:
    """A string that ``pattern`` matches whole: ``(?![\\s\\S])`` is the end of the text in
    Python's re and ECMA-262 alike (Python's ``$`` would let a final newline through)."""
    return {"type": "string", "pattern": f"^(?:{pattern})(?![\\s\\S])"}


def _closed(properties: dict, required: AbstractSet[str] = frozenset()) -> dict:
    """An object of these keys only."""
    out = {"type": "object", "properties": properties, "additionalProperties": False}
    return {**out, "required": sorted(required)} if required else out


def _list(items: dict, **bounds) -> dict:
    return {"type": "array", "items": items, **bounds}


NAME = _whole(scenario.NAME_RE.pattern)
LABEL = _whole(scenario.LABEL_RE.pattern)
PAIR = _list(NAME, minItems=2, maxItems=2)
SELECTION = {"anyOf": [{"enum": list(scenario.ROLES)}, NAME, _list(NAME, minItems=1,
                                                             uniqueItems=True)]}
ARGV = {"anyOf": [{"type": "string", "minLength": 1},
                  _list({"type": "string"}, minItems=1)]}


def _size(limit: str = "size_bytes", **extra) -> dict:
    """A whole number of bytes, or a size with a unit (whose range only the checker
    knows)."""
    return {"anyOf": [{**_number(limit), **extra}, _whole(scenario.SIZE_RE.pattern)]}


def _link(rate: str, keys) -> dict:
    return {k: _number(rate if k == "rate_mbps" else k) for k in sorted(keys)}


def _class_files() -> dict:
    """``{name: file.py:Class}``: the scenario's own controllers or traffic kinds."""
    return {"type": "object", "propertyNames": LABEL,
            "additionalProperties": _whole(r".+\.py:[A-Za-z_][A-Za-z0-9_]*")}


def _fabric(link: dict) -> dict:
    placement = {"type": "object", "propertyNames": NAME, "additionalProperties": _list(NAME)}
    return _closed({
        "routers": _list(NAME, minItems=1, uniqueItems=True),
        "hosts": _closed({role: placement for role in scenario.ROLES}),
        "links": _list({"anyOf": [PAIR, _closed({"between": PAIR, **link}, {"between"})]}),
        "bottlenecks": _list(PAIR, minItems=1, maxItems=scenario.MAX_BOTTLENECKS),
        "lossless": {"anyOf": [{"type": "boolean"},
                               _list({"enum": list(scenario.LANES)}, uniqueItems=True)]},
        "gpus_per_host": _number("gpus_per_host"),
        "nvlink": _closed(_link("nvlink.rate_mbps", {"rate_mbps", "mtu", "buffer_kb"})),
    }, {"routers", "hosts", "bottlenecks"})


def _lanes() -> dict:
    fields = {k: {"const": True} if k == "roce" else _number("dscp" if k == "dscp" else "port")
              for k in sorted(scenario.RULE_KEYS)}  # roce: false is no condition
    rules = _list({**_closed(fields), "minProperties": 1}, maxItems=scenario.MAX_LANE_RULES)
    return _closed({**dict.fromkeys(scenario.LANES, rules),
                    "program": _whole(r".+\.bpf\.[co]")})


def _entry() -> dict:
    """A traffic entry: a built-in kind's keys, or any keys for the scenario's own kinds."""
    return {"type": "object", "required": ["kind"],
            "properties": {"kind": {"anyOf": [{"enum": list(scenario.BUILT_IN_KINDS)}, LABEL]}},
            "allOf": [{"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                       "then": then} for kind, then in _built_in_kinds().items()]}


def _built_in_kinds() -> dict[str, dict]:
    kind = {"kind": {"type": "string"}}
    units = {"size": _size(), "count": _number("count"), "ms": _number("compute_ms")}
    jobs = [_closed({**kind, "parallelism": {"const": p}, "ranks": SELECTION,
                     "iterations": _number("iterations"),
                     **{k: units[unit] for k, unit in params.items()},
                     **({"schedule": {"enum": list(scenario.PIPELINE_SCHEDULES)}}
                        if p == "pipeline" else {})},
                    {"parallelism", "ranks", "iterations", *params})
            for p, params in scenario.JOB_PARAMS.items()]
    on_off = _closed({"process": {"const": "on_off"},
                      **{k: _number(k) for k in ("on_ms", "off_ms", "phase_ms")}}, {"process"})
    others = [p for p in scenario.ARRIVALS if p != "on_off"]
    arrival = {"anyOf": [{"enum": list(scenario.ARRIVALS)}, on_off,
                         _closed({"process": {"enum": others}}, {"process"})]}
    return {
        "allreduce": _closed({**kind, "algo": {"enum": [*scenario.ALLREDUCE_ALGOS, scenario.AUTO]},
                              "ranks": SELECTION, "size_bytes": _size(),
                              "iterations": _number("iterations"),
                              "compute_ms": _number("compute_ms")},
                             {"ranks", "size_bytes", "iterations"}),
        "job": {"oneOf": jobs},
        "storage": _closed({
            **kind, "name": LABEL, "mix": {"enum": list(scenario.MIXES)},
            "pattern": {"enum": list(scenario.PATTERNS)},
            "server": {"anyOf": [NAME, _list(NAME, minItems=1, maxItems=1)]},
            "clients": SELECTION, "offered_load": _number("offered_load"),
            "port": _number("port"), "queues": _number("queues"),
            "io_bytes": _size("io_bytes", multipleOf=512),
            "queue_depth": _number("queue_depth"), "arrival": arrival},
            {"server", "clients"}),
        "command": _closed({**kind, "name": LABEL, "host": SELECTION, "run": ARGV,
                            "serve": _closed({"host": SELECTION, "run": ARGV},
                                             {"host", "run"})},
                           {"name", "host", "run"}),
        "program": _closed({
            **kind, "name": LABEL, "ranks": SELECTION, "run": ARGV,
            "python": {"type": "string", "minLength": 1},
            "iterations": _number("iterations"), "warmup": _number("warmup"),
            "env": {"type": "object", "propertyNames": _whole(scenario.ENV_RE.pattern),
                    "additionalProperties": {"type": ["string", "number"]}},
            "master_port": _number("master_port"), "dscp": _number("program.dscp"),
            "quiet_ms": _number("quiet_ms"),
            "duration_s": {"anyOf": [_number("duration_s"), {"type": "null"}]},
            "imports": _list(_whole(scenario.MODULE_RE.pattern)),
            "launcher": {"enum": list(scenario.LAUNCHERS)},
            "timing": {"enum": list(scenario.TIMINGS)}},
            {"ranks", "run"}),
    }
