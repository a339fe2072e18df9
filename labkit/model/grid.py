"""Grid files: a scenario, axes over its keys, policy sets and seeds, expanded into points.

A grid is plain data, like a scenario (docs/batches.md)::

    scenario: ../bottleneck.yaml           # relative to the grid file
    axes:                                  # a scenario key: the values it takes
      traffic[0].size_bytes: [1MiB, 4MiB]
      defaults.link.rate_mbps: [50, 100]
    policies: [fifo, priority]             # each entry one run's policies: a name or a list
    seeds: [1, 2]
    duration: 10                           # each policy's traffic cap, seconds

Every combination is a :class:`Point`: axes in the file's order, then the policy sets, then
the seeds, the last varying fastest, so a grid always expands in the same order. A point's
scenario is the scenario file's document with the point's values written in, parsed by
:func:`labkit.model.scenario.parse` under the scenario file's own path (its relative paths keep
working) and validated like the file itself.

Key paths name one place in the scenario document: mapping keys joined by ``.``, and list
items by ``[N]`` (from 0) or ``[field=value]`` (the one item whose ``field`` is ``value``),
e.g. ``traffic[kind=storage].offered_load`` or ``fabric.links[1].rate_mbps``. A path may end
in (or pass through) a mapping key the file leaves out, such as ``defaults.link.loss_percent``;
list items must exist. Mistakes raise :class:`GridError`, which names the grid file, the key
and the reason, as :class:`~labkit.model.scenario.ScenarioError` does for scenarios (it is one).
Pure: loading a grid reads the two files and touches nothing else.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from labkit.model import inputs
from labkit.model import scenario as scenario_mod
from labkit.model.checker import ScenarioError
from labkit.model.scenario_doc import LIMITS, SCENARIO_NAME_RE
from labkit.model.scenario_spec import Scenario
from labkit.model.shapes import kind_of

GRID_KEYS = {"scenario", "name", "description", "axes", "policies", "seeds", "duration",
             "slurm"}
# scenario keys that a grid sets its own way
NOT_AN_AXIS = {
    "name": "the runs keep the scenario's name (the grid's own `name` names the batch)",
    "seed": "give the seeds as the grid's `seeds`",
    "policies": "give the policy sets as the grid's `policies`",
}
MAX_POINTS = 10_000
DEFAULT_TIME_MIN = 60  # a Slurm job's time limit when the grid does not say

_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_SETTING = re.compile(r"((?:[^=\[]|\[[^\]]*\])+)=(.*)", re.S)  # the key's '=' are in [...]
_SEGMENT = re.compile(rf"\.?(?P<name>{_NAME})|\[(?P<index>\d+)\]"
                      rf"|\[(?P<field>{_NAME})=(?P<value>[^\]=]+)\]")


class GridError(ScenarioError):
    """A grid file is invalid: ``file``, ``key`` and ``reason`` say where and why."""


@dataclass(frozen=True)
class Axis:
    """One scenario key and the values the grid gives it, as written."""

    key: str  # as written in the grid, e.g. "traffic[kind=storage].offered_load"
    path: tuple[str | int, ...]  # resolved against the scenario: mapping keys and indices
    values: tuple[Any, ...]


@dataclass(frozen=True)
class SlurmOptions:
    """What a Slurm job of the batch asks for besides a whole node (docs/batches.md)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time_min: int = DEFAULT_TIME_MIN
    python: str | None = None  # the interpreter on the nodes (default: this one's path)
    setup: tuple[str, ...] = ()  # shell lines the job runs first (e.g. `module load ...`)


SLURM_KEYS = set(SlurmOptions.__dataclass_fields__)  # a grid's `slurm` keys: its fields


@dataclass(frozen=True)
class Point:
    """One run of a batch: its values (key as written -> value as written), policies, seed
    and the scenario they make."""

    index: int
    parameters: dict[str, Any]
    policies: tuple[str, ...]
    seed: int
    scenario: Scenario

    @property
    def name(self) -> str:
        return f"p{self.index:03d}"

    @property
    def label(self) -> str:
        values = [f"{k}={_show(v)}" for k, v in self.parameters.items()]
        return " ".join([*values, f"policies={','.join(self.policies)}", f"seed={self.seed}"])


