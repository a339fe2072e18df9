"""``labkit sweep``'s figures: a collective's bandwidth across message sizes, measured and
printed as nccl-tests reports it (:func:`labkit.runs.experiment.run_sweep` runs the agents).

One row per size from ``-b`` to ``-e`` (times ``-f``), from ``-n`` timed ops after a
warm-up op. Columns follow nccl-tests: size,
count, type, redop, root, time (mean op time, µs), algbw = size / time, busbw =
algbw × the op's factor, and #wrong (chunks whose values did not add up). Rates
are in Mbit/s of the emulated links; with the scale factor (``--units real``) time and
rates are those of the fabric the scenario says they stand for, in nccl-tests' own
columns, and the emulated rates follow. ``size`` is nccl-tests' too, the larger of a
rank's send and receive buffers (:mod:`labkit.model.traffic.schedules` says per op), and
``count`` is nccl-tests' per-rank element count (``paramcount``: the whole message for
all_reduce, broadcast, reduce and sendrecv, one rank's part, 4-element aligned, for
all_gather, reduce_scatter, all_to_all, gather and scatter). ``redop`` and ``root`` are
what nccl-tests prints: ``sum`` for the reductions and for sendrecv (whose test prints
the ``-o`` it was given), ``none`` for the others; the root (0) for broadcast, reduce,
gather and scatter, -1 for the others. Only nccl-tests' out-of-place half is printed:
labkit has no separate in-place run, so it prints no in-place columns rather than repeat
these.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.model.topo import Topology
from labkit.model.traffic import schedules
from labkit.model.traffic.results import OpResult

COLUMNS = "#       size        count    type   redop    root      time    algbw    busbw  #wrong"
_UNITS_HEAD = "#        (B)   (elements)                               (us)"
UNITS = {"emulated": _UNITS_HEAD + " (Mbit/s) (Mbit/s)", "real": _UNITS_HEAD + "   (GB/s)   (GB/s)"}
EMULATED_AFTER = ("    algbw    busbw", "  (Mbit/s) (Mbit/s)")  # labkit's own, after #wrong
WORD_BYTES = 4  # float
ALIGN = 4  # nccl-tests aligns a rank's part to 4 elements
PER_RANK_OPS = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
SUM_OPS = ("all_reduce", "reduce_scatter", "reduce", "sendrecv")  # redop "sum", as nccl-tests


def real_gbps(mbps: float, scale: float) -> float:
    """Emulated Mbit/s as GB/s of the fabric they stand for (1 emulated Mbit/s = scale)."""
    return mbps * scale / 8000


def param_count(op: str, size: int, nranks: int) -> int:
    """nccl-tests' ``count`` column: elements per rank's call."""
    count = size // WORD_BYTES
    if op in PER_RANK_OPS:
        return count // (ALIGN * nranks) * ALIGN
    return count


def header(scale: float | None = None) -> list[str]:
    """nccl-tests' column heads; with ``scale`` (real units) the emulated rates follow."""
    if not scale:
        return [COLUMNS, UNITS["emulated"]]
    return [COLUMNS + EMULATED_AFTER[0], UNITS["real"] + EMULATED_AFTER[1]]


def footer(rows: list[Row], scale: float | None = None) -> list[str]:
    """nccl-tests' closing lines, to the letter, the average in the busbw column's units."""
    wrong = sum(r.wrong for r in rows)
    avg = sum(r.busbw_mbps for r in rows) / len(rows)
    return [f"# Out of bounds values : {wrong} {'OK' if not wrong else 'FAILED'}",
            f"# Avg bus bandwidth    : {real_gbps(avg, scale) if scale else avg:g} ", "#"]


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float
    algbw_mbps: float
    busbw_mbps: float
    wrong: int
    link_mbps: float
    retransmits: int = 0  # packets go-back-N sent again, all ranks, warm-up included
    algo: str = ""  # the algorithm that ran (what ``auto`` chose at this size)

    def line(self, scale: float | None = None) -> str:
        """The row as nccl-tests prints it. With ``scale`` (the scenario's scale factor)
        time and rates are the modelled fabric's — µs ÷ scale, GB/s — and the emulated
        Mbit/s follow #wrong, so a parser of nccl-tests' columns reads real units."""
        time_us, algbw, busbw = self.time_us, self.algbw_mbps, self.busbw_mbps
        if scale:
            time_us = time_us / scale
            algbw, busbw = real_gbps(algbw, scale), real_gbps(busbw, scale)
        out = (f"{self.size:12d} {self.count:12d} {self.type:>7} {self.redop:>7} "
               f"{self.root:7d} {time_us:9.{0 if not scale else 2}f} {algbw:8.2f} "
               f"{busbw:8.2f} {self.wrong:7d}")
        if scale:
            out += f" {self.algbw_mbps:8.2f} {self.busbw_mbps:8.2f}"
        return out


def sizes(begin: int, end: int, factor: int) -> list[int]:
    if begin <= 0 or end < begin or factor < 2:
        raise ValueError("need 0 < -b <= -e and -f >= 2")
    out, s = [], begin
    while s <= end:
        out.append(s)
        s *= factor
    return out


def link_rate(topo: Topology, ranks: tuple[str, ...]) -> float:
    """The slowest link any two ranks' traffic crosses."""
    return min(link.rate_mbps for a in ranks for b in ranks if a != b
               for link in topo.links_on_path(a, b))


def measure(op: str, n: int, size: int, ops: list[OpResult], link_mbps: float,
            retransmits: int = 0, algo: str = "") -> Row:
    """One row from every rank's ops (op 0 is the warm-up and does not count)."""
    spans: dict[int, tuple[int, int, int]] = {}
    for o in ops:
        if o.op == 0:
            continue
        lo, hi, wrong = spans.get(o.op, (o.start_ns, o.end_ns, 0))
        spans[o.op] = (min(lo, o.start_ns), max(hi, o.end_ns), wrong + o.wrong)
    time_us = sum(hi - lo for lo, hi, _ in spans.values()) / len(spans) / 1e3
    algbw = size * 8 / time_us  # bits per microsecond = Mbit/s
    return Row(size, param_count(op, size, n), "float", "sum" if op in SUM_OPS else "none",
               schedules.ROOT if op in schedules.ROOTED else -1, time_us, algbw,
               algbw * schedules.busbw_factor(op, n), sum(w for *_, w in spans.values()),
               link_mbps, retransmits, algo)
