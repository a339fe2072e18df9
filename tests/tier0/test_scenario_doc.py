"""The scenario file's one declaration (labkit.model.scenario_doc) against its two readers:
the checker (labkit.model.scenario.parse) and the JSON Schema (labkit.model.schema). Every
declared key is accepted by both, an undeclared key is refused by both wherever keys are
declared, and every number's limits are the same for both: the lowest and highest
values pass the schema and no range check of the checker, the values just past them fail
both at that key."""

import copy
from pathlib import Path

import jsonschema
import pytest

from labkit.model import scenario, scenario_doc, schema
from labkit.model.scenario import ScenarioError
from labkit.model.shapes import AnyOf, Keys, ListOf, MapOf, Num, Shape, Size, Tagged

REPO = Path(__file__).resolve().parents[2]
FILE = str(REPO / "docs/examples/scenario.yaml")  # relative paths: docs/examples' files
VALIDATOR = jsonschema.Draft7Validator(schema.scenario_schema())
CLASS = str(REPO / "docs/examples/traffic.py") + ":Mine"


def _base(workload: dict, **top) -> dict:
    """A scenario that sets every key the declaration has besides the workload's."""
    doc = {
        "name": "every-key", "description": "every key", "scale_factor": 800, "seed": 3,
        "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 2048,
                              "loss_percent": 0, "delay_ms": 0, "jitter_ms": 0}},
        "fabric": {
            "routers": ["leaf1", "leaf2", "spine1"],
            "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]},
                      "storage": {"leaf2": ["st1"]}},
            "links": [["leaf1", "spine1"],
                      {"between": ["leaf2", "spine1"], "rate_mbps": 200, "mtu": 9000,
                       "buffer_kb": 2048, "loss_percent": 0.5, "delay_ms": 2,
                       "jitter_ms": 1}],
            "bottlenecks": [["leaf1", "spine1"]],
            "lossless": ["vip"], "gpus_per_host": 2,
            "nvlink": {"rate_mbps": 1000, "mtu": 9000, "buffer_kb": 1024},
        },
        "lanes": {"vip": [{"roce": True}, {"dscp": 30}, {"udp_dport": 4792, "udp_sport": 5}],
                  "normal": [{"udp_port": 9}, {"tcp_dport": 80, "tcp_sport": 81}],
                  "low": [{"tcp_port": 4420}], "program": "classifier.bpf.c"},
        "traffic": [
            workload,
            {"kind": "storage", "name": "ckpt", "mix": "checkpoint", "pattern": "write",
             "server": "st1", "clients": ["g1", "g2"], "offered_load": 1.2, "port": 4421,
             "queues": 2, "io_bytes": "64K", "queue_depth": 4,
             "arrival": {"process": "on_off", "on_ms": 100, "off_ms": 200, "phase_ms": 5}},
            {"kind": "storage", "server": ["st1"], "clients": "gpu",
             "arrival": {"process": "poisson"}},
            {"kind": "storage", "name": "meta", "server": "st1", "clients": "g3",
             "arrival": "constant"},
            {"kind": "command", "name": "bulk", "host": "g1", "run": "iperf3 -c {st1}",
             "serve": {"host": "st1", "run": ["iperf3", "-s"]}},
            {"kind": "mine", "anything": 1},
        ],
        "policies": ["isolated", "fifo", "priority+reactive", "mine"],
        "control": {"target_us": 800, "interval_ms": 10, "telemetry_delay_ms": 5,
                    "relay_delay_ms": 2, "lead_ms": 5, "busy_share": 0.01, "idle_share": 0.9,
                    "ce_us": 500, "horizon_ms": 50, "fabric_ce_us": 1000, "dcqcn": True,
                    "controllers": {"mine": CLASS}},
        "kinds": {"mine": CLASS},
        "transport": {"tcp": "dctcp", "hosts": ["g1", "st1"], "ecn_k_packets": 20},
        "emulation": {"gso_packets": 1, "rate_factor": 1, "engines": "rank"},
        "events": [{"at_s": 1, "link": ["leaf1", "spine1"], "down": True, "for_s": 0.2,
                    "every_s": 1},
                   {"at_s": 2, "link": ["leaf2", "spine1"], "rate_mbps": 50},
                   {"at_s": 3, "link": ["leaf2", "spine1"], "loss_percent": 5},
                   {"at_s": 4, "link": ["leaf2", "spine1"], "delay_ms": 3, "for_s": 1}],
    }
    return {**doc, **top}