@dataclass(frozen=True)
class Grid:
    path: str
    name: str
    description: str
    scenario_path: str
    base: Scenario  # the scenario file as written
    base_doc: Any
    axes: tuple[Axis, ...]
    policies: tuple[tuple[str, ...], ...]
    seeds: tuple[int, ...]
    duration: float | None
    slurm: SlurmOptions
    text: str  # the grid file as written
    sha256: str

    @property
    def size(self) -> int:
        return math.prod(len(a.values) for a in self.axes) * len(self.policies) * len(self.seeds)

    @cached_property
    def points(self) -> list[Point]:
        """Every combination, in a stable order (see the module's docstring), each with its
        scenario parsed and validated."""
        out = []
        combinations = itertools.product(*(a.values for a in self.axes))
        for i, (chosen, policies, seed) in enumerate(
                itertools.product(combinations, self.policies, self.seeds)):
            doc = self.base_doc
            for axis, value in zip(self.axes, chosen, strict=True):
                doc = apply(doc, axis.path, value)
            params = {axis.key: value for axis, value in zip(self.axes, chosen, strict=True)}
            try:
                sc = self._parse(doc)
            except ScenarioError as exc:
                where = ", ".join(f"{k}={_show(v)}" for k, v in params.items())
                raise GridError(self.path, "axes", f"the scenario refuses the combination "
                                                   f"{where}: {exc}") from None
            out.append(Point(i, params, policies, seed, replace(sc, seed=seed)))
        return out

    def _parse(self, doc: Any) -> Scenario:
        sc = scenario_mod.parse(doc, self.scenario_path)
        # a derived scenario is not the file: its runs record it whole, and no file's hash
        return replace(sc, sha256=self.base.sha256 if doc == self.base_doc else "")


def scenario_with(path: str | Path, settings: list[str]) -> Scenario:
    """The scenario file at ``path`` with ``settings`` written in, each ``KEY=VALUE`` (a key
    path as in a grid's axes, a YAML value): one point of a grid, from the command line
    (``labkit run --set fabric.lossless=true``). ScenarioError names the setting."""
    _, doc = scenario_mod.read_yaml(path)
    for setting in settings:
        match = _SETTING.fullmatch(setting)
        if not match:
            raise ScenarioError(str(path), f"--set {setting}",
                                "must be KEY=VALUE, e.g. fabric.lossless=true")
        key, raw = match.groups()
        try:
            doc = apply(doc, resolve(doc, key), inputs.yaml_document(raw, "--set"))
        except inputs.InputError as exc:
            raise ScenarioError(str(path), f"--set {key}", exc.reason) from None
        except ValueError as exc:
            raise ScenarioError(str(path), f"--set {key}", str(exc)) from None
    # a derived scenario is not the file: its runs record it whole, and no file's hash
    return replace(scenario_mod.parse(doc, str(path)), sha256="")


def load(path: str | Path) -> Grid:
    """Read and validate a grid file (and the scenario it names)."""
    text, doc = scenario_mod.read_yaml(path, GridError)
    return parse(doc, str(path), text)


def parse(doc: Any, file: str = "<grid>", text: str = "") -> Grid:
    """Validate a grid document; ``file`` is its path (the scenario's is relative to it)."""

    def fail(key: str, reason: str):
        raise GridError(file, key, reason)

    if not isinstance(doc, dict):
        fail("", f"must be a mapping of {', '.join(sorted(GRID_KEYS))}, got {kind_of(doc)}")
    if "scenario" not in doc and {"fabric", "traffic"} & set(doc):
        fail("", "this is a scenario file, not a grid (a grid names the scenario it varies "
                 "under `scenario:`): `labkit run` runs it, `labkit validate` and `labkit "
                 "inspect` check it")
    for k in doc:
        if k not in GRID_KEYS:
            fail(str(k), f"unknown key (allowed: {', '.join(sorted(GRID_KEYS))})")
    if "scenario" not in doc:
        fail("scenario", "is required: the scenario file the grid varies")
    if not isinstance(doc["scenario"], str) or not doc["scenario"]:
        fail("scenario", f"must be a path to a scenario file, got {kind_of(doc['scenario'])}")
    scenario_path = Path(os.path.normpath(Path(file).parent / doc["scenario"]))
    if not scenario_path.is_file():
        fail("scenario", f"{scenario_path} does not exist")
    try:
        base_text, base_doc = scenario_mod.read_yaml(scenario_path)
        base = scenario_mod.parse(base_doc, str(scenario_path))
    except ScenarioError as exc:
        fail("scenario", f"the scenario itself is invalid: {exc}")
    base = replace(base, sha256=hashlib.sha256(base_text.encode()).hexdigest())
    name = doc.get("name", Path(file).stem)
    if not isinstance(name, str) or not SCENARIO_NAME_RE.fullmatch(name):
        fail("name", f"{name!r} cannot name a batch: use letters, digits, '-' and '_' (up to "
                     "64; it becomes part of the batch's id and directory)")
    description = doc.get("description", "")
    if not isinstance(description, str):
        fail("description", f"must be a string, got {kind_of(description)}")
    grid = Grid(
        path=file, name=name, description=description, scenario_path=str(scenario_path),
        base=base, base_doc=base_doc, axes=_axes(file, doc.get("axes", {}), base_doc, base),
        policies=_policy_sets(file, doc.get("policies"), base),
        seeds=_seeds(file, doc.get("seeds"), base), duration=_duration(file, doc.get("duration")),
        slurm=_slurm(file, doc.get("slurm", {})), text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest() if text else "")
    if grid.size > MAX_POINTS:
        fail("axes", f"{grid.size} points; at most {MAX_POINTS} in one batch")
    if not grid.points:  # every combination makes a valid scenario before a batch starts
        fail("axes", "the grid has no point")
    return grid


