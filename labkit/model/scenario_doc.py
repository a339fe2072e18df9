"""A scenario file's shape, declared once: every section's keys (:class:`~.shapes.Keys`),
each key's type, every number's range (:data:`LIMITS`), every name's pattern and the
choices a key takes.

Both readers of a scenario file are made from it: :mod:`labkit.model.scenario`'s checker
takes each section's keys, limits and choices from here, and :mod:`labkit.model.schema`
renders it as the file's JSON Schema (:data:`SCENARIO`). What a declaration cannot say
(references between keys, the address plan, combinations) stays code of the checker's.
Pure: nothing here touches anything.
"""

from __future__ import annotations

import re
from typing import Any

from labkit.model.abi import LANES, MAX_RULES
from labkit.model.scenario_spec import (
    AUTO,
    ENGINES,
    JOB_LAYOUTS,
    LAUNCHERS,
    LAYOUTS,
    POLICIES,
    TCP_CONTROLS,
    TIMINGS,
    Arrival,
    ControlSpec,
)
from labkit.model.shapes import (
    FLAG,
    NULL,
    AnyOf,
    Choice,
    Const,
    Described,
    Keys,
    Limit,
    MapOf,
    Num,
    Pattern,
    Shape,
    Size,
    Tagged,
    Text,
    Type,
    list_of,
)

ROLES = ("gpu", "storage")
ROUTING = ("static", "bgp")  # fabric.routing: labkit's routes, or FRR's BGP (labkit.kernel.frr)
# names, each matched whole (fullmatch: `$` would let a final newline through)
SCENARIO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,8}")  # a node: "<node>-eth<k>" within IFNAMSIZ
LABEL_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # names that only label data
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # an environment variable's name
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KkMmGg]?)([iI]?[bB]?)\s*")
CLASS_FILE_RE = r".+\.py:[A-Za-z_][A-Za-z0-9_]*"  # a user's class: "file.py:Class"
MAX_LANE_RULES = MAX_RULES  # the classifier's table (LK_MAX_RULES)
MAX_BOTTLENECKS = 8  # two watched ports each, of LK_MAX_PORTS (16)
MAX_MESSAGE_BYTES = 2**32 - 1  # the hot path's largest RoCE message (RETH's DMA length)
ALLREDUCE_ALGOS = ("ring", "tree", "halving_doubling", "hierarchical")  # model.traffic.schedules
BUILT_IN_KINDS = ("allreduce", "job", "program", "storage", "command")
WORKLOADS = ("allreduce", "job", "program")  # the kinds that are a collective workload
MIN_RATE_FACTOR, MAX_RATE_FACTOR = 1 / 16, 16.0

