"""Scenario files: load a YAML file and validate it into a :class:`Scenario`.

A scenario is plain data: defaults, the fabric (routers, hosts by role and leaf,
links, bottlenecks), lane rules, traffic and policies. This module is its checker: unknown
keys, wrong types and impossible values raise :class:`ScenarioError`, whose message names
the file, the key (as a dotted path) and the reason; it owns every number's range
(:data:`LIMITS`), every name's pattern and what each section may hold. Loading has no side
effects.

The types it builds are :mod:`labkit.model.scenario_spec`'s (the fabric's,
:mod:`labkit.model.fabric_spec`'s). It re-exports every one of them, so
``from labkit.model.scenario import Scenario, LaneRule`` works as it always has.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

import yaml

from labkit.model import inputs, lossless, topo
from labkit.model.abi import LANES  # the lanes a scenario names: the kernel's, in its order
from labkit.model.fabric_spec import FabricSpec, HostSpec, LinkSpec, ServerSpec

# the types, all re-exported (POLICIES by an alias: the checker does not use it)
from labkit.model.scenario_spec import (
    AUTO,
    CONTROLLERS,
    DEFAULT_K_PACKETS,
    DEFAULT_PYTHON,
    ENGINES,
    HOST_REF,
    JOB_DSCP,
    LAUNCHERS,
    LAYOUTS,
    PER_RANK_TEMPLATES,
    RANK_TEMPLATES,
    ROCEV2_PORT,
    TCP_CONTROLS,
    TIMINGS,
    AllReduceSpec,
    Arrival,
    CommandSpec,
    ControlSpec,
    EmulationSpec,
    JobSpec,
    KindEntry,
    LaneRule,
    Policy,
    ProgramSpec,
    Scenario,
    StorageSpec,
    TransportSpec,
    policy,
)
from labkit.model.scenario_spec import POLICIES as POLICIES
from labkit.model.traffic import schedules

ROLES = ("gpu", "storage")
# names, each matched whole (fullmatch: `$` would let a final newline through)
SCENARIO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,8}")  # a node: "<node>-eth<k>" within IFNAMSIZ
LABEL_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # names that only label data
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # an environment variable's name
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KkMmGg]?)([iI]?[bB]?)\s*")
MAX_LANE_RULES = 32  # LK_MAX_RULES
IFNAMSIZ = 15  # Linux's longest interface name (16 bytes with its NUL)
MAX_SUBNETS = 255  # hosts, router links, NVLinks: 10.0.<i>, 10.1.<j>, 10.2.<k> (labkit.model.topo)
MAX_BOTTLENECKS = 8  # two watched ports each, of LK_MAX_PORTS (16)
MAX_MESSAGE_BYTES = 2**32 - 1  # the hot path's largest RoCE message (RETH's DMA length)
ALLREDUCE_ALGOS = ("ring", "tree", "halving_doubling", "hierarchical")  # model.traffic.schedules
BUILT_IN_KINDS = ("allreduce", "job", "program", "storage", "command")
MIN_RATE_FACTOR, MAX_RATE_FACTOR = 1 / 16, 16.0


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


# Every number of a scenario and its range, by the key that holds it: the checker's
# (below) and the JSON Schema's (labkit.model.schema). Beyond them, a value fails later, in the
# kernel or an agent, or makes no sense.
LIMITS = {
    "scale_factor": Limit(0, 1_000_000, above=True, why="real Mbit/s per emulated Mbit/s"),
    "seed": Limit(0, 2**31 - 1, integer=True),
    "rate_mbps": Limit(1, 10_000, why="Mbit/s, before rate_factor's x1/16 to x16"),
    "nvlink.rate_mbps": Limit(1, 100_000),
    "mtu": Limit(1280, 9000, integer=True),
    "buffer_kb": Limit(16, 1 << 20, integer=True),
    "loss_percent": Limit(0, 50),
    "gpus_per_host": Limit(1, 8, integer=True),
    "dscp": Limit(0, 63, integer=True),
    "port": Limit(1, 65535, integer=True),
    "iterations": Limit(1, 100_000, integer=True),
    "size_bytes": Limit(1, MAX_MESSAGE_BYTES, integer=True,
                        why="4 GiB - 1, the hot path's largest message"),
    "compute_ms": Limit(0, 60_000),
    "count": Limit(1, 256, integer=True),  # a job's layers, buckets, microbatches
    "offered_load": Limit(0, 100, above=True, why="times the first bottleneck's rate"),
    "queues": Limit(1, 16, integer=True),
    "queue_depth": Limit(1, 64, integer=True),
    "io_bytes": Limit(512, 1 << 20, integer=True),
    "on_ms": Limit(0, 60_000, above=True),
    "off_ms": Limit(0, 60_000),
    "phase_ms": Limit(0, 60_000),
    "program.dscp": Limit(1, 63, integer=True),
    "warmup": Limit(0, 1000, integer=True),
    "master_port": Limit(1024, 65535, integer=True),
    "quiet_ms": Limit(0.1, 1000),
    "duration_s": Limit(0, 3600, above=True),
    "target_us": Limit(0, 1_000_000, above=True),
    "interval_ms": Limit(1, 10_000, why="a controller's thread wakes this often"),
    "telemetry_delay_ms": Limit(0, 10_000),
    "relay_delay_ms": Limit(0, 10_000),
    "lead_ms": Limit(0, 10_000),
    "busy_share": Limit(0, 1, above=True),
    "idle_share": Limit(0, 1, above=True),
    "ce_us": Limit(0, 1_000_000, above=True),
    # the gates count horizon_ns x bytes/s in 64 bits (bpf/valve.bpf.c): 900 ms at the
    # fastest link, 10 Gbit/s x MAX_RATE_FACTOR, is 1.8e19 < 2^64
    "horizon_ms": Limit(0.1, 900, why="the hosts' gates count it times the rate in 64 bits"),
    "fabric_ce_us": Limit(0, 10_000_000, above=True),
    "gso_packets": Limit(1, 16, integer=True),
    "ecn_k_packets": Limit(1, 10_000, integer=True, why="packets queued at a port"),
    "rate_factor": Limit(MIN_RATE_FACTOR, MAX_RATE_FACTOR),
}


class ScenarioError(ValueError):
    """A scenario file is invalid: ``file``, ``key`` and ``reason`` say where and why."""

    def __init__(self, file: str, key: str, reason: str):
        self.file, self.key, self.reason = file, key, reason
        super().__init__(inputs.one_line(f"{file}: {key or '<top>'}: {reason}"))


# per parallelism: required sizes / counts / times, and optional keys with defaults
JOB_PARAMS = {
    "data": {"gradient_bytes": "size", "buckets": "count", "compute_ms": "ms"},
    "tensor": {"layers": "count", "activation_bytes": "size", "layer_compute_ms": "ms"},
    "pipeline": {"microbatches": "count", "activation_bytes": "size", "stage_compute_ms": "ms"},
    "expert": {"layers": "count", "tokens_bytes": "size", "layer_compute_ms": "ms"},
}
PIPELINE_SCHEDULES = ("1f1b", "gpipe")


ARRIVALS = ("constant", "on_off", "poisson")
PATTERNS = ("read", "write")  # a storage entry's: server -> clients, clients -> server
MAX_STORAGE_ENTRIES, MAX_STORAGE_CONNECTIONS = 12, 1000  # each entry owns 1000 source ports


# what each storage mix means when the scenario does not say otherwise
MIXES: dict[str, dict[str, Any]] = {
    "dataset": {"pattern": "read", "io_bytes": 128 * 1024, "queue_depth": 4,
                "offered_load": 1.2, "arrival": Arrival()},
    "checkpoint": {"pattern": "write", "io_bytes": 128 * 1024, "queue_depth": 4,
                   "offered_load": 1.5, "arrival": Arrival("on_off", 500.0, 1500.0)},
    "metadata": {"pattern": "read", "io_bytes": 4096, "queue_depth": 1,
                 "offered_load": 0.02, "arrival": Arrival("poisson")},
}


# control keys of earlier versions, and why they are gone
REMOVED_CONTROL_KEYS = {
    "enforce": "every controlled run now holds senders in the kernel, at each host's gate "
               "(docs/control.md); delete the key",
    "burst_kb": "a host's gate holds horizon_ms of its rate and no more; delete the key",
}
MAX_COMMANDS = 16


# --- the checker ------------------------------------------------------------------------------


class _Checker:
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
                self.fail(_join(key, k), "a key must be a string")
            if allowed is not None and (not isinstance(k, str) or k not in allowed):
                self.fail(_join(key, k), f"unknown key (allowed: {', '.join(sorted(allowed))})")
        for k in sorted(required - set(value)):
            self.fail(_join(key, k), "is required")
        return value

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


def _join(key: str, sub) -> str:
    if isinstance(sub, int):
        return f"{key}[{sub}]"
    return f"{key}.{sub}" if key else str(sub)


# --- loading ----------------------------------------------------------------------------------

LINK_KEYS = {"rate_mbps", "mtu", "buffer_kb", "loss_percent"}
RULE_KEYS = {"roce", "dscp", "udp_dport", "udp_sport", "udp_port",
              "tcp_dport", "tcp_sport", "tcp_port"}


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    text, doc = read_yaml(path)
    return replace(parse(doc, str(path)), sha256=hashlib.sha256(text.encode()).hexdigest())


def read_yaml(path: str | Path, error: type[ScenarioError] | None = None) -> tuple[str, Any]:
    """The text of a YAML data file and its document, read within
    :mod:`labkit.model.inputs`' limits; ``error`` (a :class:`ScenarioError` class) names
    the file and what is wrong: unreadable, too large, not UTF-8, not YAML, nested too
    deep, an alias bomb, a key written twice."""
    try:
        return inputs.read_yaml(path)
    except inputs.InputError as exc:
        raise (error or ScenarioError)(exc.file, exc.key, exc.reason) from None


def is_grid(doc: Any) -> bool:
    """Whether a YAML document is a grid's: it names the scenario it varies (no key of a
    scenario is ``scenario``) and has no fabric of its own."""
    return isinstance(doc, dict) and "scenario" in doc and "fabric" not in doc


def parse(doc: Any, file: str = "<scenario>") -> Scenario:
    """Validate an already-parsed YAML document."""
    c = _Checker(file)
    if is_grid(doc):
        c.fail("scenario", f"this is a grid file, not a scenario (it varies "
                           f"{str(doc['scenario'])[:200]!r}): `labkit batch` runs it and "
                           "`labkit validate` checks every point; other commands take the "
                           "scenario file it names")
    top = c.mapping(doc, "", {"name", "description", "scale_factor", "seed", "defaults",
                              "fabric", "lanes", "traffic", "policies", "control", "kinds",
                              "emulation", "transport"},
                    {"name", "fabric", "traffic"})
    name = c.string(top["name"], "name")
    if not SCENARIO_NAME_RE.fullmatch(name):
        c.fail("name", f"{name!r} cannot name runs: use letters, digits, '-' and '_' (up to "
                       "64; it becomes part of each run's id, a directory and a bpffs pin "
                       "path, where '.' and '/' are not allowed)")
    description = c.string(top["description"], "description") if "description" in top else ""
    scale = c.number(top.get("scale_factor", 1), "scale_factor", "scale_factor")
    seed = c.integer(top.get("seed", 1), "seed", "seed")
    link_defaults = _link_defaults(c, top.get("defaults", {}))
    fabric = _fabric(c, top["fabric"], link_defaults)
    lanes_doc = top.get("lanes", {"vip": [{"roce": True}], "low": [{"tcp_port": 4420}]})
    lanes = _lanes(c, lanes_doc)
    classifier = _program(c, lanes_doc["program"], "lanes.program") \
        if isinstance(lanes_doc, dict) and "program" in lanes_doc else None
    kinds = class_files(c, top.get("kinds", {}), "kinds", BUILT_IN_KINDS)
    allreduce, job, program, storage, commands, kind_entries = _traffic(
        c, top["traffic"], fabric, dict(kinds))
    if program:
        lanes = _with_program_rule(c, lanes, program)
    control = _control(c, top.get("control", {}), "control")
    emulation = _emulation(c, top.get("emulation", {}), "emulation")
    transport = _transport(c, top.get("transport", {}), "transport", fabric)
    policies = _policies(c, top.get("policies", list(LAYOUTS)), "policies",
                         [name for name, _ in control.controllers])
    if program and emulation.rate_factor != 1:
        c.fail("emulation.rate_factor", "a program's compute time is its own, which labkit "
               "cannot scale with the links: leave the rate factor at 1")
    return Scenario(name, file, scale, seed, fabric, lanes, allreduce, storage,
                    tuple(p.name for p in policies), description, job=job, control=control,
                    commands=commands, kinds=kinds, kind_entries=kind_entries,
                    classifier=classifier, emulation=emulation, program=program,
                    transport=transport)


def _transport(c: _Checker, doc, key: str, fabric: FabricSpec) -> TransportSpec:
    c.mapping(doc, key, set(TransportSpec.__dataclass_fields__))
    tcp = doc.get("tcp", TransportSpec.tcp)
    if tcp not in TCP_CONTROLS:
        c.fail(f"{key}.tcp", f"must be one of {', '.join(TCP_CONTROLS)} (dctcp: DCTCP in "
               f"eBPF for the hosts' TCP senders; reno: the kernel's Reno), got {tcp!r}")
    hosts = doc.get("hosts")
    if hosts is not None:
        if tcp == "default":
            c.fail(f"{key}.hosts", "names the hosts whose TCP `tcp` sets: set `tcp: dctcp` or "
                   "`tcp: reno` too")
        known = {h.name for h in fabric.hosts}
        if not isinstance(hosts, list) or not hosts or not all(
                isinstance(h, str) for h in hosts):
            c.fail(f"{key}.hosts", f"must be a list of host names, got {hosts!r}")
        for i, h in enumerate(hosts):
            if h not in known:
                c.fail(f"{key}.hosts[{i}]", f"no host {h!r} in the fabric (hosts: "
                       f"{', '.join(sorted(known))})")
        hosts = tuple(hosts)
    k = doc.get("ecn_k_packets", DEFAULT_K_PACKETS if tcp == "dctcp" else None)
    if k is not None:
        k = c.integer(k, f"{key}.ecn_k_packets", "ecn_k_packets")
        if not fabric.bottlenecks:
            c.fail(f"{key}.ecn_k_packets", "marks at the bottleneck ports, and the fabric "
                   "names none: add fabric.bottlenecks")
    return TransportSpec(tcp=tcp, hosts=hosts, ecn_k_packets=k)


def _with_program_rule(c: _Checker, lanes: tuple[LaneRule, ...], program: ProgramSpec
                       ) -> tuple[LaneRule, ...]:
    """The lane rules with the program's DSCP first in the vip lane: every packet the job
    sends is marked with it (labkit.kernel.jobmark), so it is a collective's wherever rules
    apply."""
    rule = LaneRule("vip", dscp=program.dscp)
    for r in lanes:
        if r.dscp == program.dscp and r.lane != "vip":
            j = [x for x in lanes if x.lane == r.lane].index(r)
            c.fail(f"lanes.{r.lane}[{j}]", f"puts DSCP {program.dscp} in the {r.lane} lane, "
                   f"but {program.key}'s packets carry it to be a collective's: drop the rule, "
                   f"or give {program.key}.dscp another value")
    out = (rule, *(r for r in lanes if r != rule))
    if len(out) > MAX_LANE_RULES:
        c.fail("lanes", f"at most {MAX_LANE_RULES - 1} rules beside the program's DSCP rule "
                        "fit the classifier")
    return out


def _emulation(c: _Checker, doc, key: str) -> EmulationSpec:
    c.mapping(doc, key, set(EmulationSpec.__dataclass_fields__))
    gso = c.integer(doc.get("gso_packets", 1), f"{key}.gso_packets", "gso_packets")
    factor = doc.get("rate_factor", 1.0)
    if factor != AUTO:
        if LIMITS["rate_factor"].problem(factor):
            c.fail(f"{key}.rate_factor", f"must be `auto` (the rate `labkit calibrate` found) "
                   f"or a number from {MIN_RATE_FACTOR:g} to {MAX_RATE_FACTOR:g}, got "
                   f"{factor!r}")
        factor = float(factor)
    engines = doc.get("engines", "leaf")
    if engines not in ENGINES:
        c.fail(f"{key}.engines", f"must be one of {', '.join(ENGINES)} (one process per leaf's "
               f"GPU hosts, or per rank), got {engines!r}")
    return EmulationSpec(gso_packets=gso, rate_factor=factor, engines=engines)


def _control(c: _Checker, doc, key: str) -> ControlSpec:
    fields = ControlSpec.__dataclass_fields__
    for gone, why in REMOVED_CONTROL_KEYS.items():
        if isinstance(doc, dict) and gone in doc:
            c.fail(f"{key}.{gone}", f"no longer a setting: {why}")
    c.mapping(doc, key, set(fields))
    values: dict[str, Any] = {k: c.number(v, f"{key}.{k}", k) for k, v in doc.items()
                              if k not in ("dcqcn", "controllers")}
    if "controllers" in doc:
        values["controllers"] = class_files(c, doc["controllers"], f"{key}.controllers",
                                            (*CONTROLLERS, *LAYOUTS))
    if "dcqcn" in doc:
        values["dcqcn"] = c.boolean(doc["dcqcn"], f"{key}.dcqcn")
    busy, idle = (values.get(k, getattr(ControlSpec, k)) for k in ("busy_share", "idle_share"))
    if busy >= idle:
        c.fail(f"{key}.busy_share", f"must be below idle_share ({idle:g}): storage gets less "
               "while collectives run than while they leave the bottleneck idle")
    return ControlSpec(**values)


def _link_defaults(c: _Checker, defaults) -> dict:
    c.mapping(defaults, "defaults", {"link"})
    link = c.mapping(defaults.get("link", {}), "defaults.link", LINK_KEYS)
    out = {"rate_mbps": 200.0, "mtu": 9000, "buffer_kb": 1024, "loss_percent": 0.0}
    out.update(_link_props(c, link, "defaults.link"))
    return out


def _link_props(c: _Checker, d: dict, key: str, rate: str = "rate_mbps") -> dict:
    """The link keys of ``d`` checked; ``rate`` names the limit of its rate_mbps."""
    return {k: c.number(v, _join(key, k), rate if k == "rate_mbps" else k)
            for k, v in d.items() if k in LINK_KEYS}


def _fabric(c: _Checker, fab, link_defaults: dict) -> FabricSpec:
    c.mapping(fab, "fabric", {"routers", "hosts", "links", "bottlenecks", "lossless",
                              "gpus_per_host", "nvlink"},
              {"routers", "hosts", "bottlenecks"})
    routers = []
    for i, r in enumerate(c.seq(fab["routers"], "fabric.routers")):
        r = c.name(r, f"fabric.routers[{i}]")
        if r in routers:
            c.fail(f"fabric.routers[{i}]", f"router {r!r} is listed twice")
        routers.append(r)
    if not routers:
        c.fail("fabric.routers", "must name at least one router")

    hosts: list[HostSpec] = []
    router_of: dict[str, str] = {}
    c.mapping(fab["hosts"], "fabric.hosts", set(ROLES))
    for role, placement in fab["hosts"].items():
        key = f"fabric.hosts.{role}"
        if not isinstance(placement, dict):
            c.fail(key, f"must map routers to lists of hosts, got {kind_of(placement)}")
        for router, names in placement.items():
            rkey = _join(key, router)
            if router not in routers:
                c.fail(rkey, f"{router!r} is not a router (routers: {', '.join(routers)})")
            for i, h in enumerate(c.seq(names, rkey)):
                h = c.name(h, f"{rkey}[{i}]")
                if h in routers:
                    c.fail(f"{rkey}[{i}]", f"{h!r} is already a router")
                if h in router_of:
                    c.fail(f"{rkey}[{i}]", f"host {h!r} is placed twice (also at {router_of[h]})")
                router_of[h] = router
                hosts.append(HostSpec(h, role, router))
    if not hosts:
        c.fail("fabric.hosts", "must place at least one host")
    if len(hosts) > MAX_SUBNETS:
        c.fail("fabric.hosts", f"{len(hosts)} hosts; the address plan has room for "
                               f"{MAX_SUBNETS} (host i's link is 10.0.i.0/24)")

    nodes = set(routers) | set(router_of)
    overrides: dict[frozenset, dict] = {}
    router_links: list[LinkSpec] = []
    listed: dict[frozenset, int] = {}  # each link's first entry
    for i, entry in enumerate(c.seq(fab.get("links", []), "fabric.links")):
        key = f"fabric.links[{i}]"
        if isinstance(entry, list):
            ends, props = entry, {}
        else:
            c.mapping(entry, key, {"between"} | LINK_KEYS, {"between"})
            ends, props = entry["between"], _link_props(c, entry, key)
            key = f"{key}.between"
        a, b = _pair(c, ends, key, nodes)
        pair = frozenset((a, b))
        if pair in listed:
            c.fail(key, f"link {a}-{b} is listed twice (also fabric.links[{listed[pair]}]; "
                        f"[{a}, {b}] and [{b}, {a}] are one link): keep one, labkit builds no "
                        "parallel links")
        listed[pair] = i
        if a in router_of or b in router_of:
            host, other = (a, b) if a in router_of else (b, a)
            if router_of[host] != other:
                c.fail(key, f"host {host!r} is attached to {router_of[host]!r}, not {other!r}")
            overrides[pair] = props
        else:
            router_links.append(LinkSpec(a, b, **{**link_defaults, **props}))
    host_links = [
        LinkSpec(h.router, h.name, **{**link_defaults, **overrides.get(frozenset((h.router,
                                                                                   h.name)), {})})
        for h in hosts
    ]

    if len(router_links) > MAX_SUBNETS:
        c.fail("fabric.links", f"{len(router_links)} links between routers; the address plan "
                               f"has room for {MAX_SUBNETS} (link j is 10.1.j.0/24)")
    links = tuple(host_links + router_links)
    pairs = {frozenset((link.a, link.b)) for link in links}
    bottlenecks: list[tuple[str, str]] = []
    for i, ends in enumerate(c.seq(fab["bottlenecks"], "fabric.bottlenecks")):
        key = f"fabric.bottlenecks[{i}]"
        a, b = _pair(c, ends, key, nodes)
        if frozenset((a, b)) not in pairs:
            c.fail(key, f"there is no link between {a!r} and {b!r} to be a bottleneck")
        if {a, b} in map(set, bottlenecks):
            c.fail(key, f"the link between {a!r} and {b!r} is listed twice")
        bottlenecks.append((a, b))
    if not bottlenecks:
        c.fail("fabric.bottlenecks", "must name at least one link")
    if len(bottlenecks) > MAX_BOTTLENECKS:
        c.fail("fabric.bottlenecks", f"at most {MAX_BOTTLENECKS} links: the queue probe "
                                     f"watches {2 * MAX_BOTTLENECKS} ports")
    _check_connected(c, routers, router_links)
    servers, nvlinks = _servers(c, fab, hosts, set(routers) | set(router_of), link_defaults)
    ports = Counter(end for link in links for end in (link.a, link.b))
    for i, r in enumerate(routers):  # hosts have two ports at most, a switch 8
        if len(last := f"{r}-eth{ports[r] - 1}") > IFNAMSIZ:
            c.fail(f"fabric.routers[{i}]", f"{r} has {ports[r]} links, and its port {last} "
                   f"is {len(last)} characters, past Linux's {IFNAMSIZ}: shorten the name "
                   "or give it fewer links")
    spec = FabricSpec(tuple(routers), tuple(hosts), links, tuple(bottlenecks),
                      _lossless(c, fab.get("lossless", False)), servers, nvlinks)
    if spec.lossless:
        try:
            lossless.queues(topo.Topology(spec), spec.lossless, "fifo")
        except lossless.LosslessError as exc:
            c.fail("fabric.lossless", str(exc))
    return spec


NVLINK_RATIO = 10  # an NVLink's default rate, times the GPU hosts' link rate (real: ~18)


def _servers(c: _Checker, fab: dict, hosts: list[HostSpec], names: set[str],
             link_defaults: dict) -> tuple[tuple[ServerSpec, ...], tuple[LinkSpec, ...]]:
    """``fabric.gpus_per_host`` (1-8) and ``fabric.nvlink``: each router's GPU hosts, in
    scenario order, make servers of that many, each joined by a switch ``nvs<k>``."""
    n = c.integer(fab.get("gpus_per_host", 1), "fabric.gpus_per_host", "gpus_per_host")
    if n == 1:
        if "nvlink" in fab:
            c.fail("fabric.nvlink", "needs fabric.gpus_per_host of 2 or more")
        return (), ()
    props = _link_props(c, c.mapping(fab.get("nvlink", {}), "fabric.nvlink",
                                     {"rate_mbps", "mtu", "buffer_kb"}), "fabric.nvlink",
                        "nvlink.rate_mbps")
    servers: list[ServerSpec] = []
    for router in dict.fromkeys(h.router for h in hosts):
        gpus = [h.name for h in hosts if h.router == router and h.role == "gpu"]
        if len(gpus) % n:
            c.fail(f"fabric.hosts.gpu.{router}", f"{len(gpus)} GPU hosts do not make servers "
                   f"of {n} (fabric.gpus_per_host): list a multiple of {n}")
        for i in range(0, len(gpus), n):
            switch = f"nvs{len(servers) + 1}"
            if switch in names:
                c.fail("fabric.gpus_per_host", f"the servers' switches are named nvs1, "
                       f"nvs2, ...: rename the node {switch!r}")
            servers.append(ServerSpec(switch, tuple(gpus[i:i + n])))
    link = {**link_defaults, "rate_mbps": link_defaults["rate_mbps"] * NVLINK_RATIO,
            "loss_percent": 0.0, **props}
    nvlinks = tuple(LinkSpec(s.switch, g, **link) for s in servers for g in s.gpus)
    return tuple(servers), nvlinks


def server_problem(fabric: FabricSpec, ranks: tuple[str, ...]) -> str | None:
    """Why ``ranks`` cannot run the hierarchical All-Reduce on ``fabric`` (it needs
    servers, and the ranks to come whole servers at a time), or None."""
    if not fabric.servers:
        return "hierarchical needs servers: set fabric.gpus_per_host (2-8)"
    n = fabric.gpus_per_host
    of = {g: s.switch for s in fabric.servers for g in s.gpus}
    for i in range(0, len(ranks), n):
        part = ranks[i:i + n]
        if len(part) < n or {of.get(r) for r in part} != {of.get(part[0])} or None in {
                of.get(r) for r in part}:
            return (f"hierarchical needs the ranks a whole server at a time, {n} by {n} "
                    f"(fabric.gpus_per_host): {', '.join(part)} is not one server's GPUs")
    return None


def _algo_problem(algo: str, fabric: FabricSpec, ranks: tuple[str, ...]) -> str | None:
    """Why ``ranks`` cannot run the All-Reduce ``algo`` (None: they can, or labkit chooses
    it): :func:`server_problem`, then the check a run's schedules make."""
    if algo == AUTO:
        return None
    if algo == "hierarchical" and (problem := server_problem(fabric, ranks)):
        return problem
    return schedules.problem("all_reduce", algo, len(ranks), fabric.gpus_per_host)