# --- key paths --------------------------------------------------------------------------------


def parse_key(key: str) -> list[str | int | tuple[str, str]]:
    """A key path's segments: a mapping key (str), an index (int) or a (field, value)
    selector. ValueError says what is wrong with it."""
    if not isinstance(key, str) or not key:
        raise ValueError("a key path must be a non-empty string")
    segments: list[str | int | tuple[str, str]] = []
    pos = 0
    while pos < len(key):
        m = _SEGMENT.match(key, pos)
        if m is None or (pos == 0 and key.startswith(".")) or \
                (pos > 0 and m.group("name") and not key[pos] == "."):
            raise ValueError(f"cannot read {key!r} at character {pos + 1} ({key[pos:]!r}): "
                             "write keys joined by '.', list items as [N] or [field=value], "
                             "e.g. traffic[0].size_bytes")
        if m.group("name") is not None:
            segments.append(m.group("name"))
        elif m.group("index") is not None:
            segments.append(int(m.group("index")))
        else:
            segments.append((m.group("field"), m.group("value").strip()))
        pos = m.end()
    if not isinstance(segments[0], str):
        raise ValueError(f"{key!r} must start with a key of the scenario, e.g. traffic[0]")
    return segments


def resolve(doc: Any, key: str) -> tuple[str | int, ...]:
    """``key`` as concrete steps into ``doc`` (selectors replaced by indices). ValueError says
    where it does not fit the document."""
    steps: list[str | int] = []
    node = doc
    segments = parse_key(key)
    for seg in segments:
        here = _show_path(steps) or "the scenario"
        if isinstance(seg, str):
            if node is not None and not isinstance(node, dict):
                raise ValueError(f"{here} is {kind_of(node)}, not a mapping: it has no key "
                                 f"{seg!r}" + (" (select an item with [N] or [field=value])"
                                               if isinstance(node, list) else ""))
            steps.append(seg)
            node = node.get(seg) if isinstance(node, dict) else None
            continue
        if not isinstance(node, list):
            raise ValueError(f"{here} is {kind_of(node)}, not a list: "
                             f"{_show_segment(seg)} selects nothing")
        if isinstance(seg, int):
            if seg >= len(node):
                raise ValueError(f"{here} has {len(node)} item(s): [{seg}] is out of range")
            index = seg
        else:
            field, value = seg
            hits = [i for i, item in enumerate(node) if isinstance(item, dict)
                    and field in item and _same(item[field], value)]
            if not hits:
                raise ValueError(f"no item of {here} has {field}={value}")
            if len(hits) > 1:
                raise ValueError(f"{len(hits)} items of {here} have {field}={value} (items "
                                 f"{', '.join(map(str, hits))}): select one with [N]")
            index = hits[0]
        steps.append(index)
        node = node[index]
    return tuple(steps)