PROGRAM = {"kind": "program", "name": "ddp", "ranks": "gpu", "run": "{python} train.py",
           "python": "/usr/bin/python3", "iterations": 10, "warmup": 2,
           "env": {"OMP_NUM_THREADS": 1, "X": "y"}, "master_port": 29500, "dscp": 26,
           "quiet_ms": 10, "duration_s": 60, "imports": ["json", "os.path"],
           "launcher": "labkit", "timing": "auto", "stall_s": 30}
JOBS = {"data": {"gradient_bytes": "1MiB", "buckets": 2, "compute_ms": 5},
        "tensor": {"layers": 2, "activation_bytes": "256K", "layer_compute_ms": 1},
        "pipeline": {"microbatches": 4, "activation_bytes": "64K", "stage_compute_ms": 1,
                     "schedule": "gpipe"},
        "expert": {"layers": 2, "tokens_bytes": 65536, "layer_compute_ms": 1}}


def _two_jobs() -> dict:
    """Two of labkit's jobs, each with its name and DSCP, one of them in a lane by name."""
    doc = _base({"kind": "allreduce", "name": "big", "dscp": 40, "algo": "ring",
                 "ranks": ["g1", "g3"], "size_bytes": "1MiB", "iterations": 10})
    doc["traffic"].insert(1, {"kind": "job", "name": "small", "dscp": 42, "parallelism": "data",
                              "ranks": ["g2", "g4"], "iterations": 5, **JOBS["data"]})
    doc["lanes"]["normal"].append({"job": "small"})
    doc["policies"] = ["isolated", "together", "fair", "job-priority", "fair+reactive"]
    doc["fabric"]["routing"] = "bgp"
    return doc


def _straggler(doc: dict) -> dict:
    """``doc`` with one of its labkit ranks' hosts slowed (a host's event)."""
    return {**doc, "events": [*doc["events"], {"at_s": 5, "host": "g1", "slow": 2}]}


DOCS = {
    "two-jobs": _two_jobs(),
    "allreduce": _straggler(_base({"kind": "allreduce", "algo": "ring", "ranks": "gpu",
                                   "size_bytes": "1MiB", "iterations": 10, "compute_ms": 1})),
    "program": _base(PROGRAM),
    **{f"job-{p}": _base({"kind": "job", "name": p, "dscp": 12, "parallelism": p,
                          "ranks": ["g1", "g2", "g3", "g4"], "iterations": 5, **params})
       for p, params in JOBS.items()},
}


def walk(shape: Shape, value, path: tuple = ()):
    """(path, shape, value) of ``value`` and everything in it, each with the shape the
    declaration gives it (an AnyOf's arm: the one the schema accepts the value by)."""
    yield path, shape, value
    if isinstance(shape, AnyOf):
        arms = [a for a in shape.arms
                if jsonschema.Draft7Validator(a.schema()).is_valid(value)]
        yield from walk(arms[0], value, path)
    elif isinstance(shape, Tagged) and value["kind"] in shape.kinds:
        yield from walk(shape.kinds[value["kind"]], value, path)
    elif isinstance(shape, Keys):
        for k, v in value.items():
            yield from walk(shape.props[k], v, (*path, k))
    elif isinstance(shape, MapOf):
        for k, v in value.items():
            yield from walk(shape.value, v, (*path, k))
    elif isinstance(shape, ListOf):
        for i, v in enumerate(value):
            yield from walk(shape.item, v, (*path, i))


