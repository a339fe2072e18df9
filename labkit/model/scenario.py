"""Scenario files: load a YAML file and validate it into a :class:`Scenario`.

A scenario is plain data: defaults, the fabric (routers, hosts by role and leaf,
links, bottlenecks), lane rules, traffic and policies. This module is its checker: unknown
keys, wrong types and impossible values raise :class:`ScenarioError`, whose message names
the file, the key (as a dotted path) and the reason. What each section may hold, every
number's range (:data:`LIMITS`) and every name's pattern are declared once, in
:mod:`labkit.model.scenario_doc` (the JSON Schema, :mod:`labkit.model.schema`, is made from
the same declaration); the code here and in :mod:`.scenario_fabric` and
:mod:`.scenario_traffic` checks what a declaration cannot say: references between keys,
the address plan, combinations. Loading has no side effects.

The types it builds are :mod:`labkit.model.scenario_spec`'s (the fabric's,
:mod:`labkit.model.fabric_spec`'s). It re-exports every one of them, and the names of the
declaration and the checker's parts, so ``from labkit.model.scenario import Scenario,
LaneRule, LIMITS`` works as it always has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from labkit.model import inputs, lossless
from labkit.model.abi import LANES  # the lanes a scenario names: the kernel's, in its order
from labkit.model.checker import Checker, ScenarioError, as_text, join
from labkit.model.fabric_spec import FabricSpec, LinkSpec

# the declaration's names, all re-exported
from labkit.model.scenario_doc import (
    ALLREDUCE_ALGOS,
    ARRIVALS,
    BUILT_IN_KINDS,
    CONTROL,
    EMULATION,
    ENV_RE,
    EVENT,
    JOB_PARAMS,
    LABEL_RE,
    LANE_RULES,
    LIMITS,
    LINK,
    MAX_BOTTLENECKS,
    MAX_LANE_RULES,
    MAX_MESSAGE_BYTES,
    MAX_RATE_FACTOR,
    MIN_RATE_FACTOR,
    MIXES,
    MODULE_RE,
    NAME_RE,
    PATTERNS,
    PIPELINE_SCHEDULES,
    ROLES,
    RULE,
    SCENARIO,
    SCENARIO_NAME_RE,
    SIZE_RE,
    TRANSPORT,
    WORKLOADS,
)
from labkit.model.scenario_fabric import (
    IFNAMSIZ,
    MAX_SUBNETS,
    NVLINK_RATIO,
    check_fabric,
    check_link_defaults,
    server_problem,
)

# the types, all re-exported (POLICIES by an alias: the checker does not use it)
from labkit.model.scenario_spec import (
    AUTO,
    CONTROLLERS,
    DEFAULT_K_PACKETS,
    DEFAULT_PYTHON,
    ENGINES,
    EVENT_CHANGES,
    HOST_CHANGES,
    HOST_REF,
    JOB_DSCP,
    JOB_LAYOUTS,
    LAUNCHERS,
    LAYOUTS,
    NETWORK_CONTROL,
    PER_RANK_TEMPLATES,
    RANK_TEMPLATES,
    ROCEV2_PORT,
    SHARED_LAYOUTS,
    TCP_CONTROLS,
    TIMINGS,
    AllReduceSpec,
    Arrival,
    CommandSpec,
    ControlSpec,
    EmulationSpec,
    EventSpec,
    JobEntry,
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
from labkit.model.scenario_traffic import (
    MAX_COMMANDS,
    MAX_STORAGE_CONNECTIONS,
    MAX_STORAGE_ENTRIES,
    check_traffic,
    with_job_dscps,
    with_user_kinds,
)
from labkit.model.shapes import FLAG, Limit, kind_of, number_text

__all__ = [  # besides the functions below: what this module has always offered
    "ALLREDUCE_ALGOS", "ARRIVALS", "AUTO", "BUILT_IN_KINDS", "CONTROLLERS",
    "DEFAULT_K_PACKETS", "DEFAULT_PYTHON", "ENGINES", "ENV_RE", "HOST_REF", "IFNAMSIZ",
    "JOB_DSCP", "JOB_PARAMS", "LABEL_RE", "LANES", "LAUNCHERS", "LAYOUTS", "LIMITS",
    "LINK_KEYS", "MAX_BOTTLENECKS", "MAX_COMMANDS", "MAX_LANE_RULES", "MAX_MESSAGE_BYTES",
    "MAX_RATE_FACTOR", "MAX_STORAGE_CONNECTIONS", "MAX_STORAGE_ENTRIES", "MAX_SUBNETS",
    "MIN_RATE_FACTOR", "MIXES", "MODULE_RE", "NAME_RE", "NETWORK_CONTROL", "NVLINK_RATIO",
    "PATTERNS",
    "PER_RANK_TEMPLATES", "PIPELINE_SCHEDULES", "POLICIES", "RANK_TEMPLATES",
    "REMOVED_CONTROL_KEYS", "ROCEV2_PORT", "ROLES", "RULE_KEYS", "SCENARIO_NAME_RE",
    "SIZE_RE", "TCP_CONTROLS", "TIMINGS", "WORKLOADS", "AllReduceSpec", "Arrival",
    "JobEntry",
    "CommandSpec", "ControlSpec", "EmulationSpec", "FabricSpec", "JobSpec", "KindEntry",
    "LaneRule", "Limit", "Policy", "ProgramSpec", "Scenario", "ScenarioError", "StorageSpec",
    "TransportSpec", "as_text", "check_policies", "class_files", "is_grid", "kind_of", "load",
    "name_problem", "number_text", "parse", "parse_size", "policy", "read_yaml",
    "server_problem", "user_files", "with_user_kinds",
]

LINK_KEYS = LINK.keys  # a link's properties, as defaults.link and fabric.links[i] give them
RULE_KEYS = RULE.keys  # a lane rule's fields

# control keys of earlier versions, and why they are gone
REMOVED_CONTROL_KEYS = {
    "enforce": "every controlled run now holds senders in the kernel, at each host's gate "
               "(docs/control.md); delete the key",
    "burst_kb": "a host's gate holds horizon_ms of its rate and no more; delete the key",
}


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
    c = Checker(file)
    if is_grid(doc):
        c.fail("scenario", f"this is a grid file, not a scenario (it varies "
                           f"{str(doc['scenario'])[:200]!r}): `labkit batch` runs it and "
                           "`labkit validate` checks every point; other commands take the "
                           "scenario file it names")
    top = c.keys(doc, "", SCENARIO)
    name = c.string(top["name"], "name")
    if not SCENARIO_NAME_RE.fullmatch(name):
        c.fail("name", f"{name!r} cannot name runs: use letters, digits, '-' and '_' (up to "
                       "64; it becomes part of each run's id, a directory and a bpffs pin "
                       "path, where '.' and '/' are not allowed)")
    description = c.string(top["description"], "description") if "description" in top else ""
    scale = c.get(top, "", SCENARIO, "scale_factor", 1)
    seed = c.get(top, "", SCENARIO, "seed", 1)
    link_defaults = check_link_defaults(c, top.get("defaults", {}))
    fabric = check_fabric(c, top["fabric"], link_defaults)
    lanes_doc = top.get("lanes", {"vip": [{"roce": True}], "low": [{"tcp_port": 4420}]})
    lanes = _lanes(c, lanes_doc)
    classifier = _program(c, lanes_doc["program"], "lanes.program") \
        if isinstance(lanes_doc, dict) and "program" in lanes_doc else None
    kinds = class_files(c, top.get("kinds", {}), "kinds", BUILT_IN_KINDS)
    jobs, storage, commands, kind_entries = check_traffic(c, top["traffic"], fabric,
                                                          dict(kinds))
    jobs = with_job_dscps(c, jobs, lanes)
    lanes = _with_job_rules(c, lanes, jobs)
    for program in (j for j in jobs if isinstance(j, ProgramSpec)):
        # every packet the job sends is marked with it (labkit.kernel.jobmark): it is a
        # collective's wherever rules apply
        lanes = _with_vip_dscp(c, lanes, program.dscp, f"{program.key}'s",
                               f"drop the rule, or give {program.key}.dscp another value")
    if fabric.routing == "bgp":  # a switch sends its own control traffic ahead of data
        lanes = _with_vip_dscp(c, lanes, NETWORK_CONTROL, "the routers' BGP and BFD",
                               "drop the rule (DSCP 48, CS6, is network control, as FRR "
                               "marks it)")
    control = _control(c, top.get("control", {}), "control")
    emulation = _emulation(c, top.get("emulation", {}), "emulation")
    transport = _transport(c, top.get("transport", {}), "transport", fabric)
    policies = _policies(c, top.get("policies", list(LAYOUTS)), "policies",
                         [name for name, _ in control.controllers])
    events = _events(c, top.get("events", []), fabric, jobs)
    if any(isinstance(j, ProgramSpec) for j in jobs) and emulation.rate_factor != 1:
        c.fail("emulation.rate_factor", "a program's compute time is its own, which labkit "
               "cannot scale with the links: leave the rate factor at 1")
    if isinstance(factor := emulation.rate_factor, float | int) and factor != 1 and \
            (problem := lossless.headroom_problem(fabric, factor)):
        c.fail("emulation.rate_factor", f"at {factor:g} times its rates, {problem}")
    _job_policies(c, policies, "policies", jobs, lanes)
    return Scenario(name, file, scale, seed, fabric, lanes, jobs, storage,
                    tuple(p.name for p in policies), description, control=control,
                    commands=commands, kinds=kinds, kind_entries=kind_entries,
                    classifier=classifier, emulation=emulation, transport=transport,
                    events=events)


def _with_job_rules(c: Checker, lanes: tuple[LaneRule, ...], jobs: tuple[JobEntry, ...]
                    ) -> tuple[LaneRule, ...]:
    """The lane rules with each ``job:`` rule matching that job's DSCP, tried before the
    others (a job's lane is its own, whatever else its packets match)."""
    names = {j.name: j for j in jobs}
    out = []
    for r in lanes:
        if r.job is None:
            continue
        if r.job not in names:
            j = [x for x in lanes if x.lane == r.lane].index(r)
            c.fail(f"lanes.{r.lane}[{j}].job", f"no job {r.job!r} (jobs: "
                   f"{', '.join(names)})")
        if not names[r.job].dscp:
            j = [x for x in lanes if x.lane == r.lane].index(r)
            c.fail(f"lanes.{r.lane}[{j}].job", f"{r.job!r} is the scenario's only job: its "
                   "packets carry no DSCP of their own (a rule for roce or dscp matches them)")
        out.append(replace(r, dscp=names[r.job].dscp))
    return (*out, *(r for r in lanes if r.job is None))


def _transport(c: Checker, doc, key: str, fabric: FabricSpec) -> TransportSpec:
    c.keys(doc, key, TRANSPORT)
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
        k = c.check(TRANSPORT["ecn_k_packets"], k, f"{key}.ecn_k_packets")
        if not fabric.bottlenecks:
            c.fail(f"{key}.ecn_k_packets", "marks at the bottleneck ports, and the fabric "
                   "names none: add fabric.bottlenecks")
    return TransportSpec(tcp=tcp, hosts=hosts, ecn_k_packets=k)


def _with_vip_dscp(c: Checker, lanes: tuple[LaneRule, ...], dscp: int, whose: str,
                   fix: str) -> tuple[LaneRule, ...]:
    """The lane rules with DSCP ``dscp`` first in the vip lane (``whose`` packets carry
    it); a rule that puts it in another lane is refused, with ``fix``."""
    rule = LaneRule("vip", dscp=dscp)
    for r in lanes:
        if r.dscp == dscp and r.lane != "vip":
            j = [x for x in lanes if x.lane == r.lane].index(r)
            c.fail(f"lanes.{r.lane}[{j}]", f"puts DSCP {dscp} in the {r.lane} lane, but "
                   f"{whose} packets carry it to be in vip: {fix}")
    out = (rule, *(r for r in lanes if r != rule))
    if len(out) > MAX_LANE_RULES:
        c.fail("lanes", f"at most {MAX_LANE_RULES - 1} rules beside {whose} DSCP rule fit "
                        "the classifier")
    return out


def _events(c: Checker, doc, fabric: FabricSpec, jobs: Sequence[JobEntry]
            ) -> tuple[EventSpec, ...]:
    """``events``: each a link of the fabric's and one change to it, or a host of one of
    the jobs whose rank computes longer, and a timing that holds."""
    links = {frozenset((link.a, link.b)): link for link in fabric.links}
    ranked = {h for j in jobs for h in j.ranks}  # the hosts a job's rank runs on
    out = []
    for i, entry in enumerate(c.seq(doc, "events")):
        key = f"events[{i}]"
        c.keys(entry, key, EVENT)
        if ("link" in entry) == ("host" in entry):
            c.fail(key, "must name a `link: [a, b]` (down, rate_mbps, loss_percent, delay_ms) "
                   "or a `host` (slow), one of the two")
        host, link, change, value = _event_target(c, entry, key, links, ranked)
        at = float(c.get(entry, key, EVENT, "at_s"))
        for_s = c.get(entry, key, EVENT, "for_s") if "for_s" in entry else None
        every = c.get(entry, key, EVENT, "every_s") if "every_s" in entry else None
        if every is not None and (for_s is None or for_s >= every):
            c.fail(f"{key}.every_s", "a repeated event needs a for_s shorter than every_s "
                   "(down for for_s, up for the rest of every_s)")
        out.append(EventSpec(at, link.name if link else "", change, value,
                             None if for_s is None else float(for_s),
                             None if every is None else float(every), host))
    return tuple(out)


def _event_target(c: Checker, entry, key: str, links, ranked: set[str]
                  ) -> tuple[str | None, LinkSpec | None, str, float]:
    """An event's host or link, its change and the value it changes to."""
    if "host" in entry:
        host = entry["host"]
        changes = [k for k in HOST_CHANGES if k in entry]
        if changes != ["slow"] or any(k in entry for k in EVENT_CHANGES):
            c.fail(key, "a host's event is `slow: <factor>` (its ranks compute that many "
                   "times as long); a dead NIC is its link's `down: true`")
        if host not in ranked:
            c.fail(f"{key}.host", f"{host!r} runs no job's rank: name a host of an "
                   "allreduce, job or program entry")
        return host, None, "slow", float(c.get(entry, key, EVENT, "slow"))
    ends = entry["link"]
    if not (isinstance(ends, list) and len(ends) == 2 and all(isinstance(e, str)
                                                               for e in ends)):
        c.fail(f"{key}.link", f"must be a pair of node names like [leaf1, spine1], got "
               f"{ends!r}")
    link = links.get(frozenset(ends))
    if link is None:
        c.fail(f"{key}.link", f"no link between {ends[0]!r} and {ends[1]!r} in the fabric "
               "(an event changes one of its links: name both ends)")
    changes = [k for k in EVENT_CHANGES if k in entry]
    if len(changes) != 1 or "slow" in entry:
        c.fail(key, f"must say one change ({', '.join(EVENT_CHANGES)}), got "
               f"{', '.join(changes + ['slow'] * ('slow' in entry)) or 'none'}")
    change = changes[0]
    value = 100.0 if change == "down" else float(c.get(entry, key, EVENT, change))
    if change == "down":
        c.check(FLAG, entry["down"], f"{key}.down")
        if entry["down"] is not True:
            c.fail(f"{key}.down", "must be true (the link is down for for_s)")
    if change == "delay_ms" and value < link.jitter_ms:
        c.fail(f"{key}.delay_ms", f"{value:g} ms is less than the link's jitter_ms "
               f"({link.jitter_ms:g}): each frame's delay is drawn from delay ± jitter")
    return None, link, change, value


def _emulation(c: Checker, doc, key: str) -> EmulationSpec:
    c.keys(doc, key, EMULATION)
    gso = c.get(doc, key, EMULATION, "gso_packets", EmulationSpec.gso_packets)
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


def _control(c: Checker, doc, key: str) -> ControlSpec:
    for gone, why in REMOVED_CONTROL_KEYS.items():
        if isinstance(doc, dict) and gone in doc:
            c.fail(f"{key}.{gone}", f"no longer a setting: {why}")
    c.keys(doc, key, CONTROL)
    values: dict[str, Any] = {k: c.check(CONTROL[k], v, join(key, k)) for k, v in doc.items()
                              if k not in ("dcqcn", "controllers")}
    if "controllers" in doc:
        values["controllers"] = class_files(c, doc["controllers"], f"{key}.controllers",
                                            (*CONTROLLERS, *LAYOUTS, *JOB_LAYOUTS))
    if "dcqcn" in doc:
        values["dcqcn"] = c.get(doc, key, CONTROL, "dcqcn")
    busy, idle = (values.get(k, getattr(ControlSpec, k)) for k in ("busy_share", "idle_share"))
    if busy >= idle:
        c.fail(f"{key}.busy_share", f"must be below idle_share ({idle:g}): storage gets less "
               "while collectives run than while they leave the bottleneck idle")
    return ControlSpec(**values)


def _lanes(c: Checker, lanes) -> tuple[LaneRule, ...]:
    c.keys(lanes, "lanes", LANE_RULES)
    rules = []
    for lane, entries in lanes.items():
        if lane == "program":
            continue
        for i, rule in enumerate(c.seq(entries, f"lanes.{lane}")):
            rules.append(_rule(c, rule, f"lanes.{lane}[{i}]", lane))
    if len(rules) > MAX_LANE_RULES:
        c.fail("lanes", f"at most {MAX_LANE_RULES} rules fit the classifier, got {len(rules)}")
    return tuple(rules)


def _program(c: Checker, value, key: str) -> str:
    """A user's classifier: an existing ``.bpf.c`` (labkit compiles it) or ``.bpf.o``,
    relative to the scenario's directory."""
    name = c.string(value, key)
    if not name.endswith((".bpf.c", ".bpf.o")):
        c.fail(key, f"must name a .bpf.c source or a .bpf.o object, got {name!r}")
    path = (Path(c.file).parent / name).resolve()
    if not path.is_file():
        c.fail(key, f"{path} does not exist")
    return str(path)


def _rule(c: Checker, rule, key: str, lane: str) -> LaneRule:
    c.keys(rule, key, RULE)
    if not rule:
        c.fail(key, "an empty rule would match every packet; name at least one field")
    fields: dict[str, Any] = {"lane": lane}
    proto = None
    for k, v in rule.items():
        kk = join(key, k)
        if k == "roce":
            if not c.boolean(v, kk):
                c.fail(kk, "false is no condition (a rule cannot say 'not RoCE'): delete "
                           "the key, and match the packets by a field they have (dscp, "
                           "tcp_port, udp_dport, ...)")
            fields.update(roce=True, dport=ROCEV2_PORT)
            proto = _same_proto(c, kk, proto, "udp")
        elif k == "dscp":
            fields["dscp"] = c.check(RULE["dscp"], v, kk)
        elif k == "job":
            fields["job"] = c.label(v, kk, "a job's name: 'tp'")
        else:
            p, which = k.split("_")
            proto = _same_proto(c, kk, proto, p)
            target = which[0] + "port" if which != "port" else "port"
            fields[target] = c.check(RULE[k], v, kk)
    if fields.get("port") and (fields.get("sport") or fields.get("dport")):
        c.fail(key, "a rule names either a *_port (either side) or *_sport/*_dport, not both")
    if "job" in fields and "dscp" in fields:
        c.fail(key, "a job's rule matches the job's own DSCP: name the job or a dscp, not both")
    fields["proto"] = proto
    return LaneRule(**fields)


def _same_proto(c: Checker, key: str, current: str | None, new: str) -> str:
    if current not in (None, new):
        c.fail(key, f"a rule cannot match both {current} and {new}")
    return new




def user_files(sc: Scenario, kinds: bool = True) -> list[str]:
    """What a run of ``sc`` loads of the user's own (traffic kinds unless ``kinds`` is
    False, controllers, the classifier), one line each, for the run to say before it
    loads them."""
    lines = [f"traffic kind {name}: {spec}" for name, spec in sc.kinds] if kinds else []
    lines += [f"controller {name}: {spec}" for name, spec in sc.control.controllers]
    return lines + ([f"classifier: {sc.classifier}"] if sc.classifier else [])




def class_files(c: Checker, doc, key: str, built_in: Sequence[str] = ()
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


def name_problem(name: str, built_in: Sequence[str] = (*CONTROLLERS, *LAYOUTS, *JOB_LAYOUTS)
                 ) -> str | None:
    """What is wrong with ``name`` as the name of a user's controller or traffic kind
    (None: nothing)."""
    if not LABEL_RE.fullmatch(name):
        return "a name here is a label: lowercase letters, digits, - and _"
    if name in built_in:
        return f"{name!r} is built in: choose another name"
    return None


def _policies(c: Checker, policies, key: str, controllers: Sequence[str] = ()
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
    return Checker("command line").size(int(text) if text.isdigit() else text, what)


def check_policies(names: list[str], file: str, controllers: Sequence[str] = (),
                   sc: Scenario | None = None) -> tuple[Policy, ...]:
    """The policies ``names`` asks for beside a scenario file (``--policy``), each once,
    where ``controllers`` names the controllers besides the built-in ones, and (with the
    scenario ``sc``) each one its jobs can run; ScenarioError says what is wrong with one."""
    c = Checker(file)
    policies = _policies(c, list(names), "policies", controllers)
    if sc is not None:
        _job_policies(c, policies, "policies", sc.jobs, sc.lanes)
    return policies


def _job_policies(c: Checker, policies: Sequence[Policy], key: str,
                  jobs: Sequence[JobEntry], lanes: Sequence[LaneRule]) -> None:
    """The policies that share the fabric between jobs against the scenario's jobs: two
    or more of them; ``interleave`` shifts labkit's own ranks (not a program's);
    ``job-priority`` learns from labkit's engines or from programs' reported iterations,
    one kind at a time; a rule per job must fit beside the scenario's."""
    if len(jobs) < 2 and (several := [p.name for p in policies
                                      if p.layout in SHARED_LAYOUTS]):
        c.fail(key, f"{several[0]} shares the fabric between jobs, and this scenario has "
               "one: add another allreduce, job or program entry, or drop the policy")
    program = next((j for j in jobs if isinstance(j, ProgramSpec)), None)
    shifting = [p.name for p in policies if p.layout == "interleave"]
    if program and shifting:
        c.fail(key, f"{shifting[0]} shifts labkit's own ranks' iterations, and "
               f"{program.key} ({program.name}) is a program of yours: use fair, "
               "job-weights or job-priority with programs")
    ranking = [p.name for p in policies if p.layout == "job-priority"]
    ours = next((j for j in jobs if not isinstance(j, ProgramSpec)), None)
    if program and ours and ranking:
        c.fail(key, f"{ranking[0]} learns either labkit's jobs or programs, not both at once "
               f"yet: {ours.name} is labkit's and {program.name} a program of yours; make "
               "them all of one kind, or use fair or job-weights")
    placing = [p.name for p in policies if p.layout in ("job-priority", "job-weights")]
    if placing and len(lanes) + len(jobs) > MAX_LANE_RULES:
        c.fail("lanes", f"{placing[0]} puts a rule per job before the scenario's {len(lanes)}, "
               f"and at most {MAX_LANE_RULES} fit the classifier: drop "
               f"{len(lanes) + len(jobs) - MAX_LANE_RULES} rule(s)")
