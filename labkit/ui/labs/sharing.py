"""Lab 5, whose All-Reduce is vip: two jobs share leaf1's uplink
(``topologies/two-jobs.yaml``); predict which sharing policy keeps the most GPU time busy
and which job pays for it, work out each job's GPU intensity from the scenario file (what
``job-priority``, after Crux, learns while the jobs run), then read the figures off a run:
the recorded one in ``data/sample/two-jobs`` or, with root, one of the student's own.

A job's GPU intensity here is what ``job-priority`` ranks by
(:mod:`labkit.runs.features.jobpriority`): the compute time of an iteration, in
nanoseconds, per byte the job sends across the bottleneck link one way in it. The bytes
are labkit's own ring plans' (:func:`labkit.runs.experiment.bytes_per_iteration`): a ring
of n ranks passes 2(n-1) chunks of size/n over every hop, so 2(n-1)/n x size each way.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from labkit.analysis.frames import jobs_frame
from labkit.model import scenario
from labkit.model.paths import REPO_ROOT
from labkit.model.scenario import AllReduceSpec, Scenario
from labkit.model.summary import Jobs
from labkit.model.topo import Topology
from labkit.runs.rundir import Run, load_run
from labkit.ui.labs.verdict import Unanswered, Wrong, check, require

SCENARIO = REPO_ROOT / "topologies" / "two-jobs.yaml"
SAMPLE = REPO_ROOT / "data" / "sample" / "two-jobs"
SHARING = ("fair", "job-priority", "job-weights", "interleave")  # the policies compared
LIVE_POLICIES = ("isolated", *SHARING)  # isolated: each job's yardstick
INTENSITY_TOLERANCE = 0.10  # relative, of the intensity computed from labkit's plans
UTILIZATION_TOLERANCE = 0.01  # absolute, a fraction: the table's figures rounded
SLOWDOWN_TOLERANCE = 0.02  # absolute
CRUX_BAR = 1.10  # the favoured job's p99 against its time alone: labkit's aim for Crux
HINTS = {  # why a policy that is not the best one falls short, in a sentence
    "fair": "under fair both jobs' All-Reduces share one vip FIFO: each burst waits behind "
            "the other job's, whichever job it is",
    "job-weights": "shares keep both jobs moving, but each still waits for the other's "
                   "bytes: neither gets its time alone back",
    "interleave": "taking turns costs the job that is put off its shift, every iteration "
                  "its period does not line up",
    "job-priority": "one job alone in vip gets its time alone back; the other waits for it",
}


def _jobs(sc: Scenario) -> list[AllReduceSpec]:
    jobs = [job for job in sc.jobs if isinstance(job, AllReduceSpec)]
    if len(jobs) < 2:
        raise ValueError(f"scenario {sc.name}: this lab needs two All-Reduce jobs")
    return jobs


def jobs(path: Path = SCENARIO) -> pl.DataFrame:
    """The scenario's jobs as a student reads them: name, ranks, ring size, All-Reduce
    size and compute time per iteration."""
    return pl.DataFrame([{"job": job.name, "ranks": " ".join(job.ranks),
                          "gpus": len(job.ranks), "algo": job.algo,
                          "size_bytes": job.size_bytes, "compute_ms": job.compute_ms}
                         for job in _jobs(scenario.load(path))])


def bottleneck_bytes(path: Path = SCENARIO) -> dict[str, int]:
    """Per job, the bytes its ranks' plans send across the first bottleneck link, one way,
    in one iteration (the busier way)."""
    from labkit.runs.experiment import bytes_per_iteration

    sc = scenario.load(path)
    topo = Topology(sc.fabric)
    a, b = sc.fabric.bottlenecks[0]
    out = {}
    for job in _jobs(sc):
        per_hop, _ = bytes_per_iteration(sc.alone(job), topo)
        out[job.name] = max(per_hop.get(f"{a}->{b}", 0), per_hop.get(f"{b}->{a}", 0))
    return out


def intensity(path: Path = SCENARIO) -> dict[str, float]:
    """Per job, its GPU intensity: ns of compute per byte across the bottleneck one way."""
    sent = bottleneck_bytes(path)
    return {job.name: job.compute_ms * 1e6 / sent[job.name]
            for job in _jobs(scenario.load(path)) if sent[job.name]}


def _run(run) -> Run:
    if run is None:
        raise Unanswered("there is no run to read: run the cell that sets `source`")
    return run if isinstance(run, Run) else load_run(run)


def rankings(run) -> pl.DataFrame:
    """``job-priority``'s rankings in ``run`` (a :class:`~labkit.Run` or its folder): each
    job's GPU intensity as learned (ns per byte), the iterations it was learned from and
    the lane it was given, one row per job and ranking that changed a lane."""
    ranks = _run(run)["job_ranks"].filter(pl.col("policy") == "job-priority")
    start = ranks["t_ns"].min() if ranks.height else 0
    return ranks.select(((pl.col("t_ns") - start) / 1e6).round(1).alias("after_ms"), "job",
                        pl.col("intensity_ns_per_byte").round(1), "iterations", "lane")


def favoured(run) -> str | None:
    """The job ``job-priority`` last put alone in vip in ``run`` (None: it never ranked)."""
    ranks = _run(run)["job_ranks"].filter((pl.col("policy") == "job-priority")
                                          & (pl.col("lane") == "vip"))
    return ranks.sort("t_ns")["job"][-1] if ranks.height else None


def source(run: Run | None) -> Run:
    """The run to measure: ``run`` (the live cell's) when there is one, else the recorded
    sample; says which."""
    if run is not None:
        print(f"reading your run, {run.path}")
        return run
    print(f"reading the recorded run in data/sample/{SAMPLE.name} (no live run)")
    return load_run(SAMPLE)


def table(run) -> pl.DataFrame:
    """Per job and policy (isolated and the four compared), what the run measured: its
    iterations' p50 and p99 (ms) and slowdowns against the job alone, its GPUs'
    utilization and the policy's summed over both jobs (weighted by GPUs), its share of
    the jobs' bytes at the bottleneck."""
    frame = jobs_frame(_run(run).summary, digits=3)
    return frame.filter(pl.col("policy").is_in(LIVE_POLICIES)).select(
        "policy", "job", "gpus", "p50_ms", "p99_ms", "slowdown_p50", "slowdown_p99",
        "gpu_utilization", "gpu_utilization_all", "bottleneck_share")


def run_live(duration: float | None = None, path: Path = SCENARIO) -> Run | None:
    """``path`` run for real under isolated and the four sharing policies (root, or
    ``labkit serve``); None, saying why, when it cannot run."""
    from labkit.ui.labs.verdict import run_lab

    return run_lab(scenario.load(path), LIVE_POLICIES, duration=duration,
                   document=scenario.read_yaml(path)[1])


def _shared(run: Run) -> dict[str, Jobs]:
    """The jobs' figures of each policy of :data:`SHARING` in ``run``, or :class:`Wrong`."""
    found = {p: s.jobs for p, s in run.summary.policies.items()
             if p in SHARING and s.jobs is not None}
    missing = [p for p in SHARING if p not in found]
    if missing:
        raise Wrong(f"this run has no figures for {', '.join(missing)}",
                    f"run it with policies {list(LIVE_POLICIES)}")
    return found


def _utilization(run: Run) -> dict[str, float]:
    return {p: jobs.gpu_utilization for p, jobs in _shared(run).items()}


def _name(answer, choices, what: str) -> str:
    name = str(require(answer, what)).strip().lower()
    if name not in choices:
        raise Wrong(f"{answer!r} is not one of {', '.join(choices)}",
                    f"{what} is one of these names, as a string")
    return name


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Wrong(f"{what} is {value!r}, not a number", "write a number, e.g. 0.5")
    return float(value)


@check("Your prediction")
def check_prediction(best_policy, who_pays, run_dir: Path = SAMPLE) -> str:
    """Pass when ``best_policy`` is the sharing policy whose summed GPU utilization was
    highest in the recording and ``who_pays`` the job with the larger p99 slowdown
    under it."""
    run = _run(run_dir)
    names = list(_shared(run)[SHARING[0]].each)
    policy = _name(best_policy, SHARING, "BEST_POLICY")
    job = _name(who_pays, names, "WHO_PAYS")
    util = _utilization(run)
    best = max(util, key=util.__getitem__)
    each = _shared(run)[best].each
    payer = max(each, key=lambda name: each[name].slowdown_p99 or 0.0)
    if policy != best:
        raise Wrong(f"{policy} is not the one that kept the most GPU time busy in the "
                    "recording", f"{HINTS[policy]}. Which job loses the most compute for "
                    "every millisecond its All-Reduce waits, and which policy stops that?")
    if job != payer:
        raise Wrong(f"right policy; but under {best} it is not {job} that pays",
                    "under job-priority one job has vip to itself: the other one's "
                    "packets wait whenever both send")
    return (f"the recording agrees: {best} kept the most GPU time busy, and {payer} paid "
            "for it. Section 4 measures by how much.")


def _intensity_hint(ratio: float, n: int) -> str:
    """What a student's intensity over the right one (``ratio``) suggests went wrong, for
    a ring of ``n`` ranks."""
    def near(x: float) -> bool:
        return abs(ratio / x - 1) <= INTENSITY_TOLERANCE

    ring = 2 * (n - 1) / n
    if near(ring):
        return ("a ring All-Reduce sends more than its buffer across each hop: every rank "
                f"passes 2(n-1) chunks of size/n on to its neighbour ({ring:g} x size here)")
    if near(2.0):
        return ("reduce-scatter and then all-gather both cross the link: 2(n-1)/n x size, "
                "not (n-1)/n")
    if near(1 / n):
        return "each chunk is size/n: 2(n-1) chunks of size/n, not 2(n-1) buffers"
    if near(0.5):
        return "one direction of the link: a ring sends as much each way, count it once"
    if near(1 / 8):
        return "bytes or bits? count bytes"
    if any(near(k) for k in (1e-6, 1e-3, 1e3, 1e6)):
        return "check your units: nanoseconds of compute per byte"
    return ("compute_ms in ns, over the bytes one rank sends across leaf1's uplink, one "
            "way, in an iteration: 2(n-1)/n x size_bytes for a ring of n")


@check("Each job's GPU intensity")
def check_intensity(answer, path: Path = SCENARIO, run_dir: Path = SAMPLE) -> str:
    """Pass when ``answer`` ({job: ns of compute per byte across the bottleneck}) is within
    :data:`INTENSITY_TOLERANCE` of what labkit's plans give for each job; what
    ``job-priority`` learned in the recording is shown beside it."""
    given = require(answer, "INTENSITY")
    want = intensity(path)
    if not isinstance(given, dict) or sorted(map(str, given)) != sorted(want):
        raise Wrong(f"INTENSITY must be a dict with one number per job "
                    f"({', '.join(want)}), got {given!r}",
                    'e.g. {"heavy": 12.5, "light": 34.0}')
    ranks = {job.name: len(job.ranks) for job in _jobs(scenario.load(path))}
    for job, right in want.items():
        value = given[job]
        if value is Ellipsis:
            raise Unanswered(f"INTENSITY[{job!r}] is still blank")
        value = _number(value, f"INTENSITY[{job!r}]")
        if abs(value - right) > INTENSITY_TOLERANCE * right:
            hint = ("compute per byte, not bytes per unit of compute"
                    if value > 0 and abs(1 / value - right) <= INTENSITY_TOLERANCE * right
                    else _intensity_hint(value / right, ranks[job]))
            raise Wrong(f"{job}: {value:g} ns per byte is not its GPU intensity", hint)
    sent = bottleneck_bytes(path)
    learned = rankings(run_dir)
    seen = {row["job"]: row["intensity_ns_per_byte"]
            for row in learned.head(len(want)).iter_rows(named=True)}
    said = "; ".join(f"{job} {want[job]:.1f} ns/B ({sent[job] / 2**20:.2f} MiB each way per "
                     "iteration)" for job in want)
    measured = ", ".join(f"{job} {seen[job]:.1f}" for job in want if job in seen)
    return (f"{said}. job-priority learned {measured} ns/B from the kernel's per-job counters "
            "while the jobs ran.")


@check("Whose All-Reduce is vip")
def check_favoured(answer, run_dir: Path = SAMPLE, path: Path = SCENARIO) -> str:
    """Pass when ``answer`` names the job ``job-priority`` put alone in vip in the
    recording (the more GPU-intense one)."""
    job = _name(answer, list(intensity(path)), "FAVOURED")
    want = favoured(run_dir)
    if want is None:
        raise Wrong("job-priority never ranked the jobs in this recording",
                    "it ranks them once every job has ended an iteration")
    if job == want:
        return (f"job-priority put {want}'s packets alone in vip and every other job's in "
                "normal, from its first ranking on.")
    raise Wrong(f"job-priority put {want} in vip, not {job}",
                "Crux favours the job that computes the most per byte it sends: a "
                "millisecond its All-Reduce waits idles its GPUs, yet holding its few bytes "
                "back frees little of the link for the other job")


@check("Summed GPU utilization")
def check_utilization(answer, run=SAMPLE) -> str:
    """Pass when ``answer`` ({policy: summed GPU utilization, a fraction}) matches the
    run's figure for each of :data:`SHARING` within :data:`UTILIZATION_TOLERANCE`."""
    given = require(answer, "GPU_UTIL")
    run = _run(run)
    want = _utilization(run)
    if not isinstance(given, dict):
        raise Wrong(f"GPU_UTIL must be a dict of policy -> number, got {given!r}",
                    'e.g. {"fair": 0.5, "job-priority": 0.6, ...}')
    missing = [p for p in SHARING if p not in given]
    if missing:
        raise Wrong(f"GPU_UTIL has no {', '.join(missing)}",
                    f"give all four: {', '.join(SHARING)}")
    for policy, right in want.items():
        value = given[policy]
        if value is Ellipsis:
            raise Unanswered(f"GPU_UTIL[{policy!r}] is still blank")
        value = _number(value, f"GPU_UTIL[{policy!r}]")
        if abs(value - right) <= UTILIZATION_TOLERANCE:
            continue
        each = _shared(run)[policy].each
        if abs(value / 100 - right) <= UTILIZATION_TOLERANCE:
            hint = "as a fraction (0.52), not a percentage"
        elif any(abs(value - j.gpu_utilization) <= UTILIZATION_TOLERANCE
                 for j in each.values()):
            hint = ("that is one job's; the policy's figure is over both jobs, weighted by "
                    "their GPUs (gpu_utilization_all in the table)")
        else:
            hint = "read gpu_utilization_all in the table above, in the policy's rows"
        raise Wrong(f"{policy}: {value:g} is not what the run measured", hint)
    best = max(want, key=want.__getitem__)
    said = ", ".join(f"{p} {u:.1%}" for p, u in want.items())
    return (f"{said}: {best} keeps the most GPU time busy, "
            f"{want[best] / want['fair'] - 1:+.1%} over fair.")


@check("The favoured job's tail")
def check_favoured_slowdown(answer, run=SAMPLE) -> str:
    """Pass when ``answer`` is the p99 slowdown (against the job alone) of the job
    ``job-priority`` put in vip in the run, within :data:`SLOWDOWN_TOLERANCE`."""
    value = require(answer, "FAVOURED_P99")
    run = _run(run)
    job = favoured(run)
    if job is None or "job-priority" not in run.summary.policies:
        raise Wrong("job-priority did not rank the jobs in this run",
                    "it ranks them once every job has ended an iteration: was the run cut "
                    "short?")
    value = _number(value, "FAVOURED_P99")
    each = _shared(run)["job-priority"].each
    mine = each[job]
    others = {name: j for name, j in each.items() if name != job}
    right = mine.slowdown_p99
    if right is None:
        raise Wrong("this run has no isolated policy, so there is no slowdown to read",
                    f"run it with policies {list(LIVE_POLICIES)}")
    if abs(value - right) <= SLOWDOWN_TOLERANCE:
        paid = ", ".join(f"{name} {j.slowdown_p99:.2f}x" for name, j in others.items()
                         if j.slowdown_p99 is not None)
        verdict = "within" if right <= CRUX_BAR else "not within"
        return (f"under job-priority {job}'s p99 iteration took {right:.2f}x its time alone "
                f"({verdict} {CRUX_BAR:.2f}x of it); the other job paid ({paid}).")

    def near(x: float | None) -> bool:
        return x is not None and abs(value - x) <= SLOWDOWN_TOLERANCE

    if any(near(j.slowdown_p99) for j in others.values()):
        hint = f"that is the other job's; the favoured one is {job}, the job in vip"
    elif near(mine.slowdown_p50):
        hint = "that is its p50; the question is the tail, p99"
    elif abs(value - mine.iteration_p99_ms) <= 1:
        hint = "a slowdown is a ratio against the job alone, not milliseconds"
    else:
        hint = "read slowdown_p99 in the table, in job-priority's row of the favoured job"
    raise Wrong(f"{value:g} is not {job}'s p99 slowdown under job-priority", hint)
