"""A job's slow phases, and what labkit's own telemetry blames for each: a straggler rank,
a host's link, or the bottleneck. It reads what the ranks recorded of each op (their
compute, when each began, their waits on the wire and in bubbles) and the bottleneck
port's counters, never the scenario's ``events``: those are the truth it is scored against
(tests/tier2/test_culprits.py).

*Slow.* An op (an All-Reduce, or a training job's iteration) is slow when it took
:data:`SLOW` times the job's usual op or more, the usual being the lower quartile of its
ops (a fault may last half the run). Slow ops one op apart or less are one phase; each
rank's figures in a phase are compared with its own in the ops that were not slow. A
phase's ``lost_ms`` (its ops' time beyond the usual) ranks it: the worst is the one to
look at first.

*Blame*, in this order:

* **the bottleneck**, when its port dropped packets during the phase, or held more than
  :data:`BACKLOG` times its usual backlog: the job queued there;
* **a rank** (a straggler), when one rank's compute, plus how late it began its ops,
  grew by at least :data:`STRAGGLER` of the time the phase's ops grew: the others waited
  for it, in bubbles;
* **a host's link**, otherwise: in a ring, rank r receives from rank r-1, so a slow or
  lossy link at host h delays the data into h's rank (over the link's downward half)
  and into the next rank (over its upward half). Of the rank whose input waited longest
  on the wire and its neighbour before or after it whose input waited at least
  :data:`ONE_WAY` as long, the first one's host is named;
* **a path** instead, when neither neighbour's input waited that long: only what the
  rank before sent it was late, on a link past either's own, as a leaf's link to a spine
  (``name`` is ``before->rank``). Unless packets were lost both ways: a lossy link's
  waits are a few long timeouts, so one direction's can dwarf the other's by chance,
  but its losses are not. When the rank itself sent (go-back-N) at least :data:`LOST_TOO`
  as many packets again an op as the one before it did, what it sent onward was lost
  too: its own link is named (both at least :data:`MIN_RESENT` packets an op; a rank
  past a lossy path sends nothing again).

What it cannot tell: which link on such a path (labkit's ring does not see the fabric's
routes), and a job whose ranks do not form a ring gets the pair whose waits grew most.
"""

from __future__ import annotations

import polars as pl

from labkit.analysis.windows import counter_delta, num, op_times
from labkit.model.summary import Culprit

SLOW = 1.2  # an op this many times the job's usual (lower quartile) op is slow
STRAGGLER = 0.5  # a rank whose own delay is this share of the phase's growth is to blame
BACKLOG = 2.0  # the bottleneck held this many times its usual backlog: it was to blame
MIN_BACKLOG_BYTES = 64 * 1024  # ... and at least this much
ONE_WAY = 0.3  # a neighbour whose input waited this share of the latest's shares its link
MIN_RESENT = 3.0  # packets sent again an op more than usual: losses, not a stray timeout
LOST_TOO = 0.1  # a rank sending this share of what the one before it sent again lost some too


def culprits(collectives: pl.DataFrame, queue: pl.DataFrame, port: str,
             link: str) -> tuple[Culprit, ...]:
    """Each slow phase of the job whose ranks' rows are ``collectives`` (one policy's),
    with its culprit; ``queue`` is the policy's port counters, ``port`` and ``link`` its
    bottleneck's."""
    if collectives.is_empty():
        return ()
    rows = collectives.with_columns(
        (pl.col("start_ns") - pl.col("start_ns").min().over("op")).alias("late_ns"))
    ops = op_times(rows)
    usual_ms = num(ops["ms"].quantile(0.25))
    slow = ops.filter(pl.col("ms") >= SLOW * usual_ms)
    if slow.is_empty() or slow.height == ops.height:
        return ()
    not_slow = ~pl.col("op").is_in(slow["op"].implode())
    usual, median_ms = rows.filter(not_slow), num(ops.filter(not_slow)["ms"].median())
    out = []
    for phase in _phases(slow["op"].to_list()):
        mine = ops.filter(pl.col("op").is_in(phase))
        grown_ms = num(mine["ms"].median()) - median_ms
        kind, name, evidence = _blame(rows.filter(pl.col("op").is_in(phase)), usual, queue,
                                      port, link, int(num(mine["start_ns"].min())),
                                      int(num(mine["end_ns"].max())), grown_ms)
        out.append(Culprit(from_op=phase[0], to_op=phase[-1],
                           slowdown=num(mine["ms"].median()) / usual_ms,
                           lost_ms=num((mine["ms"] - usual_ms).sum()), kind=kind,
                           name=name, evidence=evidence))
    return tuple(out)


def _phases(ops: list[int]) -> list[list[int]]:
    """Slow ops grouped into phases: one op between two slow ones does not end a phase
    (it is counted in it)."""
    out: list[list[int]] = []
    for op in ops:
        if out and op <= out[-1][-1] + 2:
            out[-1] += list(range(out[-1][-1] + 1, op + 1))
        else:
            out.append([op])
    return out