def apply(doc: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """A copy of ``doc`` with ``value`` at ``path`` (mappings it passes through that are
    missing are made empty); ``doc`` is left as it was."""
    out = copy.deepcopy(doc)
    node = out
    for step, nxt in zip(path, path[1:], strict=False):
        if isinstance(step, str) and node.get(step) is None:
            node[step] = {} if isinstance(nxt, str) else node.get(step)
        node = node[step]
    node[path[-1]] = copy.deepcopy(value)
    return out


# --- the grid's parts -------------------------------------------------------------------------


def _axes(file: str, axes: Any, base_doc: Any, base: Scenario) -> tuple[Axis, ...]:
    if not isinstance(axes, dict):
        raise GridError(file, "axes", "must be a mapping of scenario key paths to lists of "
                                      f"values, got {kind_of(axes)}")
    out: list[Axis] = []
    for key, values in axes.items():
        at = f"axes.{key}"
        try:
            path = resolve(base_doc, key)
        except ValueError as exc:
            raise GridError(file, at, str(exc)) from None
        if path[0] in NOT_AN_AXIS:
            raise GridError(file, at, f"cannot be an axis: {NOT_AN_AXIS[path[0]]}")
        for other in out:
            short, long = sorted((other.path, path), key=len)
            if long[:len(short)] == short:
                raise GridError(file, at, f"overlaps the axis {other.key!r} (both set "
                                          f"{_show_path(short)}): keep one")
        if not isinstance(values, list):
            raise GridError(file, at, f"must be a list of values, got {kind_of(values)}")
        if not values:
            raise GridError(file, at, "an axis needs at least one value")
        seen: dict[str, int] = {}
        for i, value in enumerate(values):
            fingerprint = json.dumps(value, sort_keys=True, default=str)
            if fingerprint in seen:
                raise GridError(file, at, f"value {_show(value)} is given twice (items "
                                          f"{seen[fingerprint]} and {i}): keep one")
            seen[fingerprint] = i
            try:
                scenario_mod.parse(apply(base_doc, path, value), base.path)
            except ScenarioError as exc:
                raise GridError(file, at, f"value {_show(value)} (item {i}) makes the scenario "
                                          f"invalid: {exc}") from None
        out.append(Axis(key, path, tuple(values)))
    return tuple(out)


def _policy_sets(file: str, given: Any, base: Scenario) -> tuple[tuple[str, ...], ...]:
    if given is None:
        return (base.policies,)
    if not isinstance(given, list) or not given:
        raise GridError(file, "policies", "must be a non-empty list; each entry is one run's "
                                          "policies: a name (fifo) or a list ([isolated, fifo])")
    controllers = [name for name, _ in base.control.controllers]
    out: list[tuple[str, ...]] = []
    for i, entry in enumerate(given):
        names = [entry] if isinstance(entry, str) else entry
        if not isinstance(names, list) or not names:
            raise GridError(file, f"policies[{i}]", "must be a policy name or a non-empty list "
                                                    f"of them, got {kind_of(entry)}")
        for j, name in enumerate(names):
            try:
                scenario_mod.policy(name if isinstance(name, str) else repr(name), controllers)
            except ValueError as exc:
                key = f"policies[{i}]" if isinstance(entry, str) else f"policies[{i}][{j}]"
                raise GridError(file, key, str(exc)) from None
        if len(set(names)) != len(names):
            raise GridError(file, f"policies[{i}]", "names a policy twice")
        if tuple(names) in out:
            raise GridError(file, f"policies[{i}]", "the same policies as an earlier entry")
        out.append(tuple(names))
    return tuple(out)


def _seeds(file: str, given: Any, base: Scenario) -> tuple[int, ...]:
    if given is None:
        return (base.seed,)
    if not isinstance(given, list) or not given:
        raise GridError(file, "seeds", f"must be a non-empty list of integers, got "
                                       f"{kind_of(given)}")
    for i, s in enumerate(given):
        if problem := LIMITS["seed"].problem(s):
            raise GridError(file, f"seeds[{i}]", problem)
    if len(set(given)) != len(given):
        raise GridError(file, "seeds", "a seed is given twice")
    return tuple(given)


def _duration(file: str, given: Any) -> float | None:
    if given is None:
        return None
    if LIMITS["duration_s"].problem(given):
        raise GridError(file, "duration", f"must be a number of seconds "
                                          f"{LIMITS['duration_s'].range}, got {given!r}")
    return float(given)


def _slurm(file: str, given: Any) -> SlurmOptions:
    if not isinstance(given, dict):
        raise GridError(file, "slurm", f"must be a mapping, got {kind_of(given)}")
    for k in given:
        if k not in SLURM_KEYS:
            raise GridError(file, f"slurm.{k}", f"unknown key (allowed: "
                                                f"{', '.join(sorted(SLURM_KEYS))})")
    fields: dict[str, Any] = {}
    for k, v in given.items():
        if k == "time_min":
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise GridError(file, "slurm.time_min", f"must be a whole number of minutes "
                                                        f">= 1, got {v!r}")
            fields[k] = v
        elif k == "setup":
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise GridError(file, "slurm.setup", "must be a list of shell lines")
            fields[k] = tuple(v)
        elif not isinstance(v, str) or not v or not v.isprintable():
            raise GridError(file, f"slurm.{k}", f"must be a non-empty string, got {kind_of(v)}")
        else:
            fields[k] = v
    return SlurmOptions(**fields)


# --- helpers ----------------------------------------------------------------------------------


def _same(item_value: Any, written: str) -> bool:
    return str(item_value) == written or json.dumps(item_value) == written


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _show_segment(seg) -> str:
    return f"[{seg}]" if isinstance(seg, int) else f"[{seg[0]}={seg[1]}]"


def _show_path(steps) -> str:
    out = ""
    for s in steps:
        out += f"[{s}]" if isinstance(s, int) else (f".{s}" if out else s)
    return out