def declared(shape: Shape, seen: set | None = None):
    """Every (Keys, key) the declaration holds below ``shape``."""
    seen = set() if seen is None else seen
    if id(shape) in seen:
        return
    seen.add(id(shape))
    if isinstance(shape, Keys):
        for k, v in shape.props.items():
            yield shape, k
            yield from declared(v, seen)
    for inner in (getattr(shape, a, None) for a in ("item", "value", "names", "num")):
        if isinstance(inner, Shape):
            yield from declared(inner, seen)
    for inner in (*getattr(shape, "arms", ()), *getattr(shape, "kinds", {}).values()):
        yield from declared(inner, seen)


def place(doc: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(doc)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


def refusal(doc: dict) -> ScenarioError | None:
    try:
        scenario.parse(doc, FILE)
    except ScenarioError as exc:
        return exc
    return None


def _key(path: tuple) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_document_fits_both(name):
    assert VALIDATOR.is_valid(DOCS[name]), list(VALIDATOR.iter_errors(DOCS[name]))[:1]
    assert refusal(DOCS[name]) is None


def test_the_documents_hold_every_declared_key():
    used = {(id(shape), k) for doc in DOCS.values()
            for path, shape, value in walk(scenario_doc.SCENARIO, doc)
            if isinstance(shape, Keys) for k in value}
    missing = {k for shape, k in declared(scenario_doc.SCENARIO) if (id(shape), k) not in used}
    assert not missing


@pytest.mark.parametrize("name", sorted(DOCS))
def test_an_undeclared_key_is_refused_by_both_wherever_keys_are_declared(name):
    doc = DOCS[name]
    for path, shape, value in walk(scenario_doc.SCENARIO, doc):
        if not isinstance(shape, Keys):
            continue
        bad = place(doc, path, {**value, "not_a_key": 1}) if path else {**doc, "not_a_key": 1}
        assert not VALIDATOR.is_valid(bad), path
        exc = refusal(bad)
        assert exc and exc.key == _key((*path, "not_a_key")), (path, exc)
        assert exc.reason.startswith("unknown key (allowed: "), exc
        allowed = set(exc.reason.removeprefix("unknown key (allowed: ")[:-1].split(", "))
        assert shape.keys <= allowed, exc  # more: an arrival's, which says which takes them
        for k in shape.required:
            short = place(doc, path, {x: v for x, v in value.items() if x != k}) if path \
                else {x: v for x, v in doc.items() if x != k}
            assert not VALIDATOR.is_valid(short) and refusal(short), (path, k)


def _edges(shape: Num | Size):
    """Values just inside and just outside a number's limit."""
    bound = (shape.num if isinstance(shape, Size) else shape).bound
    step = 1 if bound.integer else 1e-6 * max(1, abs(bound.hi))
    lo_in = bound.lo + step if bound.above else bound.lo
    lo_out = bound.lo if bound.above else bound.lo - step
    return [lo_in, bound.hi], [lo_out, bound.hi + step]


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_number_has_the_same_limits_in_both(name):
    doc = DOCS[name]
    for path, shape, _ in walk(scenario_doc.SCENARIO, doc):
        if not isinstance(shape, Num | Size):
            continue
        bound = (shape.num if isinstance(shape, Size) else shape).bound
        inside, outside = _edges(shape)
        for value in inside:
            changed = place(doc, path, value)
            assert VALIDATOR.is_valid(changed), (path, value)
            exc = refusal(changed)  # refused only for what a number's range is not
            assert exc is None or exc.key != _key(path) or bound.range not in exc.reason, exc
        for value in outside:
            changed = place(doc, path, value)
            assert not VALIDATOR.is_valid(changed), (path, value)
            exc = refusal(changed)
            assert exc and exc.key == _key(path), (path, value, exc)


def test_the_checker_s_limits_are_the_declaration_s():
    assert scenario.MAX_LANE_RULES is scenario_doc.MAX_LANE_RULES
    from labkit.model import abi

    assert scenario.MAX_LANE_RULES == abi.MAX_RULES
    assert scenario.LIMITS is scenario_doc.LIMITS
    assert scenario.LINK_KEYS == scenario_doc.LINK.keys
    assert scenario.RULE_KEYS == scenario_doc.RULE.keys