def _lossless(c: _Checker, value) -> tuple[str, ...]:
    """``fabric.lossless``: true (the vip lane), false, or a list of lanes."""
    key = "fabric.lossless"
    if isinstance(value, bool):
        return ("vip",) if value else ()
    if not isinstance(value, list):
        c.fail(key, f"must be true (the vip lane), false, or a list of lanes "
                    f"({', '.join(LANES)}), got {kind_of(value)}")
    lanes = value
    for i, lane in enumerate(lanes):
        if lane not in LANES:
            c.fail(f"{key}[{i}]", f"must be a lane ({', '.join(LANES)}), got {lane!r}")
    if len(set(lanes)) != len(lanes):
        c.fail(key, "names a lane twice")
    return tuple(lane for lane in LANES if lane in lanes)


def _pair(c: _Checker, ends, key: str, nodes: set[str]) -> tuple[str, str]:
    if not isinstance(ends, list) or len(ends) != 2:
        c.fail(key, f"must be a pair of node names like [leaf1, spine1], got {ends!r}")
    a, b = (c.name(x, f"{key}[{i}]") for i, x in enumerate(ends))
    for i, x in enumerate((a, b)):
        if x not in nodes:
            c.fail(f"{key}[{i}]", f"{x!r} is neither a router nor a host of this fabric")
    if a == b:
        c.fail(key, f"a link needs two different nodes, got {a!r} twice")
    return a, b


