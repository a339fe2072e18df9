"""Lab 4, pipeline vs tensor parallelism: the pipeline's bubble and the bytes each way of
splitting the model sends across the bottleneck, computed from labkit's own job plans
(:mod:`labkit.model.traffic.jobs`) run in virtual time
(:mod:`labkit.model.traffic.timeline`): no root.

The batch stays the one ``topologies/pipeline-parallel.yaml`` moves: more micro-batches
are each smaller (activations) and shorter (compute). A message takes its size at the
slowest link on its path; links are not shared (see :mod:`labkit.model.traffic.timeline`).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from labkit.model import scenario
from labkit.model.paths import REPO_ROOT
from labkit.model.scenario import JobSpec, Scenario, ScenarioError
from labkit.model.summary import Job
from labkit.model.topo import Topology
from labkit.model.traffic import jobs, timeline
from labkit.runs.rundir import Run, load_run
from labkit.ui.labs.verdict import Unanswered, Wrong, answered, call, check, require

PIPELINE = REPO_ROOT / "topologies" / "pipeline-parallel.yaml"
TENSOR = REPO_ROOT / "topologies" / "tensor-parallel.yaml"
SAMPLES = REPO_ROOT / "data" / "sample"
START = (2, ("g1", "g5", "g2", "g6", "g3", "g7", "g4", "g8"))  # the lab's starting point
MAX_MICROBATCHES = 64  # 4 KiB of activations each: one packet
TOLERANCE = 0.25  # the plan's bubble may be this much (relative) above the textbook's
FORMULA_CASES = [(p, m) for p in (2, 4, 8) for m in (1, 2, 3, 8, 16)]


def _doc(path: Path) -> dict:
    return scenario.read_yaml(path)[1]


def _job_entry(doc: dict) -> dict:
    return next(t for t in doc["traffic"] if t["kind"] == "job")


def pipeline_job(microbatches: int, placement, schedule: str = "1f1b",
                 path: Path = PIPELINE) -> Scenario:
    """``path``'s pipeline job with the same batch in ``microbatches`` micro-batches and
    stage i on host ``placement[i]``, checked as a scenario file would be."""
    doc = _doc(path)
    job = _job_entry(doc)
    batch = job["microbatches"] * scenario.parse_size(str(job["activation_bytes"]),
                                                      "activation_bytes")
    forward_ms = job["microbatches"] * job["stage_compute_ms"]
    job.update(ranks=list(placement), microbatches=microbatches, schedule=schedule,
               activation_bytes=max(1, batch // microbatches),
               stage_compute_ms=forward_ms / microbatches)
    doc.update(name=f"{doc['name']}-lab", policies=["isolated"])
    return scenario.parse(doc, str(path))


def _job_spec(sc: Scenario) -> JobSpec:
    if sc.job is None:
        raise ValueError(f"scenario {sc.name}: no training job")
    return sc.job


def _plans(sc: Scenario) -> list:
    n = len(sc.ranks)
    return [jobs.plan(_job_spec(sc).as_dict(), n, r) for r in range(n)]


def wire_time(sc: Scenario):
    """(src rank, dst rank, bytes) -> ns at the slowest link between their hosts."""
    topo = Topology(sc.fabric)
    slowest = {(a, b): min(link.rate_mbps for link in topo.links_on_path(a, b))
               for a in sc.ranks for b in sc.ranks if a != b}
    return lambda src, dst, nbytes: nbytes * 8e3 / slowest[(sc.ranks[src], sc.ranks[dst])]


def uplink_bytes(sc: Scenario) -> int:
    """Bytes one iteration sends across the scenario's first bottleneck link (both ways)."""
    from labkit.runs.experiment import bytes_per_iteration

    per_hop, _ = bytes_per_iteration(sc, Topology(sc.fabric))
    a, b = sc.fabric.bottlenecks[0]
    return per_hop.get(f"{a}->{b}", 0) + per_hop.get(f"{b}->{a}", 0)


