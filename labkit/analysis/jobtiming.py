"""A user's program's collectives and iterations from what was recorded of it, when it
printed none of its own: the ops labkit's hook or shim timed (iterations cut by the job's
rhythm), or the bursts of its traffic, when they fit the model of a job's collectives.

*The traffic's model.* A training job alternates compute, when its hosts send nothing,
with collectives, when they send in bursts. Pooled over the job's hosts, the gaps between
bursts then fall into two classes: gaps inside a collective (a ring's steps waiting on
each other) and gaps between them (compute). The threshold between the two is learned
per job and run (the widest ratio between consecutive gaps, sorted), never a fixed
``quiet_ms``, and bursts closer than it are one op. The model fits when the two classes
are apart (:data:`SPLIT_RATIO`), the gaps between ops are steady (:data:`STEADY`), and,
when the entry says how many iterations the job runs, the ops found are that many. When
it does not fit (under contention a collective's own waits grow as long as its compute),
there is no op and no iteration: :class:`FromTraffic` says why, and no slowdown is given
rather than a wrong one.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.model.tables import BurstRow, OpRow
from labkit.model.traffic import lines
from labkit.model.traffic.rhythm import run_period

SIGNIFICANT = 0.10  # of a host's largest burst: smaller ones are chatter, not collectives
SPLIT_RATIO = 3.0  # the gaps between ops are at least this many times those inside one
STEADY = 2.0  # p90 / p10 of the gaps between ops, at most: compute has a rhythm
COUNT_SLACK = 0.05  # the ops found may miss the iterations declared by this share (or 1)
MIN_OPS = 4


@dataclass(frozen=True)
class FromTraffic:
    """What the traffic showed: its ops (empty when it is not measurable), the threshold
    learned between gaps inside an op and between ops, and why it is not measurable."""

    ops: list[OpRow]
    split_ns: int | None = None
    unmeasured: str | None = None


def _significant(bursts: list[BurstRow], ranks: dict[str, int]) -> list[BurstRow]:
    largest: dict[str, int] = {}
    for b in bursts:
        largest[b.host] = max(largest.get(b.host, 0), b.bytes)
    return sorted((b for b in bursts if b.host in ranks
                   and b.bytes >= SIGNIFICANT * largest[b.host]), key=lambda b: b.start_ns)


def _clusters(kept: list[BurstRow], join_ns: int) -> list[list[BurstRow]]:
    """Bursts that overlap or lie within ``join_ns`` of each other, pooled over hosts."""
    clusters: list[list[BurstRow]] = []
    end = 0
    for b in kept:
        if not clusters or b.start_ns > end + join_ns:
            clusters.append([])
            end = 0
        clusters[-1].append(b)
        end = max(end, b.end_ns)
    return clusters


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def learn_split(gaps: list[int]) -> tuple[int, float]:
    """The threshold between short and long gaps (ns) at the widest ratio between
    consecutive gaps, sorted, and that ratio (1.0 and 0: one class, all long)."""
    ordered = sorted(max(g, 1_000) for g in gaps)  # under 1 µs: back to back
    best, at = 1.0, 0
    for k in range(len(ordered) - 1):
        if (ratio := ordered[k + 1] / ordered[k]) > best:
            best, at = ratio, k
    if best < SPLIT_RATIO:
        return 0, best
    return int((ordered[at] * ordered[at + 1]) ** 0.5), best


def ops_from_traffic(bursts: list[BurstRow], ranks: dict[str, int],
                     iterations: int | None = None) -> FromTraffic:
    """The collectives a program's traffic shows, per the model (the module docstring):
    an op per cluster of significant bursts, one row per host in it (op ``burst``),
    numbered in time order; ``ranks`` maps hosts to ranks; ``iterations``: how many the
    entry says the job runs."""
    kept = _significant(bursts, ranks)
    union = _clusters(kept, 0)
    gaps = [min(b.start_ns for b in after) - max(b.end_ns for b in before)
            for before, after in zip(union, union[1:], strict=False)]
    split, ratio = learn_split(gaps)
    clusters = _clusters(kept, split)
    between = [g for g in gaps if g > split]
    why = None
    if len(clusters) < MIN_OPS:
        why = f"{len(clusters)} collective(s) seen in its traffic, too few to find a rhythm in"
    elif iterations is not None and abs(len(clusters) - iterations) > max(
            1, COUNT_SLACK * iterations):
        why = (f"{len(clusters)} collectives seen in its traffic for the {iterations} "
               f"iterations it runs")
    elif 0 < ratio < SPLIT_RATIO and iterations is None:
        why = "the gaps inside its collectives are as long as those between them"
    elif len(between) >= 3 and _quantile(between, 0.9) > STEADY * _quantile(between, 0.1):
        why = (f"the gaps between its collectives vary {_quantile(between, 0.9) / 1e6:.0f}/"
               f"{_quantile(between, 0.1) / 1e6:.0f} ms (p90/p10): no steady rhythm")
    if why:
        return FromTraffic([], split, why)
    out = []
    for k, members in enumerate(clusters):
        for host in dict.fromkeys(b.host for b in members):
            mine = [b for b in members if b.host == host]
            out.append(OpRow(ranks[host], host, k, "burst", sum(b.bytes for b in mine),
                             min(b.start_ns for b in mine), max(b.end_ns for b in mine)))
    return FromTraffic(out, split)


def _by_rhythm(mine: list[OpRow]) -> list[list[OpRow]]:
    """One rank's ops (in time order) in iterations: by the number each carries, else
    every ``p`` ops (:func:`run_period`), the last op ending the last iteration."""
    if all(o.iteration is not None for o in mine):
        groups: dict[int, list[OpRow]] = {}
        for o in mine:
            groups.setdefault(o.iteration, []).append(o)  # type: ignore[arg-type]
        return sorted(groups.values(), key=lambda m: m[0].start_ns)
    p = run_period([(o.op, o.bytes) for o in mine])
    first = len(mine) % p or p
    return [mine[:first]] + [mine[k:k + p] for k in range(first, len(mine), p)]


def numbered(ops: list[OpRow]) -> list[OpRow]:
    """``ops`` with each one's iteration: as it carries it, else as the job's rhythm cuts
    its rank's ops (:func:`_by_rhythm`), so that warm-up iterations leave out their ops
    too."""
    out = []
    for rank in sorted({o.rank for o in ops}):
        mine = sorted((o for o in ops if o.rank == rank), key=lambda o: o.start_ns)
        out += [o._replace(iteration=k) for k, members in enumerate(_by_rhythm(mine))
                for o in members]
    return out


def iterations_from_ops(ops: list[OpRow]) -> list[tuple[int, str, lines.Iteration]]:
    """Iterations for a program that reported only its ops (or nothing: its traffic's
    ops): per rank, iteration k runs from the end of the communication of iteration k-1
    (the first: from its own start) to the end of its own; its ops' time is exposed
    communication, the rest compute. Ops share an iteration when they carry its number;
    without one, the job's rhythm cuts them (one op an iteration when it repeats one)."""
    out = []
    for rank in sorted({o.rank for o in ops}):
        mine = sorted((o for o in ops if o.rank == rank), key=lambda o: o.start_ns)
        previous_end = None
        for k, members in enumerate(_by_rhythm(mine)):
            first = min(o.start_ns for o in members)
            last = max(o.end_ns for o in members)
            start = first if previous_end is None else min(previous_end, first)
            busy = sum(o.end_ns - o.start_ns for o in members)
            out.append((rank, members[0].host,
                        lines.Iteration(k, start, last, min(busy, last - start))))
            previous_end = last
    return out


def compute_ns(it: lines.Iteration) -> int:
    """An iteration's compute: its time less its exposed communication."""
    return it.end_ns - it.start_ns - (it.exposed_ns or 0)


def ended_so_far(iterations: list[lines.Iteration], ops: list[lines.Op]
                 ) -> list[tuple[int, int]]:
    """One rank's iterations that have ended, as (iteration, compute ns), from what it
    reported so far while it runs: its iterations, else those its ops make
    (:func:`iterations_from_ops`) but the last, to which its next op may still belong."""
    if iterations:
        return [(it.i, compute_ns(it)) for it in iterations]
    made = iterations_from_ops([OpRow(0, "", o.i, o.op, o.bytes, o.start_ns, o.end_ns)
                                for o in ops])
    return [(it.i, compute_ns(it)) for _, _, it in made[:-1]]