def _check_connected(c: _Checker, routers: list[str], links: list[LinkSpec]) -> None:
    adj: dict[str, set[str]] = {r: set() for r in routers}
    for link in links:
        if link.a in adj and link.b in adj:
            adj[link.a].add(link.b)
            adj[link.b].add(link.a)
    reached, todo = {routers[0]}, [routers[0]]
    while todo:
        for n in adj[todo.pop()] - reached:
            reached.add(n)
            todo.append(n)
    if missing := [r for r in routers if r not in reached]:
        c.fail("fabric.links", f"routers {', '.join(missing)} are not connected to {routers[0]}")


def _lanes(c: _Checker, lanes) -> tuple[LaneRule, ...]:
    c.mapping(lanes, "lanes", {*LANES, "program"})
    rules = []
    for lane, entries in lanes.items():
        if lane == "program":
            continue
        for i, rule in enumerate(c.seq(entries, f"lanes.{lane}")):
            rules.append(_rule(c, rule, f"lanes.{lane}[{i}]", lane))
    if len(rules) > MAX_LANE_RULES:
        c.fail("lanes", f"at most {MAX_LANE_RULES} rules fit the classifier, got {len(rules)}")
    return tuple(rules)


def _program(c: _Checker, value, key: str) -> str:
    """A user's classifier: an existing ``.bpf.c`` (labkit compiles it) or ``.bpf.o``,
    relative to the scenario's directory."""
    name = c.string(value, key)
    if not name.endswith((".bpf.c", ".bpf.o")):
        c.fail(key, f"must name a .bpf.c source or a .bpf.o object, got {name!r}")
    path = (Path(c.file).parent / name).resolve()
    if not path.is_file():
        c.fail(key, f"{path} does not exist")
    return str(path)