def figures(sc: Scenario) -> dict:
    """A pipeline job's iteration as its plans run: stages, micro-batches, the time and
    idle fraction with messages taking their wire time and with messages free, the
    textbook's bubble and the bytes across the bottleneck."""
    plans = _plans(sc)
    real, free = timeline.simulate(plans, wire_time(sc)), timeline.simulate(plans)
    p, m = len(sc.ranks), _job_spec(sc).as_dict()["microbatches"]
    return {"stages": p, "microbatches": m, "placement": " ".join(sc.ranks),
            "iteration_ms": round(real.makespan_ns / 1e6, 1),
            "bubble": round(real.idle_fraction, 3), "bubble_free_messages":
            round(free.idle_fraction, 3), "textbook": round((p - 1) / (m + p - 1), 3),
            "uplink_kib": uplink_bytes(sc) // 1024}


def schedule_figure(microbatches: int, placement, messages: bool = True):
    """The iteration of the pipeline job with this choice, stage by stage (plotly):
    compute bars, bubbles between them; ``messages=False`` makes messages free."""
    from labkit.ui import plots

    sc = pipeline_job(microbatches, list(placement))
    run = timeline.simulate(_plans(sc), wire_time(sc) if messages else None)
    how = "messages at their wire time" if messages else "messages free"
    return plots.stage_schedule(run.busy_ns, list(sc.ranks),
                                f"{microbatches} micro-batches over {len(sc.ranks)} stages",
                                f"labkit's 1F1B plans, {how}; idle {run.idle_fraction:.0%}")


def compare(choices: list[tuple[int, list[str]]]) -> pl.DataFrame:
    """:func:`figures` of several (micro-batches, placement) choices, one row each."""
    return pl.DataFrame([figures(pipeline_job(m, placement)) for m, placement in choices])


@check("Your bubble formula")
def check_bubble_formula(fn) -> str:
    """Pass when ``fn(stages, microbatches)`` gives the idle fraction of labkit's own
    pipeline plans (messages free, GPipe and 1F1B) in every case tried."""
    fn = require(fn, "textbook_bubble")
    if not callable(fn):
        raise Wrong(f"{fn!r} is not a function", "keep the def textbook_bubble(...) line")
    doc = _doc(PIPELINE)
    for p, m in FORMULA_CASES:
        yours = call(fn, p, m, what="textbook_bubble")
        if not answered(yours):
            raise Unanswered("textbook_bubble still returns a blank")
        for schedule in jobs.PIPELINE_SCHEDULES:
            job = {**_job_entry(doc), "microbatches": m, "schedule": schedule}
            idle = timeline.simulate([jobs.plan(job, p, r) for r in range(p)]).idle_fraction
            if isinstance(yours, bool) or not isinstance(yours, (int, float)) \
                    or abs(yours - idle) > 1e-6:
                raise Wrong(f"for {p} stages and {m} micro-batches ({schedule}) you say "
                            f"{yours!r}; labkit's plans idle {idle:.4f} of the iteration",
                            "count time slots: how many does a stage spend working on "
                            "micro-batches, and how many does the whole iteration last?")
    return (f"your formula matches labkit's own plans in all {len(FORMULA_CASES)} cases, "
            "GPipe and 1F1B alike: 1F1B keeps fewer activations in memory, not fewer "
            "bubbles.")


def _choice(microbatches, placement) -> Scenario:
    m = require(microbatches, "MICROBATCHES")
    hosts = require(placement, "PLACEMENT")
    if (m, tuple(hosts) if isinstance(hosts, (list, tuple)) else hosts) == START:
        raise Unanswered("MICROBATCHES and PLACEMENT are still the starting point: change them")
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_MICROBATCHES:
        raise Wrong(f"MICROBATCHES must be a whole number from 1 to {MAX_MICROBATCHES}, "
                    f"got {m!r}", f"the limit: with {MAX_MICROBATCHES} micro-batches each "
                    "one's activations already fit in one packet")
    gpus = tuple(h for leaf in _doc(PIPELINE)["fabric"]["hosts"]["gpu"].values() for h in leaf)
    if not isinstance(hosts, (list, tuple)) or sorted(hosts) != sorted(gpus):
        raise Wrong(f"PLACEMENT must list each GPU host once ({', '.join(gpus)}), "
                    f"got {hosts!r}", "stage i runs on PLACEMENT[i]")
    try:
        return pipeline_job(m, list(hosts))
    except ScenarioError as exc:
        raise Wrong(f"the scenario refuses it: {exc.key}: {exc.reason}") from None


@check("Your pipeline")
def check_pipeline_choice(microbatches, placement) -> str:
    """Pass when the choice has a smaller bubble and sends fewer bytes across the uplink
    than :data:`START`, and its plans' bubble (messages at their wire time) stays within
    :data:`TOLERANCE` of the textbook's."""
    mine, start = figures(_choice(microbatches, placement)), figures(pipeline_job(*START))
    said = (f"bubble {mine['bubble']:.0%} of an iteration (textbook {mine['textbook']:.0%}, "
            f"start {start['bubble']:.0%}); {mine['uplink_kib']} KiB across the uplink per "
            f"iteration (start {start['uplink_kib']} KiB); an iteration takes "
            f"{mine['iteration_ms']:.0f} ms (start {start['iteration_ms']:.0f} ms)")
    if mine["uplink_kib"] >= start["uplink_kib"]:
        raise Wrong(f"{said}: no fewer bytes across the uplink",
                    "only neighbouring stages talk: how many neighbours sit on different "
                    "leaves in your placement?")
    if mine["bubble"] >= start["bubble"]:
        raise Wrong(f"{said}: the bubble is no smaller",
                    "the pipeline fills and drains once per iteration, however many "
                    "micro-batches it carries")
    if mine["bubble"] > mine["textbook"] * (1 + TOLERANCE):
        raise Wrong(f"{said}: faster, but its idle time is no longer the textbook's bubble "
                    f"(more than {TOLERANCE:.0%} above it)",
                    "the textbook counts compute only. The batch's messages take the same "
                    "wire time however you cut it, and under 1F1B a stage waits for its "
                    "neighbour's message at every micro-batch: with many tiny micro-batches "
                    "those waits, not the fill and drain, set the idle time")
    in_order = sorted(placement, key=lambda host: int(host[1:]))
    fewest = uplink_bytes(pipeline_job(microbatches, in_order)) // 1024
    best = "" if mine["uplink_kib"] <= fewest else \
        f" (a placement could cut the uplink to {fewest} KiB)"
    return f"{said}{best}."


@check("Which parallelism loads the uplink")
def check_more_uplink(answer) -> str:
    """Pass when ``answer`` names the job that sends more across the uplink per iteration
    (from both scenario files' plans; the recorded runs say the same)."""
    kind = str(require(answer, "MORE_UPLINK_BYTES")).strip().lower()
    if kind not in ("tensor", "pipeline"):
        raise Wrong(f"{answer!r} is neither 'tensor' nor 'pipeline'")
    sent = {k: uplink_bytes(scenario.load(p)) for k, p in
            (("tensor", TENSOR), ("pipeline", PIPELINE))}
    recorded = {k: _job(load_run(SAMPLES / f"{k}-parallel"), "isolated")
                .bottleneck_bytes_per_iteration for k in sent}
    said = (f"per iteration the tensor job sends {sent['tensor'] / 2**20:.1f} MiB across the "
            f"uplink (both ways) and the pipeline {sent['pipeline'] / 2**20:.2f} MiB; the "
            f"recorded runs: {recorded['tensor'] / 2**20:.1f} and "
            f"{recorded['pipeline'] / 2**20:.2f} MiB each way")
    if sent[kind] == max(sent.values()):
        return f"{said}."
    raise Wrong(f"{said}", "tensor parallelism all-reduces the activations of every layer "
                "across all ranks; the pipeline passes them once per stage boundary")


def run_choice(microbatches, placement, duration: float = 15.0) -> Run | None:
    """The pipeline job with this choice run for real, alone (root); None, saying why,
    when the choice is blank or not valid or the run cannot happen."""
    from labkit.ui.labs.verdict import run_lab

    try:
        sc = _choice(microbatches, placement)
    except (Unanswered, Wrong) as exc:
        print(f"Not run: {exc.message}")
        return None
    return run_lab(sc, ["isolated"], duration=duration)


def measured(run: Run | Path | None, policy: str = "isolated") -> pl.DataFrame | str:
    """A live run's iterations: median time, the part of a rank's iteration it did not
    compute (idle), split into bubbles and wire waits, and the bytes through the busier
    direction of the uplink (or why there is nothing to show)."""
    if run is None:
        return "no live run: the cell above needs root"
    job = _job(run if isinstance(run, Run) else load_run(run), policy)
    return pl.DataFrame([{"iteration_p50_ms": round(job.p50_ms, 1),
                          "idle": round(job.exposed_comm_fraction, 3),
                          "bubble": round(job.bubble_fraction, 3),
                          "wire_wait": round(job.wire_wait_fraction, 3),
                          "uplink_kib_one_way": job.bottleneck_bytes_per_iteration // 1024}])


def _job(run: Run, policy: str) -> Job:
    """The training job ``run`` recorded under ``policy``."""
    job = run.summary.policies[policy].workload
    if not isinstance(job, Job):
        raise ValueError(f"{run.path}: no training job under {policy} (it ran {job.KEY})")
    return job