# Every number of a scenario and its range, by the key that holds it: the checker's and
# the JSON Schema's. Beyond them, a value fails later, in the kernel or an agent, or
# makes no sense.
LIMITS = {
    "scale_factor": Limit(0, 1_000_000, above=True, why="real Mbit/s per emulated Mbit/s"),
    "seed": Limit(0, 2**31 - 1, integer=True),
    "rate_mbps": Limit(1, 10_000, why="Mbit/s, before rate_factor's x1/16 to x16"),
    "nvlink.rate_mbps": Limit(1, 100_000),
    "mtu": Limit(1280, 9000, integer=True),
    "buffer_kb": Limit(16, 1 << 20, integer=True),
    "loss_percent": Limit(0, 50),
    "delay_ms": Limit(0, 100, why="ms each way, after the link's shaper"),
    "at_s": Limit(0, 3600, why="seconds after a policy's traffic starts"),
    "for_s": Limit(0.001, 3600),
    "slow": Limit(1, 100, why="times its compute: a straggler computes longer"),
    "every_s": Limit(0.01, 3600, why="seconds; a link changes at most every 10 ms"),
    "jitter_ms": Limit(0, 100),
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
    "job.dscp": Limit(1, 63, integer=True, why="0 is every unmarked packet's"),
    "warmup": Limit(0, 1000, integer=True),
    "master_port": Limit(1024, 65535, integer=True),
    "quiet_ms": Limit(0.1, 1000),
    "duration_s": Limit(0, 3600, above=True),
    "stall_s": Limit(1, 3600, why="seconds without a report from rank 0 before it is stuck"),
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

# per parallelism: required sizes / counts / times (a pipeline also takes a schedule)
JOB_PARAMS = {
    "data": {"gradient_bytes": "size", "buckets": "count", "compute_ms": "ms"},
    "tensor": {"layers": "count", "activation_bytes": "size", "layer_compute_ms": "ms"},
    "pipeline": {"microbatches": "count", "activation_bytes": "size", "stage_compute_ms": "ms"},
    "expert": {"layers": "count", "tokens_bytes": "size", "layer_compute_ms": "ms"},
}
PIPELINE_SCHEDULES = ("1f1b", "gpipe")
ARRIVALS = ("constant", "on_off", "poisson")
PATTERNS = ("read", "write")  # a storage entry's: server -> clients, clients -> server

# what each storage mix means when the scenario does not say otherwise
MIXES: dict[str, dict[str, Any]] = {
    "dataset": {"pattern": "read", "io_bytes": 128 * 1024, "queue_depth": 4,
                "offered_load": 1.2, "arrival": Arrival()},
    "checkpoint": {"pattern": "write", "io_bytes": 128 * 1024, "queue_depth": 4,
                   "offered_load": 1.5, "arrival": Arrival("on_off", 500.0, 1500.0)},
    "metadata": {"pattern": "read", "io_bytes": 4096, "queue_depth": 1,
                 "offered_load": 0.02, "arrival": Arrival("poisson")},
}


# --- the declaration ----------------------------------------------------------------------


def num(limit: str) -> Num:
    """A number within ``LIMITS[limit]``."""
    return Num(limit, LIMITS[limit])


def size(limit: str = "size_bytes", multiple_of: int | None = None) -> Size:
    """A whole number of bytes within ``LIMITS[limit]``, or a size with a unit (whose
    range only the checker knows)."""
    return Size(num(limit), Pattern(SIZE_RE), multiple_of)


def _link(keys: tuple[str, ...], rate: str) -> dict[str, Shape]:
    """A link's properties (``rate``: the limit of its rate_mbps)."""
    return {k: num(rate if k == "rate_mbps" else k) for k in keys}


NAME = Pattern(NAME_RE)
LABEL = Pattern(LABEL_RE)
PAIR = list_of(NAME, minItems=2, maxItems=2)
SELECTION = AnyOf((Choice(ROLES), NAME, list_of(NAME, minItems=1, uniqueItems=True)))
ARGV = AnyOf((Text(), list_of(Type("string"), minItems=1)))
CLASS_FILES = MapOf(LABEL, Pattern(CLASS_FILE_RE))  # {name: file.py:Class}
KIND = Type("string")  # a traffic entry's kind, which says which of TRAFFIC's it is

LINK = Keys(_link(("buffer_kb", "delay_ms", "jitter_ms", "loss_percent", "mtu", "rate_mbps"),
                  "rate_mbps"))
NVLINK = Keys(_link(("buffer_kb", "mtu", "rate_mbps"), "nvlink.rate_mbps"))
DEFAULTS = Keys({"link": LINK})
LINK_ENTRY = Keys({"between": PAIR, **LINK.props}, {"between"})
FABRIC_HOSTS = Keys({role: MapOf(NAME, list_of(NAME)) for role in ROLES})
FABRIC = Keys({
    "routers": list_of(NAME, minItems=1, uniqueItems=True),
    "hosts": FABRIC_HOSTS,
    "links": list_of(AnyOf((PAIR, LINK_ENTRY))),
    "bottlenecks": list_of(PAIR, minItems=1, maxItems=MAX_BOTTLENECKS),
    "lossless": AnyOf((FLAG, list_of(Choice(LANES), uniqueItems=True))),
    "gpus_per_host": num("gpus_per_host"),
    "nvlink": NVLINK,
    "routing": Choice(ROUTING),
}, {"routers", "hosts", "bottlenecks"})

# a lane rule: roce (true only: false is no condition), dscp, <proto>_<side>port, or a
# job's packets by its name (its DSCP)
RULE = Keys({**{k: Const(True) if k == "roce" else num("dscp" if k == "dscp" else "port")
                for k in ("dscp", "roce", "tcp_dport", "tcp_port", "tcp_sport", "udp_dport",
                          "udp_port", "udp_sport")}, "job": LABEL},
            extra=(("minProperties", 1),))
LANE_RULES = Keys({**dict.fromkeys(LANES, list_of(RULE, maxItems=MAX_LANE_RULES)),
                   "program": Pattern(r".+\.bpf\.[co]")})

_JOB = {"kind": KIND, "name": LABEL, "dscp": num("job.dscp")}  # every job's keys
ALLREDUCE = Keys({**_JOB, "algo": Choice((*ALLREDUCE_ALGOS, AUTO)),
                  "ranks": SELECTION, "size_bytes": size(), "iterations": num("iterations"),
                  "compute_ms": num("compute_ms")}, {"ranks", "size_bytes", "iterations"})
_UNITS = {"size": size(), "count": num("count"), "ms": num("compute_ms")}
JOBS = {p: Keys({**_JOB, "parallelism": Const(p), "ranks": SELECTION,
                 "iterations": num("iterations"),
                 **{k: _UNITS[unit] for k, unit in params.items()},
                 **({"schedule": Choice(PIPELINE_SCHEDULES)} if p == "pipeline" else {})},
                {"parallelism", "ranks", "iterations", *params})
        for p, params in JOB_PARAMS.items()}
ON_OFF = Keys({"process": Const("on_off"), **{k: num(k) for k in ("on_ms", "off_ms",
                                                                  "phase_ms")}}, {"process"})
ARRIVAL = AnyOf((Choice(ARRIVALS), ON_OFF,
                 Keys({"process": Choice(tuple(p for p in ARRIVALS if p != "on_off"))},
                      {"process"})))
STORAGE = Keys({
    "kind": KIND, "name": LABEL, "mix": Choice(tuple(MIXES)), "pattern": Choice(PATTERNS),
    "server": AnyOf((NAME, list_of(NAME, minItems=1, maxItems=1))),
    "clients": SELECTION, "offered_load": num("offered_load"), "port": num("port"),
    "queues": num("queues"), "io_bytes": size("io_bytes", multiple_of=512),
    "queue_depth": num("queue_depth"), "arrival": ARRIVAL,
}, {"server", "clients"})
SERVE = Keys({"host": SELECTION, "run": ARGV}, {"host", "run"})
COMMAND = Keys({"kind": KIND, "name": LABEL, "host": SELECTION, "run": ARGV, "serve": SERVE},
               {"name", "host", "run"})
PROGRAM = Keys({
    "kind": KIND, "name": LABEL, "ranks": SELECTION, "run": ARGV, "python": Text(),
    "iterations": num("iterations"), "warmup": num("warmup"),
    "env": MapOf(Pattern(ENV_RE), Type(("string", "number"))),
    "master_port": num("master_port"), "dscp": num("program.dscp"),
    "quiet_ms": num("quiet_ms"), "duration_s": AnyOf((num("duration_s"), NULL)),
    "imports": list_of(Pattern(MODULE_RE)), "launcher": Choice(LAUNCHERS),
    "timing": Choice(TIMINGS), "stall_s": num("stall_s"),
}, {"ranks", "run"})
# a traffic entry: a built-in kind's keys, or any keys for the scenario's own kinds
ENTRY = Tagged("kind", {"allreduce": ALLREDUCE, "job": AnyOf(tuple(JOBS.values()), one=True),
                        "storage": STORAGE, "command": COMMAND, "program": PROGRAM},
               BUILT_IN_KINDS, LABEL)

CONTROL = Keys({**{k: num(k) for k in ControlSpec.__dataclass_fields__
                   if k not in ("dcqcn", "controllers")},
                "dcqcn": FLAG, "controllers": CLASS_FILES})
TRANSPORT = Keys({"tcp": Choice(TCP_CONTROLS),
                  "hosts": list_of(Type("string"), first=True, minItems=1),
                  "ecn_k_packets": num("ecn_k_packets")})
EMULATION = Keys({"gso_packets": num("gso_packets"),
                  "rate_factor": AnyOf((num("rate_factor"), Const(AUTO))),
                  "engines": Choice(ENGINES)})
_LAYOUTS = "|".join(x for x in (*LAYOUTS, *JOB_LAYOUTS)  # <layout>+<controller>
                    if x not in ("isolated", "together"))
POLICY = AnyOf((Choice(POLICIES), Pattern(rf"(?:(?:{_LAYOUTS})\+)?{LABEL_RE.pattern}")))

# a fault on the timeline: when, which link, what (down, rate_mbps, loss_percent, delay_ms)
EVENT = Keys({"at_s": num("at_s"), "link": PAIR, "host": NAME, "down": Const(True),
              "rate_mbps": num("rate_mbps"), "loss_percent": num("loss_percent"),
              "delay_ms": num("delay_ms"), "slow": num("slow"),
              "for_s": num("for_s"), "every_s": num("every_s")}, {"at_s"})

SCENARIO = Keys({
    "name": Pattern(SCENARIO_NAME_RE),
    "description": Text(),
    "scale_factor": num("scale_factor"),
    "seed": num("seed"),
    "defaults": DEFAULTS,
    "fabric": FABRIC,
    "lanes": LANE_RULES,
    "traffic": list_of(ENTRY),
    "policies": list_of(POLICY, first=True, minItems=1),
    "control": CONTROL,
    "kinds": CLASS_FILES,
    "transport": TRANSPORT,
    "emulation": EMULATION,
    "events": list_of(EVENT),
}, {"name", "fabric", "traffic"})
FILE = Described("labkit scenario", "A labkit scenario file (docs/scenarios.md)", SCENARIO)