def _rule(c: _Checker, rule, key: str, lane: str) -> LaneRule:
    c.mapping(rule, key, RULE_KEYS)
    if not rule:
        c.fail(key, "an empty rule would match every packet; name at least one field")
    fields: dict[str, Any] = {"lane": lane}
    proto = None
    for k, v in rule.items():
        kk = _join(key, k)
        if k == "roce":
            if not c.boolean(v, kk):
                c.fail(kk, "false is no condition (a rule cannot say 'not RoCE'): delete "
                           "the key, and match the packets by a field they have (dscp, "
                           "tcp_port, udp_dport, ...)")
            fields.update(roce=True, dport=ROCEV2_PORT)
            proto = _same_proto(c, kk, proto, "udp")
        elif k == "dscp":
            fields["dscp"] = c.integer(v, kk, "dscp")
        else:
            p, which = k.split("_")
            proto = _same_proto(c, kk, proto, p)
            target = which[0] + "port" if which != "port" else "port"
            fields[target] = c.integer(v, kk, "port")
    if fields.get("port") and (fields.get("sport") or fields.get("dport")):
        c.fail(key, "a rule names either a *_port (either side) or *_sport/*_dport, not both")
    fields["proto"] = proto
    return LaneRule(**fields)


def _same_proto(c: _Checker, key: str, current: str | None, new: str) -> str:
    if current not in (None, new):
        c.fail(key, f"a rule cannot match both {current} and {new}")
    return new


