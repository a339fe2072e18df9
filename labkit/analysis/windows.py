"""The primitives every figure of a run is measured with: each op's time, each policy's
window, a cumulative counter's growth over a window, and an aggregate as a number.

Definitions (also in docs/data-model.md):

* an op's time runs from the first rank starting it to the last rank finishing it;
* the *window* of a policy runs from its first op's start to its last op's end;
  every rate (goodput, utilization, lane Mbit/s) is measured over it;
* counters are cumulative; a counter's value over the window is its last
  sample at or before the window's end minus its last sample at or before its start.
"""

from __future__ import annotations

import polars as pl


def op_times(collectives: pl.DataFrame) -> pl.DataFrame:
    """One row per (policy, op): start, end, duration in ms, and chunks found wrong."""
    return (
        collectives.group_by("policy", "op")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max(), pl.len().alias("ranks"),
             pl.col("wrong").sum())
        .with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
        .sort("policy", "op")
    )


def windows(ops: pl.DataFrame) -> dict[str, tuple[int, int]]:
    w = ops.group_by("policy").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    return {r["policy"]: (r["start_ns"], r["end_ns"]) for r in w.iter_rows(named=True)}


def counter_delta(frame: pl.DataFrame, keys: list[str], columns: list[str], start: int,
                  end: int) -> pl.DataFrame:
    """Per ``keys``, how much each cumulative counter in ``columns`` grew over [start, end]."""
    def at(t: int) -> pl.DataFrame:
        return (frame.filter(pl.col("t_ns") <= t).sort("t_ns").group_by(keys)
                .agg(pl.col(c).last() for c in columns))

    before, after = at(start), at(end)
    joined = after.join(before, on=keys, how="left", suffix="_0").fill_null(0)
    return joined.select(*keys, *[(pl.col(c) - pl.col(f"{c}_0")).alias(c) for c in columns])


def num(value: object) -> float:
    """A numeric column's aggregate (``mean``, ``sum``, ``max``, ``median``, ``quantile``)
    as a float. polars types an aggregate as any scalar a column can hold; labkit's are
    numbers, and an empty column's is null: an error here, as ``float(None)`` was."""
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"expected a number from a numeric column, got {value!r}")


def quantile(series: pl.Series, q: float) -> float:
    return num(series.quantile(q, interpolation="linear"))


def quantile_us(values: pl.Series, q: float) -> float | None:
    return None if values.is_empty() else quantile(values, q) / 1e3


def cdf(values: pl.Series, points: int = 400) -> tuple[list[float], list[float]]:
    """(sorted values, fraction of values at or below each): an empirical CDF, thinned to
    about ``points`` evenly spaced ranks (the first and last kept) for drawing."""
    v = values.drop_nulls().sort()
    n = len(v)
    keep = range(n) if n <= points else sorted({round(i * (n - 1) / (points - 1))
                                                 for i in range(points)})
    return [v[i] for i in keep], [(i + 1) / n for i in keep]


END_OF_TIME = 2**63 - 1


def event_pairs(events: pl.DataFrame | None, policy: str) -> list[tuple[dict, int]]:
    """``policy``'s faults (the ``events`` table; None or empty: none): each start row,
    with the time its event next ended (none: :data:`END_OF_TIME`), in time order."""
    if events is None or events.is_empty():
        return []
    open_at: dict[int, dict] = {}
    pairs = []
    for row in events.filter(pl.col("policy") == policy).sort("t_ns").iter_rows(named=True):
        if row["state"] == "start":
            open_at[row["event"]] = row
        elif (began := open_at.pop(row["event"], None)) is not None:
            pairs.append((began, row["t_ns"]))
    pairs += [(began, END_OF_TIME) for began in open_at.values()]
    return sorted(pairs, key=lambda p: p[0]["t_ns"])


def outside(frame: pl.DataFrame, spans: list[tuple[int, int]]) -> pl.DataFrame:
    """``frame``'s rows whose ``t_ns`` is in none of ``spans`` (start, end)."""
    for start, end in spans:
        frame = frame.filter(~pl.col("t_ns").is_between(start, end))
    return frame
