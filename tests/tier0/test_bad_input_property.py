"""Property: every malformed scenario gets one line naming file, key and reason, exit 2.

Malformed scenarios are made from the shipped bottleneck.yaml by mutations that are
invalid by construction: an unknown key in any mapping, a value of the wrong kind or
an impossible number at any leaf, a number past its range (too large, infinite, not a
number, below its least), a name with a trailing newline, an unknown node where a node is
referenced, a required key removed, a host placed twice, a key written twice at any depth,
a fabric too large for the address plan or for Linux's interface names, or text that is
not a scenario at all.
Each mutation knows the key its error must name. Those a JSON Schema can express are
refused by labkit's schema too; and any hostile value at any place of any shipped scenario
is refused with one line or accepted, never anything else.
"""

import contextlib
import copy
import io
import os
from pathlib import Path

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.model import scenario, schema
from labkit.model.scenario import ScenarioError
from labkit.ui import cli
from tests.leaks import without_leftovers_note

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
REFERENCES = ("fabric.links", "fabric.bottlenecks", "traffic[0].ranks", "traffic[1].clients",
              "traffic[1].server")
REQUIRED = {"": ["name", "fabric", "traffic"], "fabric": ["routers", "hosts", "bottlenecks"],
            "traffic[0]": ["ranks", "size_bytes", "iterations"],
            "traffic[1]": ["server", "clients"], "fabric.links[1]": ["between"]}


