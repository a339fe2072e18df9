"""How a routed fabric (``fabric.routing: bgp``) answered each link going down: from the
``events`` table (when the link went down and came back) and the ``routes`` table (every
router's kernel routes to the hosts, as they changed), when the routes moved off the link
and when they came back. A route that changed while the link was down is counted as
moved by it: labkit's events come one at a time on a link (a scenario may overlap two;
their changes are then counted for each).
"""

from __future__ import annotations

import polars as pl

from labkit.model.summary import Reroute

MS = 1e6


def reroutes(events: pl.DataFrame, routes: pl.DataFrame, start: int) -> tuple[Reroute, ...]:
    """Each time a link went down in the policy's ``events`` (its window starting at
    ``start``, ns), what its ``routes`` did."""
    if routes.is_empty():
        return ()
    changes = routes.filter(pl.col("change") != "start").sort("t_ns")
    downs = events.filter(pl.col("change") == "down").sort("t_ns")
    starts = downs.filter(pl.col("state") == "start")
    out = []
    for row in starts.iter_rows(named=True):
        t0 = row["t_ns"]
        t1 = _first(downs.filter((pl.col("event") == row["event"]) &
                                 (pl.col("state") == "end") & (pl.col("t_ns") > t0)))
        during = changes.filter(pl.col("t_ns") >= t0)
        if t1 is not None:
            during = during.filter(pl.col("t_ns") < t1)
        out.append(Reroute(
            event=row["event"], link=row["link"], at_s=(t0 - start) / 1e9,
            routers=during["router"].n_unique(),
            moved_ms=_ms(_first(during), t0),
            converged_ms=_ms(_first(during.reverse()), t0),
            restored_ms=None if t1 is None else _restored(changes, during, starts, t1)))
    return tuple(out)


def _restored(changes: pl.DataFrame, during: pl.DataFrame, starts: pl.DataFrame,
              t1: int) -> float | None:
    """When the last of the routes that moved while the link was down had first changed
    again after it came up at ``t1`` (ms after), before a link went down again; None if
    none did. Any change counts as its coming back: with one fault at a time, the next
    change of a route that moved off a link is its return."""
    after = changes.filter(pl.col("t_ns") >= t1)
    if (again := _first(starts.filter(pl.col("t_ns") > t1))) is not None:
        after = after.filter(pl.col("t_ns") < again)
    back = after.join(during.select("router", "dst").unique(), on=["router", "dst"])
    first_back = back.group_by("router", "dst").agg(pl.col("t_ns").min()).sort("t_ns")
    return _ms(_first(first_back.reverse()), t1)


def _first(rows: pl.DataFrame) -> int | None:
    """The first of ``rows``' times (they are sorted), or None."""
    return int(rows["t_ns"][0]) if rows.height else None


def _ms(t: int | None, since: int) -> float | None:
    return None if t is None else (t - since) / MS
