"""The scenario checker's part for ``traffic``: the collective workload (an All-Reduce, a
training job or the user's program), storage entries and their arrivals, command entries,
the entries of the scenario's own traffic kinds (:func:`with_user_kinds` expands them when
a run starts), and the hosts each names. The keys and ranges are
:mod:`labkit.model.scenario_doc`'s; :func:`labkit.model.scenario.parse` calls
:func:`check_traffic`. Pure, but for :func:`with_user_kinds`, which imports the user's kinds.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from labkit.model.checker import Checker
from labkit.model.fabric_spec import FabricSpec
from labkit.model.scenario_doc import (
    ALLREDUCE,
    ALLREDUCE_ALGOS,
    ARRIVALS,
    BUILT_IN_KINDS,
    COMMAND,
    ENV_RE,
    JOB_PARAMS,
    JOBS,
    MIXES,
    MODULE_RE,
    ON_OFF,
    PATTERNS,
    PIPELINE_SCHEDULES,
    PROGRAM,
    ROLES,
    SERVE,
    STORAGE,
    WORKLOADS,
)
from labkit.model.scenario_fabric import server_problem
from labkit.model.scenario_spec import (
    AUTO,
    DEFAULT_PYTHON,
    HOST_REF,
    JOB_DSCP,
    LAUNCHERS,
    PER_RANK_TEMPLATES,
    RANK_TEMPLATES,
    TIMINGS,
    AllReduceSpec,
    Arrival,
    CommandSpec,
    JobEntry,
    JobSpec,
    KindEntry,
    LaneRule,
    ProgramSpec,
    Scenario,
    StorageSpec,
)
from labkit.model.shapes import kind_of
from labkit.model.traffic import schedules

MAX_STORAGE_ENTRIES, MAX_STORAGE_CONNECTIONS = 12, 1000  # each entry owns 1000 source ports
MAX_COMMANDS = 16


MAX_JOBS = 8  # jobs per scenario: each needs a DSCP of its own (JOB_DSCPS)
# the DSCPs labkit gives jobs that name none, in order (AF classes), skipping one
# a job or a lane rule of the scenario already uses
JOB_DSCPS = (JOB_DSCP, 10, 18, 34, 12, 20, 28, 36, 14, 22, 30, 38)


def check_traffic(c: Checker, traffic, fabric: FabricSpec, kinds: dict[str, str]):
    """``traffic``: the jobs (collective workloads), storage, command and user kinds'
    entries, in that order."""
    jobs: list[JobEntry] = []
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
        if t["kind"] in WORKLOADS:
            jobs.append(_job_entry(c, t, key, fabric, jobs))
        elif t["kind"] == "storage":
            _add_named(c, storage, _storage(c, t, key, fabric), key, MAX_STORAGE_ENTRIES)
        elif t["kind"] == "command":
            _add_named(c, commands, _command(c, t, key, fabric), key, MAX_COMMANDS)
        elif t["kind"] in kinds:  # its class checks it when a run loads it
            kind_entries.append(KindEntry(key, t["kind"],
                                          {k: v for k, v in t.items() if k != "kind"}))
        else:
            c.fail(f"{key}.kind", f"unknown traffic kind {t['kind']!r} (known: {known})")
    if not jobs:
        c.fail("traffic", "needs a collective workload (kind: allreduce, job or program)")
    return tuple(jobs), tuple(storage), tuple(commands), tuple(kind_entries)


def _job_entry(c: Checker, t: dict, key: str, fabric: FabricSpec,
               before: list[JobEntry]) -> JobEntry:
    """One job (an ``allreduce``, ``job`` or ``program`` entry), checked against the jobs
    ``before`` it: its name unique, its ranks clear of theirs where they would collide."""
    if len(before) == MAX_JOBS:
        c.fail(key, f"at most {MAX_JOBS} jobs (allreduce, job and program entries) per "
                    "scenario")
    job: JobEntry
    if t["kind"] == "program":
        job = _program_entry(c, t, key, fabric)
    elif t["kind"] == "job":
        job = _job(c, t, key, fabric)
    else:
        job = _allreduce(c, t, key, fabric)
    mine = f"{key}.name" if "name" in t else key
    if before and (auto := next((j for j in (*before, job) if isinstance(j, AllReduceSpec)
                                 and j.algo == AUTO), None)):
        c.fail(key, f"job {auto.name!r} says algo: auto, which labkit chooses for a "
                    "scenario's only All-Reduce: name the algorithm with several jobs")
    for i, other in enumerate(before):
        if other.name == job.name:
            c.fail(mine, f"job {other.name!r} is named twice (traffic entry {i} has it too): "
                         "give each job a name of its own (`name:`)")
        shared = [h for h in job.ranks if h in other.ranks]
        if shared and not isinstance(job, ProgramSpec) and not isinstance(other, ProgramSpec):
            c.fail(f"{key}.ranks", f"host {shared[0]!r} runs a rank of {other.name!r} too: "
                   "labkit's ranks receive on RoCEv2's UDP port 4791, one rank per host and "
                   "port; give each of labkit's jobs hosts of its own")
        if shared:  # a program's packets are marked by host (its ranks' cgroups there)
            c.fail(f"{key}.ranks", f"host {shared[0]!r} runs a rank of {other.name!r} too: "
                   "a program's ranks have their hosts to themselves (labkit marks and "
                   "counts a program's traffic at its hosts' NICs); give it hosts of its own")
        if "dscp" in t and job.dscp == other.dscp and other.dscp:
            c.fail(f"{key}.dscp", f"DSCP {job.dscp} is {other.name!r}'s too: each job's "
                                  "packets carry a DSCP of their own")
    return job


def with_job_dscps(c: Checker, jobs: tuple[JobEntry, ...], lanes: tuple[LaneRule, ...]
                   ) -> tuple[JobEntry, ...]:
    """Each job that names no DSCP given one: with several jobs, one of :data:`JOB_DSCPS`
    no other job or lane rule uses; one job keeps what it always had (labkit's ranks send
    DSCP 0, a program's carry :data:`JOB_DSCP`)."""
    if len(jobs) < 2:
        return tuple(replace(j, dscp=JOB_DSCP) if isinstance(j, ProgramSpec) and not j.dscp
                     else j for j in jobs)
    ruled = {r.dscp: r.lane for r in lanes if r.dscp is not None and r.job is None}
    for j in jobs:
        if j.dscp in ruled and not isinstance(j, ProgramSpec):  # a program's: its vip rule
            c.fail("traffic", f"job {j.name!r} carries DSCP {j.dscp}, which a rule of "
                   f"lanes.{ruled[j.dscp]} matches: every packet of the job would go there; "
                   "give the job another dscp, or name it in a rule (job: "
                   f"{j.name})")
    taken = {j.dscp for j in jobs if j.dscp} | {r.dscp for r in lanes if r.dscp is not None}
    free = (d for d in JOB_DSCPS if d not in taken)
    out = []
    for j in jobs:
        if not j.dscp:
            d = next(free, None)
            if d is None:  # MAX_JOBS keeps enough free
                c.fail("traffic", "no DSCP left for a job: give each job a `dscp`")
            j = replace(j, dscp=d)
        out.append(j)
    return tuple(out)


def _allreduce(c: Checker, t: dict, key: str, fabric: FabricSpec) -> AllReduceSpec:
    c.keys(t, key, ALLREDUCE)
    algos = (*ALLREDUCE_ALGOS, AUTO)  # chosen by labkit.model.autotune's model
    if t.get("algo", "ring") not in algos:
        c.fail(f"{key}.algo", f"unknown algorithm {t['algo']!r} "
                              f"(known: {', '.join(algos)})")
    ranks = _selection(c, t["ranks"], f"{key}.ranks", fabric)
    if len(ranks) < 2:
        c.fail(f"{key}.ranks", "an all-reduce needs at least 2 ranks")
    if problem := _algo_problem(t.get("algo", "ring"), fabric, ranks):
        c.fail(f"{key}.algo", problem)
    return AllReduceSpec(
        ranks=ranks,
        size_bytes=c.get(t, key, ALLREDUCE, "size_bytes"),
        iterations=c.get(t, key, ALLREDUCE, "iterations"),
        compute_ms=c.get(t, key, ALLREDUCE, "compute_ms", 0),
        algo=t.get("algo", "ring"),
        name=c.label(t.get("name", AllReduceSpec.name), f"{key}.name", "'tp' or 'train-1'"),
        dscp=c.get(t, key, ALLREDUCE, "dscp") if "dscp" in t else 0,
    )


def with_user_kinds(sc: Scenario) -> tuple[Scenario, dict[str, type]]:
    """``sc`` with the entries of its own traffic kinds expanded into command entries, and
    the kinds' classes. This imports the kinds' files (user code, run as whoever runs
    labkit): a run calls it when it starts, parsing never does."""
    from labkit.model.extend import TrafficKind, load_class

    c = Checker(sc.path)
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




def _expand(c: Checker, e: KindEntry, kind, fabric: FabricSpec) -> list[dict]:
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




def _selection(c: Checker, value, key: str, fabric: FabricSpec) -> tuple[str, ...]:
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


def _job(c: Checker, t: dict, key: str, fabric: FabricSpec) -> JobSpec:
    kind = t.get("parallelism")
    if not isinstance(kind, str) or kind not in JOB_PARAMS:
        c.fail(f"{key}.parallelism", f"must be one of {', '.join(JOB_PARAMS)}, got {kind!r}")
    shape = JOBS[kind]
    c.keys(t, key, shape)
    ranks = _selection(c, t["ranks"], f"{key}.ranks", fabric)
    if len(ranks) < 2:
        c.fail(f"{key}.ranks", "a job needs at least 2 ranks")
    params: dict[str, Any] = {}
    for name in JOB_PARAMS[kind]:
        params[name] = c.get(t, key, shape, name)
    if kind == "pipeline":
        schedule = t.get("schedule", "1f1b")
        if schedule not in PIPELINE_SCHEDULES:
            c.fail(f"{key}.schedule", f"must be one of {', '.join(PIPELINE_SCHEDULES)}, "
                                      f"got {schedule!r}")
        params["schedule"] = schedule
    return JobSpec(kind, ranks, c.get(t, key, shape, "iterations"),
                   tuple(sorted(params.items())),
                   name=c.label(t.get("name", JobSpec.name), f"{key}.name", "'dp' or 'train-1'"),
                   dscp=c.get(t, key, shape, "dscp") if "dscp" in t else 0)


def _storage(c: Checker, t: dict, key: str, fabric: FabricSpec) -> StorageSpec:
    c.keys(t, key, STORAGE)
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
    queues = c.get(t, key, STORAGE, "queues", StorageSpec.queues)
    if len(clients) * queues > MAX_STORAGE_CONNECTIONS:
        c.fail(f"{key}.queues", f"{len(clients)} clients x {queues} queues is more than "
                                f"{MAX_STORAGE_CONNECTIONS} connections; use fewer queues")
    io_bytes = c.get(t, key, STORAGE, "io_bytes", d["io_bytes"])
    name = c.label(t.get("name", mix), f"{key}.name", "'dataset' or 'ckpt-1'")
    return StorageSpec(
        server=server, clients=clients, name=name, mix=mix, pattern=pattern,
        offered_load=c.get(t, key, STORAGE, "offered_load", d["offered_load"]),
        port=c.get(t, key, STORAGE, "port", StorageSpec.port),
        queues=queues,
        io_bytes=io_bytes,
        queue_depth=c.get(t, key, STORAGE, "queue_depth", d["queue_depth"]),
        arrival=_arrival(c, t["arrival"], f"{key}.arrival") if "arrival" in t else d["arrival"],
    )


def _arrival(c: Checker, a, key: str) -> Arrival:
    if isinstance(a, str):
        a = {"process": a}
    c.keys(a, key, ON_OFF)  # the other processes' keys are fewer: checked below
    if a["process"] not in ARRIVALS:
        c.fail(f"{key}.process", f"unknown arrival process {a['process']!r} "
                                 f"(known: {', '.join(ARRIVALS)})")
    if a["process"] != "on_off":
        extra = sorted(set(a) - {"process"})
        if extra:
            c.fail(f"{key}.{extra[0]}", f"only an on_off arrival takes {extra[0]}")
        return Arrival(a["process"])
    return Arrival("on_off", *(c.get(a, key, ON_OFF, k, default) for k, default in
                               (("on_ms", 500), ("off_ms", 1500), ("phase_ms", 0))))


def _argv(c: Checker, value, key: str, fabric: FabricSpec,
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


def _command(c: Checker, t: dict, key: str, fabric: FabricSpec) -> CommandSpec:
    c.keys(t, key, COMMAND)
    name = c.label(t["name"], f"{key}.name", "'bulk' or 'loader-1'")
    host = _one_host(c, t["host"], f"{key}.host", fabric)
    run = _argv(c, t["run"], f"{key}.run", fabric)
    if "serve" not in t:
        return CommandSpec(name, host, run, key=key)
    serve = c.keys(t["serve"], f"{key}.serve", SERVE)
    return CommandSpec(name, host, run, _one_host(c, serve["host"], f"{key}.serve.host", fabric),
                       _argv(c, serve["run"], f"{key}.serve.run", fabric), key=key)


def _program_entry(c: Checker, t: dict, key: str, fabric: FabricSpec) -> ProgramSpec:
    c.keys(t, key, PROGRAM)
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
    duration = c.get(t, key, PROGRAM, "duration_s")  # None: until the ranks exit
    iterations = c.get(t, key, PROGRAM, "iterations") if "iterations" in t else None
    warmup = c.get(t, key, PROGRAM, "warmup", ProgramSpec.warmup)
    if iterations is not None and warmup >= iterations:
        c.fail(f"{key}.warmup", f"leaves no iteration to measure: must be below iterations "
                                f"({iterations}), got {warmup}")
    quiet = c.get(t, key, PROGRAM, "quiet_ms", ProgramSpec.quiet_ms)
    stall = c.get(t, key, PROGRAM, "stall_s") if "stall_s" in t else None
    return ProgramSpec(
        name=name, ranks=ranks, run=run, cwd=str(Path(c.file).parent.resolve()),
        python=python, iterations=iterations, warmup=warmup,
        env=tuple(sorted((k, str(v)) for k, v in env.items())),
        master_port=c.get(t, key, PROGRAM, "master_port", ProgramSpec.master_port),
        dscp=c.get(t, key, PROGRAM, "dscp") if "dscp" in t else 0,  # 0: labkit's choice
        quiet_ms=quiet, duration_s=duration, imports=tuple(imports), launcher=launcher,
        timing=timing, stall_s=None if stall is None else float(stall), key=key)


def _one_host(c: Checker, value, key: str, fabric: FabricSpec) -> str:
    hosts = _selection(c, value, key, fabric)
    if len(hosts) != 1:
        c.fail(key, f"must name one host, got {len(hosts)} ({', '.join(hosts)}); "
                    "write one entry per host")
    return hosts[0]


def _add_named(c: Checker, entries: list, entry, key: str, most: int) -> None:
    """Append a storage or command entry: names unique within its kind, at most ``most``."""
    if entry.name in {e.name for e in entries}:
        c.fail(f"{key}.name", f"another {entry.kind} entry is already named {entry.name!r}; "
                              "give this one a name of its own")
    if len(entries) == most:
        c.fail(key, f"at most {most} {entry.kind} entries per scenario")
    entries.append(entry)




def _algo_problem(algo: str, fabric: FabricSpec, ranks: tuple[str, ...]) -> str | None:
    """Why ``ranks`` cannot run the All-Reduce ``algo`` (None: they can, or labkit chooses
    it): :func:`server_problem`, then the check a run's schedules make."""
    if algo == AUTO:
        return None
    if algo == "hierarchical" and (problem := server_problem(fabric, ranks)):
        return problem
    return schedules.problem("all_reduce", algo, len(ranks), fabric.gpus_per_host)