def walk(node, path=""):
    """Every (path, value) in the document, with labkit's key notation."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


PLACES = list(walk(BASE))
MAPPINGS = [p for p, v in PLACES if isinstance(v, dict)]
SCALARS = [p for p, v in PLACES if p and not isinstance(v, (dict, list))]
NUMBERS = [p for p, v in PLACES if isinstance(v, (int, float)) and not isinstance(v, bool)
           or p.endswith("size_bytes")]
REFS = [p for p, v in PLACES if isinstance(v, str) and p.startswith(REFERENCES)]
NAMES = [p for p, v in PLACES if isinstance(v, str) and p != "description"
         and not p.endswith("size_bytes")]  # every other string is a name or a choice


def locate(doc, path):
    """(parent container, key or index) for a path produced by walk()."""
    parts = []
    for piece in path.replace("[", ".[").split("."):
        if piece:
            parts.append(int(piece[1:-1]) if piece.startswith("[") else piece)
    node = doc
    for p in parts[:-1]:
        node = node[p]
    return node, parts[-1]


def mutated(path, value):
    doc = copy.deepcopy(BASE)
    parent, key = locate(doc, path)
    parent[key] = value
    return doc


unknown_key = st.builds(
    lambda m, k: (_with_key(m, "x_" + k), f"{m}.x_{k}" if m else f"x_{k}"),
    st.sampled_from(MAPPINGS), st.from_regex(r"[a-z]{1,8}", fullmatch=True))


def _with_key(mapping_path, key):
    doc = copy.deepcopy(BASE)
    target = doc if not mapping_path else locate(doc, mapping_path)[0][
        locate(doc, mapping_path)[1]]
    target[key] = 1
    return doc


wrong_kind = st.builds(lambda p, v: (mutated(p, v), p), st.sampled_from(SCALARS),
                       st.sampled_from([None, {"x": 1}, [[1, 2]]]))
impossible_number = st.builds(lambda p, v: (mutated(p, v), p), st.sampled_from(NUMBERS),
                              st.one_of(st.integers(max_value=-1), st.floats(max_value=-1e-3)))


def _limit(path):
    """The limit of the number at ``path`` (named by its key; a rule's ports by "port")."""
    name = path.rsplit(".", 1)[-1]
    return scenario.LIMITS["port" if name.endswith("_port") else name]


def _past(path):
    """Values past the range of the number at ``path``: above it, infinite, not a number,
    and below its least (a size: past the hot path's largest message, with a unit too)."""
    if path.endswith("size_bytes"):
        return st.sampled_from(["1024G", "4GiB", "4097M", 2**32, 2**40])
    limit = _limit(path)
    least = (limit.lo if limit.above else limit.lo - 1 if limit.integer
             else limit.lo / 2 if limit.lo else -1e-9)
    return st.sampled_from([limit.hi + (1 if limit.integer else limit.hi), 10**30, least,
                            float("inf"), float("-inf"), float("nan"), 1e308])


out_of_range = st.sampled_from(NUMBERS).flatmap(
    lambda p: _past(p).map(lambda v: (mutated(p, v), p)))
trailing_newline = st.sampled_from(NAMES).map(
    lambda p: (mutated(p, locate(BASE, p)[0][locate(BASE, p)[1]] + "\n"), p))


def _grown(hosts=0, router_links=0, router: str | None = None, bottlenecks=0):
    """BASE with more: storage hosts on leaf2 (or on a new ``router`` beside spine1),
    parallel links leaf2-spine1, and bottleneck routers r1, r2, ... beside spine1."""
    doc = copy.deepcopy(BASE)
    fab = doc["fabric"]
    if router:
        fab["routers"].append(router)
        fab["links"].append([router, "spine1"])
    fab["hosts"]["storage"].setdefault(router or "leaf2", []).extend(
        f"s{i}" for i in range(hosts))
    fab["links"] += [["leaf2", "spine1"]] * router_links
    for i in range(1, bottlenecks + 1):
        fab["routers"].append(f"r{i}")
        fab["links"].append([f"r{i}", "spine1"])
        fab["bottlenecks"].append([f"r{i}", "spine1"])
    return doc


too_large = st.one_of(
    st.integers(256 - 9, 400).map(lambda n: (_grown(hosts=n), "fabric.hosts")),
    st.integers(256 - 2, 300).map(lambda n: (_grown(router_links=n), "fabric.links")),
    st.tuples(st.from_regex(r"[a-z0-9]{4}", fullmatch=True), st.integers(100, 200)).map(
        lambda rn: (_grown(hosts=rn[1], router=f"leafx{rn[0]}"), "fabric.routers[3]")),
    st.integers(scenario.MAX_BOTTLENECKS, 12).map(
        lambda n: (_grown(bottlenecks=n), "fabric.bottlenecks")))
unknown_node = st.builds(lambda p, n: (mutated(p, f"zz{n}"), p), st.sampled_from(REFS),
                         st.integers(0, 99))
missing = st.sampled_from([(m, k) for m, keys in REQUIRED.items() for k in keys]).map(
    lambda mk: (_without(*mk), f"{mk[0]}.{mk[1]}" if mk[0] else mk[1]))
placed_twice = st.sampled_from(["g1", "g5", "g8"]).map(  # storage is read after gpu
    lambda h: (_placed_again(h), "fabric.hosts.storage.leaf2[1]"))
not_a_scenario = st.one_of(st.text(max_size=40), st.lists(st.integers(), max_size=3)).map(
    lambda junk: (junk, ""))


def _without(mapping_path, key):
    doc = copy.deepcopy(BASE)
    target = doc if not mapping_path else locate(doc, mapping_path)[0][
        locate(doc, mapping_path)[1]]
    del target[key]
    return doc


def _placed_again(host):
    doc = copy.deepcopy(BASE)
    doc["fabric"]["hosts"]["storage"]["leaf2"].append(host)
    return doc


BASE_TEXT = yaml.safe_dump(BASE, sort_keys=False)


def _key_lines(node, path=""):
    """(path, line, column) of every mapping key in BASE_TEXT that starts its own line."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            where = f"{path}.{k.value}" if path else k.value
            yield where, k.start_mark.line, k.start_mark.column
            yield from _key_lines(v, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _key_lines(item, f"{path}[{i}]")


KEY_LINES = [(p, line, col) for p, line, col in _key_lines(yaml.compose(BASE_TEXT))
             if not BASE_TEXT.splitlines()[line][:col].strip()]  # not after a "- "


def _written_twice(place):
    """BASE with one key written again just above itself, at any depth."""
    path, line, col = place
    lines = BASE_TEXT.splitlines()
    lines.insert(line, " " * col + path.rsplit(".", 1)[-1].split("[")[0] + ": 1")
    return "\n".join(lines) + "\n"


key_twice = st.sampled_from(KEY_LINES).map(lambda place: (_written_twice(place), place[0]))
MALFORMED = st.one_of(unknown_key, wrong_kind, impossible_number, out_of_range,
                      trailing_newline, unknown_node, missing, placed_twice, too_large,
                      not_a_scenario, key_twice)
# what a JSON Schema can say: keys, kinds, ranges (not NaN, not a size with a unit), names
EXPRESSIBLE = st.one_of(unknown_key, wrong_kind, impossible_number, missing, trailing_newline,
                        out_of_range.filter(lambda case: _schema_sees(*case)))


def _schema_sees(doc, path):
    value = locate(doc, path)[0][locate(doc, path)[1]]
    return not isinstance(value, str) and value == value


@settings(max_examples=800, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=MALFORMED)
def test_malformed_scenario_is_one_clear_line_and_exit_2(tmp_path_factory, case):
    doc, key = case
    path = tmp_path_factory.mktemp("bad") / "lab.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    try:
        scenario.load(path)
        raise AssertionError(f"accepted a malformed scenario (mutation at {key!r})")
    except ScenarioError as exc:
        if key:
            assert exc.key == key or exc.key.startswith((key + ".", key + "[")), (exc.key, key)
        assert exc.reason and exc.file == str(path)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = cli.main(["run", str(path)])
    lines = without_leftovers_note(stderr.getvalue().strip().splitlines())
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), lines


def test_nothing_reaches_the_kernel(tmp_path, monkeypatch):
    """A malformed scenario is refused before anything is created: the run never takes the
    machine's run lock, which every run holds before it builds anything; and, as root, no
    labkit object appears. (`make test` runs tier 0 beside kernel tests whose runs come and
    go: the objects are compared when no run held the lock before or after, each read
    between two looks at the lock that found it free.)"""
    from labkit.kernel.registry import RunLock
    from tests.leaks import labkit_objects

    def quiet_objects() -> dict | None:
        """labkit's objects, read while no run held the lock (None: one did, or root's
        view is not ours)."""
        if os.geteuid() != 0 or RunLock.holder() is not None:
            return None
        objects = labkit_objects()
        return objects if RunLock.holder() is None else None

    taken = []
    enter = RunLock.__enter__
    monkeypatch.setattr(RunLock, "__enter__", lambda lock: taken.append(lock) or enter(lock))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(mutated("defaults.link.rate_mbps", -1)))
    before = quiet_objects()
    with contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["run", str(bad)]) == 2
    assert taken == []
    if before is not None and (after := quiet_objects()) is not None:
        assert after == before


VALIDATOR = jsonschema.Draft7Validator(schema.scenario_schema())


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(case=EXPRESSIBLE)
def test_the_schema_refuses_what_it_can_express(case):
    doc, key = case
    assert VALIDATOR.is_valid(BASE)
    assert not VALIDATOR.is_valid(doc), f"the schema accepts a mutation at {key!r}"


SHIPPED = {p.name: (p, yaml.safe_load(p.read_text()))
           for p in sorted((REPO / "topologies").glob("*.yaml"))}
HOSTILE = [None, True, "", "x\n", {"x\ny": 1}, [[1, 2]], -1, 0, 10**30, 1e308,
           float("inf"), float("-inf"), float("nan")]


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_a_hostile_value_anywhere_is_refused_in_one_line_or_accepted(data):
    path, base = SHIPPED[data.draw(st.sampled_from(sorted(SHIPPED)))]
    place = data.draw(st.sampled_from([p for p, _ in walk(base) if p]))
    doc = copy.deepcopy(base)
    parent, key = locate(doc, place)
    parent[key] = copy.deepcopy(data.draw(st.sampled_from(HOSTILE)))
    try:
        scenario.parse(doc, str(path))
    except ScenarioError as exc:
        assert "\n" not in str(exc) and exc.reason, exc