def _selection(c: _Checker, value, key: str, fabric: FabricSpec) -> tuple[str, ...]:
    """Hosts named by a role ("gpu") or a list of host names."""
    names = [h.name for h in fabric.hosts]
    if isinstance(value, str) and value in ROLES:
        out = tuple(h.name for h in fabric.hosts if h.role == value)
        if not out:
            c.fail(key, f"the fabric has no {value} hosts")
        return out
    items = [value] if isinstance(value, str) else c.seq(value, key)
    chosen: list[str] = []
    for i, h in enumerate(items):
        k = f"{key}[{i}]" if isinstance(value, list) else key
        if not isinstance(h, str) or h not in names:
            c.fail(k, f"{h!r} is not a host of this fabric (or a role: {', '.join(ROLES)})")
        if h in chosen:
            c.fail(k, f"host {h!r} is listed twice")
        chosen.append(h)
    if not chosen:
        c.fail(key, "must select at least one host")
    return tuple(chosen)


def _job(c: _Checker, t: dict, key: str, fabric: FabricSpec) -> JobSpec:
    kind = t.get("parallelism")
    if not isinstance(kind, str) or kind not in JOB_PARAMS:
        c.fail(f"{key}.parallelism", f"must be one of {', '.join(JOB_PARAMS)}, got {kind!r}")
    wanted = JOB_PARAMS[kind]
    optional = {"schedule"} if kind == "pipeline" else set()
    c.mapping(t, key, {"kind", "parallelism", "ranks", "iterations", *wanted, *optional},
              {"parallelism", "ranks", "iterations", *wanted})
    ranks = _selection(c, t["ranks"], f"{key}.ranks", fabric)
    if len(ranks) < 2:
        c.fail(f"{key}.ranks", "a job needs at least 2 ranks")
    params: dict[str, Any] = {}
    for name, unit in wanted.items():
        k = f"{key}.{name}"
        params[name] = (c.size(t[name], k) if unit == "size" else
                        c.number(t[name], k, "count" if unit == "count" else "compute_ms"))
    if kind == "pipeline":
        schedule = t.get("schedule", "1f1b")
        if schedule not in PIPELINE_SCHEDULES:
            c.fail(f"{key}.schedule", f"must be one of {', '.join(PIPELINE_SCHEDULES)}, "
                                      f"got {schedule!r}")
        params["schedule"] = schedule
    return JobSpec(kind, ranks, c.integer(t["iterations"], f"{key}.iterations", "iterations"),
                   tuple(sorted(params.items())))


