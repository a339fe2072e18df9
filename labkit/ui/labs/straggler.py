"""Lab 6, find the straggler: a recorded run with a fault the student is not told of
(``data/sample/straggler``: ``topologies/straggler.yaml``, a data-parallel job on eight
ranks). From the ranks' own records (compute, bubbles and waits on the wire per iteration:
the ``collectives`` and ``phases`` tables) and the bottleneck port's counters the student
names the rank or link that slowed the job, the iterations it slowed and the time it cost,
then compares what labkit's summary blames (``culprits``,
:mod:`labkit.analysis.culprits`).

The checks grade against the truth: the run's ``events`` table, what the scenario made
happen and when (:func:`truth`). Nothing here hides it from a student who looks; the lab
asks them not to before they answer, as a real cluster hands no such table out.

*The truth of a straggler* (``slow: f`` on a host): its kind is ``rank`` and its name the
host; it slowed the iterations whose compute phase on that host's rank began while the
event was on (the engine stretches compute phases that start from then on); it cost
what the event added to that rank's compute, ``(f - 1) / f`` of each such phase as
recorded. A link's event: kind ``link``, the link as ``a-b``, the iterations that overlap
it, and the time those iterations took beyond the job's median iteration outside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from labkit.analysis import frames
from labkit.analysis.frames import EVENT_TEXT, iteration_phases
from labkit.analysis.windows import num
from labkit.model import scenario
from labkit.model.paths import REPO_ROOT
from labkit.runs.rundir import Run, load_run
from labkit.ui.labs.verdict import Unanswered, Wrong, check, require

SCENARIO = REPO_ROOT / "topologies" / "straggler.yaml"
SAMPLE = REPO_ROOT / "data" / "sample" / "straggler"
POLICY = "isolated"  # the sample's only policy
KINDS = ("rank", "link", "bottleneck")  # what can slow a job, as labkit's culprits name it
WAITERS = ("straggler", "neighbours", "others")  # whose bubbles grow, the prediction's choices
GROWTHS = ("less", "same", "n times")  # an iteration's growth against the extra compute
WHAT = {"compute": "compute_ms", "bubble": "bubble_ms", "wire": "wire_wait_ms"}
COST_TOLERANCE = 0.20  # relative, of the time the fault cost
GREW = 0.5  # a rank whose bubbles grew by this share of the extra compute waited for it


@dataclass(frozen=True)
class Truth:
    """What the run's ``events`` say happened: ``kind`` (rank or link) and ``name`` (the
    host, or the link ``a-b``), the iterations it slowed (``first_op`` to ``last_op``),
    what it cost (ms), and when it was on (s after the job's first iteration began)."""

    kind: str
    name: str
    first_op: int
    last_op: int
    cost_ms: float
    start_s: float
    end_s: float
    change: str
    value: float

    @property
    def ops(self) -> list[int]:
        return list(range(self.first_op, self.last_op + 1))


def _run(run) -> Run:
    if run is None:
        raise Unanswered("there is no run to read: run the cell that loads it")
    return run if isinstance(run, Run) else load_run(run)


def setup(path: Path = SCENARIO) -> str:
    """The scenario as the student is given it: its fabric and its job, without its
    ``events`` (the fault) or its description (which names it)."""
    import yaml

    doc = scenario.read_yaml(path)[1]
    shown = {k: v for k, v in doc.items() if k not in ("events", "description")}
    return yaml.safe_dump(shown, sort_keys=False, width=100, default_flow_style=None)


def _phases(run: Run) -> pl.DataFrame:
    ops = run["collectives"].filter(pl.col("policy") == POLICY)["op"].unique().sort()
    return iteration_phases(run["collectives"], POLICY, ops.to_list())


def iterations(run=SAMPLE) -> pl.DataFrame:
    """Per iteration of the job: when it began (s after the first), and how long it took
    from its first rank's start to its last rank's end (ms)."""
    rows = _phases(_run(run))
    return (rows.group_by("op").agg(pl.col("start_ms").min(), pl.col("end_ms").max())
            .sort("op").select("op", (pl.col("start_ms") / 1e3).round(3).alias("start_s"),
                               (pl.col("end_ms") - pl.col("start_ms")).round(1).alias("ms")))


def per_rank(run=SAMPLE, what: str = "compute") -> pl.DataFrame:
    """Per iteration (a row) and rank (a column, by its host), the ms the rank spent in
    ``what``: ``compute``, ``bubble`` (waiting for a peer that had not sent) or ``wire``
    (waiting for data on its way)."""
    if what not in WHAT:
        raise ValueError(f"what is one of {', '.join(WHAT)}, not {what!r}")
    rows = _phases(_run(run))
    hosts = rows.sort("rank")["host"].unique(maintain_order=True).to_list()
    return (rows.with_columns(pl.col(WHAT[what]).round(0))
            .pivot(on="host", index="op", values=WHAT[what]).sort("op").select("op", *hosts))


def bottleneck(run=SAMPLE) -> pl.DataFrame:
    """Per iteration, the bottleneck port's mean backlog (KiB) and the packets it dropped
    while the iteration ran."""
    run = _run(run)
    port = run.summary.policies[POLICY].bottleneck.port
    queue = (run["queue"].filter((pl.col("policy") == POLICY) & (pl.col("port") == port))
             .group_by("t_ns").agg(pl.col("backlog_bytes").sum(), pl.col("drops").sum())
             .sort("t_ns"))
    ops = (run["collectives"].filter(pl.col("policy") == POLICY).group_by("op")
           .agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("op"))
    rows = []
    for op, start, end in ops.iter_rows():
        during = queue.filter(pl.col("t_ns").is_between(start, end))
        before = queue.filter(pl.col("t_ns") <= start)["drops"]
        after = queue.filter(pl.col("t_ns") <= end)["drops"]
        rows.append({"op": op, "port": port,
                     "backlog_kib": round(float(during["backlog_bytes"].mean() or 0) / 1024, 1),
                     "drops": int((after.max() or 0) - (before.max() or 0))})
    return pl.DataFrame(rows)


def culprits(run=SAMPLE) -> pl.DataFrame:
    """What labkit's summary blames for each slow phase of the job (``culprits``): from the
    ranks' records and the bottleneck's counters, never from the events."""
    found = frames.culprits_frame(_run(run).summary).filter(pl.col("policy") == POLICY)
    return found.drop("policy").with_columns(pl.col("slowdown").round(2),
                                             pl.col("lost_ms").round(1))


def events(run=SAMPLE) -> pl.DataFrame:
    """The run's ``events`` (the truth): each change, on what, and when (s after the job's
    first iteration began)."""
    run = _run(run)
    t0 = run["collectives"].filter(pl.col("policy") == POLICY)["start_ns"].min()
    return (run["events"].filter(pl.col("policy") == POLICY).sort("t_ns")
            .select(((pl.col("t_ns") - t0) / 1e9).round(3).alias("at_s"), "event",
                    pl.col("link").alias("on"), "change", "value", "state"))


def truth(run=SAMPLE) -> Truth:
    """The first fault of the run's ``events``, and what it did (the module's docstring)."""
    run = _run(run)
    ev = run["events"].filter(pl.col("policy") == POLICY).sort("t_ns")
    if ev.is_empty():
        raise ValueError(f"{run.path}: no events in this run, so no fault to find")
    first = ev.row(0, named=True)
    mine = ev.filter(pl.col("event") == first["event"])
    start = int(first["t_ns"])
    ends = mine.filter(pl.col("state") == "end")["t_ns"]
    end = int(ends.min()) if ends.len() else None
    cols = run["collectives"].filter(pl.col("policy") == POLICY)
    t0 = int(cols["start_ns"].min())
    ops = cols.group_by("op").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("op")
    until = end if end is not None else int(ops["end_ns"].max())
    if first["change"] == "slow":
        factor = float(first["value"])
        began = (run["phases"].filter((pl.col("policy") == POLICY)
                                      & (pl.col("host") == first["link"])
                                      & (pl.col("phase") == "compute"))
                 .group_by("op").agg(pl.col("start_ns").min()))
        hit = began.filter(pl.col("start_ns").is_between(start, until, closed="left"))["op"]
        slowed = sorted(hit.to_list())
        extra = cols.filter((pl.col("host") == first["link"]) & pl.col("op").is_in(slowed))
        cost = float(extra["compute_ns"].sum()) / 1e6 * (1 - 1 / factor)
        kind = "rank"
    else:
        slowed = sorted(ops.filter((pl.col("end_ns") > start) & (pl.col("start_ns") < until))
                        ["op"].to_list())
        ms = ops.with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
        usual = float(ms.filter(~pl.col("op").is_in(slowed))["ms"].median() or 0)
        cost = float((ms.filter(pl.col("op").is_in(slowed))["ms"] - usual).sum())
        kind = "link"
    if not slowed:
        raise ValueError(f"{run.path}: the fault slowed no iteration of the job")
    return Truth(kind=kind, name=str(first["link"]), first_op=slowed[0], last_op=slowed[-1],
                 cost_ms=cost, start_s=(start - t0) / 1e9, end_s=(until - t0) / 1e9,
                 change=str(first["change"]), value=float(first["value"]))


def _usual_ms(run: Run, truth_: Truth) -> tuple[float, float]:
    """The job's median iteration outside the fault's iterations, and inside them (ms)."""
    ops = iterations(run)
    inside = pl.col("op").is_in(truth_.ops)
    return num(ops.filter(~inside)["ms"].median()), num(ops.filter(inside)["ms"].median())


def _name(answer, choices, what: str) -> str:
    name = " ".join(str(require(answer, what)).strip().lower().split())
    if name not in choices:
        raise Wrong(f"{answer!r} is not one of {', '.join(map(repr, choices))}",
                    f"{what} is one of these, as a string")
    return name


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Wrong(f"{what} is {value!r}, not a number", "write a number, e.g. 250")
    return float(value)


@check("Your prediction")
def check_prediction(who_waits, growth, run=SAMPLE) -> str:
    """Pass when ``who_waits`` says whose bubbles grew while one rank computed longer
    (every other rank's, in the recording) and ``growth`` how an iteration grew against
    the straggler's extra compute per iteration (about the same, in the recording)."""
    waits = _name(who_waits, WAITERS, "WHO_WAITS")
    grows = _name(growth, GROWTHS, "GROWTH")
    run = _run(run)
    t = truth(run)
    if t.kind != "rank":
        raise Wrong(f"this run's fault is a {t.kind}, not a straggler",
                    "this prediction is about a straggler's run: check it on data/sample/"
                    "straggler")
    extra = t.cost_ms / len(t.ops)
    bubbles = per_rank(run, "bubble")
    inside = pl.col("op").is_in(t.ops)
    grew = {h: num(bubbles.filter(inside)[h].mean()) - num(bubbles.filter(~inside)[h].mean())
            for h in bubbles.columns[1:]}
    waited = [h for h, ms in grew.items() if ms >= GREW * extra]
    hosts = bubbles.columns[1:]
    i = hosts.index(t.name)
    near = {hosts[(i - 1) % len(hosts)], hosts[(i + 1) % len(hosts)]}
    seen = ("straggler" if waited == [t.name] else
            "neighbours" if set(waited) <= near and waited else "others")
    usual, slow = _usual_ms(run, t)
    ratio = (slow - usual) / extra
    measured = "less" if ratio < 0.75 else "same" if ratio < 2 else "n times"
    if waits != seen:
        raise Wrong(f"not '{waits}': in the recording the bubbles of {len(waited)} of the "
                    f"{len(hosts)} ranks grew",
                    "a ring's All-Reduce cannot go on until every rank has sent its part: "
                    "who is left waiting, and who is the one they wait for?")
    if grows != measured:
        raise Wrong(f"right about the bubbles; but an iteration grew by {ratio:.1f}x the "
                    f"straggler's extra compute, not '{grows}'",
                    "the others wait once for it, side by side, in the same iteration: "
                    "their waits overlap, they do not add up")
    return (f"the recording agrees: the bubbles of {len(waited)} of the {len(hosts)} ranks grew "
            f"while one rank computed {extra:.0f} ms more an iteration, and each iteration "
            f"grew by about that much ({slow - usual:.0f} ms). Section 3 finds which rank it "
            "was.")


@check("The culprit")
def check_culprit(kind, who, run=SAMPLE) -> str:
    """Pass when ``kind`` (rank, link or bottleneck) and ``who`` (a host, or a link as
    ``a-b``) name the fault of the run's events."""
    kind = _name(kind, KINDS, "KIND")
    who = str(require(who, "WHO")).strip().lower()
    t = truth(_run(run))
    same = (who == t.name or (kind == "link" and "-" in who
                               and sorted(who.split("-")) == sorted(t.name.split("-"))))
    if kind == t.kind and same:
        what = EVENT_TEXT.get(t.change, "{link} " + t.change).format(link=t.name, value=t.value)
        return f"it was {t.name}: {what} from {t.start_s:.1f} s to {t.end_s:.1f} s into the job."
    if kind == "bottleneck":
        raise Wrong("the bottleneck did not do it",
                    "look at its table: did its port queue more or drop during the slow "
                    "iterations than in the others?")
    if kind != t.kind:
        raise Wrong(f"not a {kind}",
                    "whose waits on the wire grew while the job was slow? and whose "
                    "compute?" if t.kind == "rank" else
                    "whose compute grew while the job was slow? and whose waits on the wire?")
    raise Wrong(f"a {kind}, yes; but not {who}",
                "a straggler is the rank that waited least while the others waited most: "
                "its compute grew, their bubbles did" if kind == "rank" else
                "in a ring rank r receives from rank r-1: a slow link delays the data into "
                "its host's rank and the next one")


@check("The slow iterations")
def check_iterations(first_op, last_op, run=SAMPLE) -> str:
    """Pass when ``first_op`` and ``last_op`` are the first and last iteration the fault
    slowed."""
    first = require(first_op, "FIRST_OP")
    last = require(last_op, "LAST_OP")
    for value, what in ((first, "FIRST_OP"), (last, "LAST_OP")):
        if isinstance(value, bool) or not isinstance(value, int):
            raise Wrong(f"{what} is {value!r}, not an iteration number",
                        "iterations are numbered from 0, as in the tables' op column")
    t = truth(_run(run))
    if (first, last) == (t.first_op, t.last_op):
        return (f"iterations {t.first_op} to {t.last_op}: {len(t.ops)} of them. The fault "
                f"began {t.start_s:.2f} s into the job and ended at {t.end_s:.2f} s.")
    if last < first:
        raise Wrong(f"{first} to {last} is no range", "FIRST_OP comes before LAST_OP")
    if first > t.first_op or last < t.last_op:
        hint = "a slowed iteration was left out: look for every row where the culprit's "
    else:
        hint = "an iteration that was not slowed is in: look for the rows where the culprit's "
    hint += ("compute is larger than usual" if t.kind == "rank" else
             "waits on the wire are longer than usual")
    raise Wrong(f"not iterations {first} to {last}", hint)


@check("What it cost")
def check_cost(lost_ms, run=SAMPLE) -> str:
    """Pass when ``lost_ms`` is within :data:`COST_TOLERANCE` of the time the fault cost
    the job (:class:`Truth`), summed over the iterations it slowed."""
    value = _number(require(lost_ms, "LOST_MS"), "LOST_MS")
    run = _run(run)
    t = truth(run)
    right = t.cost_ms

    def near(x: float) -> bool:
        return abs(value - x) <= COST_TOLERANCE * abs(x)

    if near(right):
        found = culprits(run)
        said = (f"; labkit's culprits say {found['lost_ms'][0]:.0f} ms, against its usual "
                "iteration (the lower quartile)" if found.height else "")
        return (f"the fault cost the job {right:.0f} ms over {len(t.ops)} iterations, "
                f"{right / len(t.ops):.0f} ms each{said}.")
    usual, slow = _usual_ms(run, t)
    if near(right / len(t.ops)):
        hint = "that is one iteration's: add it up over every iteration the fault slowed"
    elif near(slow * len(t.ops)):
        hint = "that is those iterations' whole time: count only what they took beyond a usual one"
    elif near(right * len(per_rank(run).columns[1:])):
        hint = "the ranks waited side by side: count each iteration's time once, not per rank"
    elif near(right / 1e3) or near(right * 1e3):
        hint = "in milliseconds"
    else:
        hint = ("per slowed iteration, its time beyond a usual iteration's (the median of "
                f"the others, {usual:.0f} ms), added up")
    raise Wrong(f"{value:g} ms is not what the fault cost", hint)