def _blame(phase: pl.DataFrame, usual: pl.DataFrame, queue: pl.DataFrame, port: str,
           link: str, start: int, end: int, grown_ms: float) -> tuple[str, str, str]:
    """What to blame for one phase (its ranks' rows), and the evidence."""
    mine = queue.filter(pl.col("port") == port)
    drops = num(counter_delta(mine, ["classid"], ["drops"], start, end)["drops"].sum()) \
        if mine.height else 0.0
    during = _backlog(mine.filter(pl.col("t_ns").is_between(start, end)))
    before = _backlog(mine.filter(~pl.col("t_ns").is_between(start, end)))
    if drops > 0 or during > max(BACKLOG * before, MIN_BACKLOG_BYTES):
        return ("bottleneck", link, f"its port {port} dropped {drops:.0f} packets and held "
                f"{during / 1024:.0f} KiB on average ({before / 1024:.0f} KiB otherwise)")
    per_rank = _grown(phase, usual)
    worst = per_rank.sort("own_ms", descending=True).row(0, named=True)
    if worst["own_ms"] >= STRAGGLER * grown_ms:
        waited = per_rank.filter(pl.col("rank") != worst["rank"])["bubble_ms"].mean()
        return ("rank", worst["host"],
                f"{worst['host']} computed and began its ops {worst['own_ms']:.0f} ms later "
                f"an op than in the others; the other ranks waited {num(waited):.0f} ms "
                "more in bubbles")
    ranks = per_rank.sort("rank")
    wire, hosts = ranks["wire_ms"].to_list(), ranks["host"].to_list()
    n = len(wire)
    k = max(range(n), key=lambda r: wire[r])  # the rank whose input was latest
    before, after = (k - 1) % n, (k + 1) % n
    if wire[after] >= ONE_WAY * wire[k]:  # into k and into the next: k's link
        host, into, onward, nxt = hosts[k], wire[k], wire[after], hosts[after]
    elif wire[before] >= ONE_WAY * wire[k]:  # into the one before and into k: its link
        host, into, onward, nxt = hosts[before], wire[before], wire[k], hosts[k]
    elif (again := ranks["resent"].to_list())[before] >= MIN_RESENT and \
            again[k] >= max(MIN_RESENT, LOST_TOO * again[before]):  # lost into k and out: k's link
        return ("link", hosts[k], f"the data into {hosts[k]} waited {wire[k]:.0f} ms more on "
                f"the wire an op than in the others, and {hosts[before]} and {hosts[k]} sent "
                f"{again[before]:.0f} and {again[k]:.0f} more packets again an op: lost on "
                f"their way into {hosts[k]} and out of it")
    else:  # only what the one before sent k was late: a link past its own
        return ("path", f"{hosts[before]}->{hosts[k]}",
                f"the data from {hosts[before]} into {hosts[k]} waited {wire[k]:.0f} ms more "
                f"on the wire an op than in the others, {hosts[before]}'s own input "
                f"{wire[before]:.0f} ms and {hosts[after]}'s {wire[after]:.0f} ms: a link on "
                f"the path from {hosts[before]} to {hosts[k]}, not either's own")
    return ("link", host, f"the data into {host} and {nxt} waited {into:.0f} and "
            f"{onward:.0f} ms more on the wire an op than in the others")


def _backlog(rows: pl.DataFrame) -> float:
    """The port's mean backlog (bytes, all its classes) over ``rows``' samples."""
    if rows.is_empty():
        return 0.0
    return num(rows.group_by("t_ns").agg(pl.col("backlog_bytes").sum())["backlog_bytes"].mean())


def _grown(phase: pl.DataFrame, usual: pl.DataFrame) -> pl.DataFrame:
    """Per rank, how much its own delay (compute, and how late it began), its waits on
    the wire and its bubbles grew an op (ms) in ``phase`` against ``usual``, and the
    packets it sent again (``resent``)."""
    def means(rows: pl.DataFrame) -> pl.DataFrame:
        rows = rows.with_columns(pl.col("compute_ns", "exposed_ns", "bubble_ns").fill_null(0))
        return rows.group_by("rank", "host").agg(
            ((pl.col("compute_ns") + pl.col("late_ns")).mean() / 1e6).alias("own_ms"),
            (pl.col("exposed_ns").mean() / 1e6).alias("wire_ms"),
            (pl.col("bubble_ns").mean() / 1e6).alias("bubble_ms"),
            pl.col("resent").cast(pl.Float64).mean())
    now, then = means(phase), means(usual)
    return now.join(then, on=["rank", "host"], suffix="_usual").select(
        "rank", "host", *((pl.col(c) - pl.col(f"{c}_usual")).alias(c)
                          for c in ("own_ms", "wire_ms", "bubble_ms", "resent")))