def _storage(c: _Checker, t: dict, key: str, fabric: FabricSpec) -> StorageSpec:
    c.mapping(t, key, {"kind", "name", "mix", "pattern", "server", "clients", "offered_load",
                       "port", "queues", "io_bytes", "queue_depth", "arrival"},
              {"server", "clients"})
    mix = t.get("mix", "dataset")
    if not isinstance(mix, str) or mix not in MIXES:
        c.fail(f"{key}.mix", f"unknown mix {mix!r} (known: {', '.join(MIXES)})")
    d = MIXES[mix]
    pattern = t.get("pattern", d["pattern"])
    if pattern not in PATTERNS:
        c.fail(f"{key}.pattern", f"must be read or write, got {pattern!r}")
    (server,) = _selection(c, [t["server"]] if isinstance(t["server"], str)
                           else t["server"], f"{key}.server", fabric)
    clients = _selection(c, t["clients"], f"{key}.clients", fabric)
    if server in clients:
        c.fail(f"{key}.clients", f"the server {server!r} cannot be its own client")
    queues = c.integer(t.get("queues", 1), f"{key}.queues", "queues")
    if len(clients) * queues > MAX_STORAGE_CONNECTIONS:
        c.fail(f"{key}.queues", f"{len(clients)} clients x {queues} queues is more than "
                                f"{MAX_STORAGE_CONNECTIONS} connections; use fewer queues")
    io_bytes = c.size(t.get("io_bytes", d["io_bytes"]), f"{key}.io_bytes", "io_bytes")
    if io_bytes % 512:
        c.fail(f"{key}.io_bytes", f"must be a multiple of 512 bytes, got {io_bytes}")
    name = c.label(t.get("name", mix), f"{key}.name", "'dataset' or 'ckpt-1'")
    return StorageSpec(
        server=server, clients=clients, name=name, mix=mix, pattern=pattern,
        offered_load=c.number(t.get("offered_load", d["offered_load"]), f"{key}.offered_load",
                              "offered_load"),
        port=c.integer(t.get("port", 4420), f"{key}.port", "port"),
        queues=queues,
        io_bytes=io_bytes,
        queue_depth=c.integer(t.get("queue_depth", d["queue_depth"]), f"{key}.queue_depth",
                              "queue_depth"),
        arrival=_arrival(c, t["arrival"], f"{key}.arrival") if "arrival" in t else d["arrival"],
    )


def _arrival(c: _Checker, a, key: str) -> Arrival:
    if isinstance(a, str):
        a = {"process": a}
    c.mapping(a, key, {"process", "on_ms", "off_ms", "phase_ms"}, {"process"})
    if a["process"] not in ARRIVALS:
        c.fail(f"{key}.process", f"unknown arrival process {a['process']!r} "
                                 f"(known: {', '.join(ARRIVALS)})")
    if a["process"] != "on_off":
        extra = sorted(set(a) - {"process"})
        if extra:
            c.fail(f"{key}.{extra[0]}", f"only an on_off arrival takes {extra[0]}")
        return Arrival(a["process"])
    return Arrival("on_off", *(c.number(a.get(k, default), f"{key}.{k}", k) for k, default in
                               (("on_ms", 500), ("off_ms", 1500), ("phase_ms", 0))))


def _argv(c: _Checker, value, key: str, fabric: FabricSpec,
          templates: Sequence[str] = ()) -> tuple[str, ...]:
    """A command line (a string, split as a shell would, or a list of arguments) whose
    {host} references name hosts of the fabric, or ``templates`` (whether its program is
    installed is :func:`labkit.traffic.commands.check_installed`'s question: this
    machine's, asked before a run)."""
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            c.fail(key, f"cannot split the command line: {exc}")
    else:
        argv = [c.string(a, f"{key}[{i}]") for i, a in enumerate(c.seq(value, key))]
    if not argv:
        c.fail(key, "must name a program")
    hosts = {h.name for h in fabric.hosts}
    for arg in argv:
        if "\0" in arg:
            c.fail(key, "must not hold a NUL character")
        for ref in HOST_REF.findall(arg):
            if ref not in hosts and ref not in templates:
                also = f"; or {', '.join('{' + t + '}' for t in templates)}" if templates else ""
                c.fail(key, f"{{{ref}}} is not a host of this fabric (hosts: "
                            f"{', '.join(sorted(hosts))}{also})")
    return tuple(argv)


def _command(c: _Checker, t: dict, key: str, fabric: FabricSpec) -> CommandSpec:
    c.mapping(t, key, {"kind", "name", "host", "run", "serve"}, {"name", "host", "run"})
    name = c.label(t["name"], f"{key}.name", "'bulk' or 'loader-1'")
    host = _one_host(c, t["host"], f"{key}.host", fabric)
    run = _argv(c, t["run"], f"{key}.run", fabric)
    if "serve" not in t:
        return CommandSpec(name, host, run, key=key)
    serve = c.mapping(t["serve"], f"{key}.serve", {"host", "run"}, {"host", "run"})
    return CommandSpec(name, host, run, _one_host(c, serve["host"], f"{key}.serve.host", fabric),
                       _argv(c, serve["run"], f"{key}.serve.run", fabric), key=key)


def _program_entry(c: _Checker, t: dict, key: str, fabric: FabricSpec) -> ProgramSpec:
    c.mapping(t, key, {"kind", "name", "ranks", "run", "python", "iterations", "warmup", "env",
                       "master_port", "dscp", "quiet_ms", "duration_s", "imports", "launcher",
                       "timing"},
              {"ranks", "run"})
    name = c.label(t.get("name", "program"), f"{key}.name", "'ddp' or 'train-1'")
    ranks = _selection(c, t["ranks"], f"{key}.ranks", fabric)
    if len(ranks) < 2:
        c.fail(f"{key}.ranks", "a program's collectives need at least 2 ranks")
    if clash := sorted({h.name for h in fabric.hosts} & set(RANK_TEMPLATES)):
        c.fail(f"{key}.run", f"host {clash[0]!r} has the name of a template of a program's "
                             f"run ({{{clash[0]}}}): rename the host")
    run = _argv(c, t["run"], f"{key}.run", fabric, RANK_TEMPLATES)
    launcher = t.get("launcher", "labkit")
    if launcher not in LAUNCHERS:
        c.fail(f"{key}.launcher", f"must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if launcher == "mpirun":
        if per_rank := sorted({r for arg in run for r in HOST_REF.findall(arg)}
                              & set(PER_RANK_TEMPLATES)):
            c.fail(f"{key}.run", f"{{{per_rank[0]}}} differs from rank to rank, and mpirun "
                                 "starts every rank with one command line: read the rank "
                                 "from MPI (COMM_WORLD, or OMPI_COMM_WORLD_RANK)")
    timing = t.get("timing", "auto")
    if timing not in TIMINGS:
        c.fail(f"{key}.timing", f"must be one of {', '.join(TIMINGS)}, got {timing!r}")
    python = c.string(t.get("python", DEFAULT_PYTHON), f"{key}.python")
    if "/" in python and not python.startswith("/"):  # relative: to the scenario's directory
        python = str((Path(c.file).parent / python).resolve())
    env = c.mapping(t.get("env", {}), f"{key}.env", None)
    for k, v in env.items():
        if not ENV_RE.fullmatch(k):
            c.fail(f"{key}.env.{k}", "is not an environment variable's name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            c.fail(f"{key}.env.{k}", f"must be a string or a number, got {kind_of(v)}")
    imports = [c.string(m, f"{key}.imports[{j}]")
               for j, m in enumerate(c.seq(t.get("imports", []), f"{key}.imports"))]
    for j, m in enumerate(imports):
        if not MODULE_RE.fullmatch(m):
            c.fail(f"{key}.imports[{j}]", f"{m!r} is not a Python module name")
    duration = (c.number(t["duration_s"], f"{key}.duration_s", "duration_s")
                if t.get("duration_s") is not None else None)
    iterations = (c.integer(t["iterations"], f"{key}.iterations", "iterations")
                  if "iterations" in t else None)
    warmup = c.integer(t.get("warmup", 1), f"{key}.warmup", "warmup")
    if iterations is not None and warmup >= iterations:
        c.fail(f"{key}.warmup", f"leaves no iteration to measure: must be below iterations "
                                f"({iterations}), got {warmup}")
    quiet = c.number(t.get("quiet_ms", 10.0), f"{key}.quiet_ms", "quiet_ms")
    return ProgramSpec(
        name=name, ranks=ranks, run=run, cwd=str(Path(c.file).parent.resolve()),
        python=python, iterations=iterations, warmup=warmup,
        env=tuple(sorted((k, str(v)) for k, v in env.items())),
        master_port=c.integer(t.get("master_port", 29500), f"{key}.master_port", "master_port"),
        dscp=c.integer(t.get("dscp", JOB_DSCP), f"{key}.dscp", "program.dscp"),
        quiet_ms=quiet, duration_s=duration, imports=tuple(imports), launcher=launcher,
        timing=timing, key=key)


def _one_host(c: _Checker, value, key: str, fabric: FabricSpec) -> str:
    hosts = _selection(c, value, key, fabric)
    if len(hosts) != 1:
        c.fail(key, f"must name one host, got {len(hosts)} ({', '.join(hosts)}); "
                    "write one entry per host")
    return hosts[0]


def _add_named(c: _Checker, entries: list, entry, key: str, most: int) -> None:
    """Append a storage or command entry: names unique within its kind, at most ``most``."""
    if entry.name in {e.name for e in entries}:
        c.fail(f"{key}.name", f"another {entry.kind} entry is already named {entry.name!r}; "
                              "give this one a name of its own")
    if len(entries) == most:
        c.fail(key, f"at most {most} {entry.kind} entries per scenario")
    entries.append(entry)


WORKLOADS = ("allreduce", "job", "program")  # the kinds that are a collective workload


def _traffic(c: _Checker, traffic, fabric: FabricSpec, kinds: dict[str, str]):
    allreduce: AllReduceSpec | None = None
    job: JobSpec | None = None
    program: ProgramSpec | None = None
    storage: list[StorageSpec] = []
    commands: list[CommandSpec] = []
    kind_entries: list[KindEntry] = []
    known = ", ".join((*BUILT_IN_KINDS, *kinds))
    for i, t in enumerate(c.seq(traffic, "traffic")):
        key = f"traffic[{i}]"
        if not isinstance(t, dict) or "kind" not in t:
            c.fail(key, f"must be a mapping with a kind ({known})")
        if not isinstance(t["kind"], str):
            c.fail(f"{key}.kind", f"must be one of {known}, got {kind_of(t['kind'])}")
        if t["kind"] in WORKLOADS and (allreduce or job or program):
            c.fail(key, "only one collective workload per scenario (an allreduce, a job or "
                        "a program)")
        if t["kind"] == "program":
            program = _program_entry(c, t, key, fabric)
        elif t["kind"] == "job":
            job = _job(c, t, key, fabric)
        elif t["kind"] == "allreduce":
            c.mapping(t, key, {"kind", "algo", "ranks", "size_bytes", "iterations", "compute_ms"},
                      {"ranks", "size_bytes", "iterations"})
            algos = (*ALLREDUCE_ALGOS, AUTO)  # chosen by labkit.model.autotune's model
            if t.get("algo", "ring") not in algos:
                c.fail(f"{key}.algo", f"unknown algorithm {t['algo']!r} "
                                      f"(known: {', '.join(algos)})")
            ranks = _selection(c, t["ranks"], f"{key}.ranks", fabric)
            if len(ranks) < 2:
                c.fail(f"{key}.ranks", "an all-reduce needs at least 2 ranks")
            if problem := _algo_problem(t.get("algo", "ring"), fabric, ranks):
                c.fail(f"{key}.algo", problem)
            allreduce = AllReduceSpec(
                ranks=ranks,
                size_bytes=c.size(t["size_bytes"], f"{key}.size_bytes"),
                iterations=c.integer(t["iterations"], f"{key}.iterations", "iterations"),
                compute_ms=c.number(t.get("compute_ms", 0), f"{key}.compute_ms", "compute_ms"),
                algo=t.get("algo", "ring"),
            )
        elif t["kind"] == "storage":
            _add_named(c, storage, _storage(c, t, key, fabric), key, MAX_STORAGE_ENTRIES)
        elif t["kind"] == "command":
            _add_named(c, commands, _command(c, t, key, fabric), key, MAX_COMMANDS)
        elif t["kind"] in kinds:  # its class checks it when a run loads it
            kind_entries.append(KindEntry(key, t["kind"],
                                          {k: v for k, v in t.items() if k != "kind"}))
        else:
            c.fail(f"{key}.kind", f"unknown traffic kind {t['kind']!r} (known: {known})")
    if allreduce is None and job is None and program is None:
        c.fail("traffic", "needs a collective workload (kind: allreduce, job or program)")
    return allreduce, job, program, tuple(storage), tuple(commands), tuple(kind_entries)


def with_user_kinds(sc: Scenario) -> tuple[Scenario, dict[str, type]]:
    """``sc`` with the entries of its own traffic kinds expanded into command entries, and
    the kinds' classes. This imports the kinds' files (user code, run as whoever runs
    labkit): a run calls it when it starts, parsing never does."""
    from labkit.model.extend import TrafficKind, load_class

    c = _Checker(sc.path)
    classes = {}
    for name, spec in sc.kinds:
        try:
            classes[name] = load_class(spec, TrafficKind, "expand")
        except ValueError as exc:
            c.fail(f"kinds.{name}", str(exc))
    commands = list(sc.commands)
    for e in sc.kind_entries:
        for j, entry in enumerate(_expand(c, e, classes[e.kind](), sc.fabric)):
            at = f"{e.key}.expanded[{j}]"
            _add_named(c, commands, _command(c, {**entry, "kind": "command"}, at, sc.fabric),
                       at, MAX_COMMANDS)
    return replace(sc, commands=tuple(commands), kind_entries=()), classes


def user_files(sc: Scenario, kinds: bool = True) -> list[str]:
    """What a run of ``sc`` loads of the user's own (traffic kinds unless ``kinds`` is
    False, controllers, the classifier), one line each, for the run to say before it
    loads them."""
    lines = [f"traffic kind {name}: {spec}" for name, spec in sc.kinds] if kinds else []
    lines += [f"controller {name}: {spec}" for name, spec in sc.control.controllers]
    return lines + ([f"classifier: {sc.classifier}"] if sc.classifier else [])


def _expand(c: _Checker, e: KindEntry, kind, fabric: FabricSpec) -> list[dict]:
    """The command entries a user's traffic kind makes of entry ``e``."""
    c.mapping({"kind": e.kind, **e.entry}, e.key, {"kind", *kind.keys}, set(kind.required))
    hosts = {role: tuple(h.name for h in fabric.hosts if h.role == role) for role in ROLES}
    try:
        entries = kind.expand(dict(e.entry), hosts)
    except Exception as exc:  # the user's code: say where it failed and why
        c.fail(e.key, f"{type(kind).__name__}.expand failed: {type(exc).__name__}: {exc}")
    if not isinstance(entries, list) or not all(isinstance(x, dict) for x in entries):
        c.fail(e.key, f"{type(kind).__name__}.expand must return a list of command entries "
                    f"(dicts), got {kind_of(entries)}")
    if not entries:
        c.fail(e.key, f"{type(kind).__name__}.expand made no command of this entry")
    return entries


def class_files(c: _Checker, doc, key: str, built_in: Sequence[str] = ()
                ) -> tuple[tuple[str, str], ...]:
    """``{name: "file.py:Class"}`` checked: a new label (none of ``built_in``), an
    existing Python file (relative to the scenario's directory) and a class name.
    Nothing is imported here: a run loads them when it starts."""
    base = Path(c.file).parent
    out = []
    for name, where in c.mapping(doc, key, None).items():
        at = f"{key}.{name}"
        if problem := name_problem(name, built_in):
            c.fail(at, problem)
        path, _, cls = c.string(where, at).rpartition(":")
        if not path.endswith(".py") or not cls.isidentifier():
            c.fail(at, f"must be 'file.py:ClassName', got {where!r}")
        file = (base / path).resolve()
        if not file.is_file():
            c.fail(at, f"{file} does not exist")
        out.append((name, f"{file}:{cls}"))
    return tuple(out)


def name_problem(name: str, built_in: Sequence[str] = (*CONTROLLERS, *LAYOUTS)
                 ) -> str | None:
    """What is wrong with ``name`` as the name of a user's controller or traffic kind
    (None: nothing)."""
    if not LABEL_RE.fullmatch(name):
        return "a name here is a label: lowercase letters, digits, - and _"
    if name in built_in:
        return f"{name!r} is built in: choose another name"
    return None


def _policies(c: _Checker, policies, key: str, controllers: Sequence[str] = ()
              ) -> tuple[Policy, ...]:
    out: list[Policy] = []
    for i, p in enumerate(c.seq(policies, key)):
        try:
            pol = policy(p if isinstance(p, str) else repr(p), controllers)
        except ValueError as exc:
            c.fail(f"{key}[{i}]", str(exc))
        if pol not in out:
            out.append(pol)
    if not out:
        c.fail(key, "must name at least one policy")
    return tuple(out)


def parse_size(text: str, what: str) -> int:
    """A size given on the command line (``64K``, ``8M``, ``4MiB``, ``65536``)."""
    return _Checker("command line").size(int(text) if text.isdigit() else text, what)


def check_policies(names: list[str], file: str, controllers: Sequence[str] = ()
                   ) -> tuple[Policy, ...]:
    """The policies ``names`` asks for beside a scenario file (``--policy``), each once,
    where ``controllers`` names the controllers besides the built-in ones; ScenarioError
    says what is wrong with one."""
    return _policies(_Checker(file), list(names), "policies", controllers)
