"""The pure half of ``algo: auto``: which All-Reduce algorithm to run at a message size, and
in which order the ring visits the ranks, from the fabric and from sweeps measured on it.

* :func:`ring_order` puts the ranks of one leaf next to each other, so the ring crosses
  between leaves as few times as it can (once per leaf), and orders the leaves so that
  consecutive ones are few router hops apart.
* :class:`Model` is a cost model per algorithm, ``time(size) = alpha + size / beta``, fitted
  from the rows of sweeps (:mod:`labkit.analysis.nccltests`, as
  :func:`labkit.runs.rundir.load_sweeps` returns them) measured on one fabric;
  :meth:`Model.choose` picks the algorithm with the smallest predicted time and says why in
  one sentence.
* :func:`fabric_key` names what a model depends on (the fabric's graph, its link rates,
  MTUs, buffers, loss and lossless lanes; not its traffic), so a model is only used for the
  fabric it was measured on.
* :func:`regret` and :func:`leave_one_out` measure how far the model's choices are from the
  best algorithm measured (1.0: the best one).

Units: sizes in bytes (nccl-tests' ``size``), times in seconds (sweep rows hold
``time_us``). Nothing here touches the kernel or runs a sweep.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from labkit.model import inputs
from labkit.model.fabric_spec import FabricSpec
from labkit.model.topo import Topology
from labkit.model.traffic import schedules

ALGOS = schedules.ALGOS["all_reduce"]
EXACT_ORDER_MAX_GROUPS = 8  # up to 8 leaves every order is tried (7! = 5040), beyond: greedy
FORMAT = "labkit-autotune-model"
VERSION = 1


# --- ring order ---------------------------------------------------------------------------


def ring_order(topo: Topology, ranks: Sequence[str]) -> tuple[str, ...]:
    """``ranks`` reordered so that the ring's hops stay under one leaf as much as possible.

    Hosts are grouped by the router they attach to (their leaf), in the order given within
    a group; the groups follow each other in the order whose closed ring of leaves has the
    fewest router hops from each group's leaf to the next one's (every order is tried up
    to :data:`EXACT_ORDER_MAX_GROUPS` leaves, nearest next leaf first beyond), ties going
    to the order of the groups' first hosts in ``ranks``. The first rank stays first.

    Crossings: with hosts on ``k`` leaves (``k >= 2``) the ring crosses between leaves
    exactly ``k`` times, one hop from the last host of each group to the first of the next
    (:func:`crossings`); with one leaf, never. Fewer is impossible: each leaf's group has to
    be entered once and left once.

    ECMP needs nothing more on a two-tier Clos (every leaf pair joined through one spine
    layer). The groups form one cycle, so every leaf is the source of exactly one crossing
    and the destination of exactly one: the crossings are distinct directed leaf pairs, and
    moreover no two of them leave the same leaf or enter the same leaf. A crossing
    from leaf A to leaf B uses one uplink out of A and one spine port down into B, whichever
    spine ECMP hashes it to; so every uplink and every downlink carries at most one ring
    flow in each direction, however the hash falls, and there is no placement to choose.
    (Its acknowledgements run the other way, and with two leaves they share the links of
    the opposite crossing's data: small packets, not a second flow's worth of bytes.)
    On deeper fabrics (pods joined by a third tier) two crossings can meet on a link
    between spine layers: this order keeps hops few but does not exclude that.
    """
    leaf_of = {h.name: h.router for h in topo.fabric.hosts}
    for r in ranks:
        if r not in leaf_of:
            raise ValueError(f"{r!r} is not a host of this fabric (hosts: "
                             f"{', '.join(leaf_of)})")
    if len(set(ranks)) != len(ranks):
        raise ValueError("a rank is listed twice")
    groups: dict[str, list[str]] = {}
    for r in ranks:
        groups.setdefault(leaf_of[r], []).append(r)
    leaves = list(groups)
    hops = topo.router_hops()
    order = (_exact_cycle(leaves, hops) if len(leaves) <= EXACT_ORDER_MAX_GROUPS
             else _greedy_cycle(leaves, hops))
    return tuple(r for leaf in order for r in groups[leaf])


def _exact_cycle(leaves: list[str], hops: dict[str, dict[str, int]]) -> list[str]:
    """The first leaf fixed, the cheapest closed order; permutations come in lexicographic
    order of the leaves' positions, so the first cheapest one wins ties by given order."""
    best, best_cost = leaves, None
    for rest in itertools.permutations(leaves[1:]):
        cycle = [leaves[0], *rest]
        cost = sum(hops[a][b] for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True))
        if best_cost is None or cost < best_cost:
            best, best_cost = cycle, cost
    return best


def _greedy_cycle(leaves: list[str], hops: dict[str, dict[str, int]]) -> list[str]:
    """From the first leaf, the nearest leaf not yet visited next (ties: given order)."""
    cycle, left = [leaves[0]], leaves[1:]
    while left:
        nxt = min(left, key=lambda leaf: hops[cycle[-1]][leaf])  # min keeps the first
        cycle.append(nxt)
        left.remove(nxt)
    return cycle


def crossings(topo: Topology, order: Sequence[str]) -> list[tuple[str, str]]:
    """The ring's hops between leaves, as (from leaf, to leaf), ring closure included."""
    leaf_of = {h.name: h.router for h in topo.fabric.hosts}
    if len(order) < 2:
        return []
    pairs = zip(order, [*order[1:], order[0]], strict=True)
    return [(leaf_of[a], leaf_of[b]) for a, b in pairs if leaf_of[a] != leaf_of[b]]


# --- what a model depends on --------------------------------------------------------------


def model_key(fabric: FabricSpec, ranks: int, gso_packets: int = 1) -> str:
    """What a tuning's model depends on besides the fabric: how many ranks ran (each
    algorithm's steps and ring crossings follow from it) and how many packets travel as
    one GSO run (it changes every time measured): :func:`fabric_key` of both."""
    return hashlib.sha256(f"{fabric_key(fabric)}/{ranks}/{gso_packets}".encode()
                          ).hexdigest()[:12]


def fabric_key(fabric: FabricSpec) -> str:
    """A short stable hash (12 hex digits) of what collective times depend on: routers,
    hosts and the router each attaches to, links with rate, MTU, buffer and loss, lossless
    lanes. Order counts: it sets addresses (:mod:`labkit.model.topo`), and ECMP hashes on them.
    Traffic, host roles, bottleneck labels (where labkit watches, not what the fabric is)
    and the scale factor are left out."""
    doc = {
        "routers": list(fabric.routers),
        "hosts": [[h.name, h.router] for h in fabric.hosts],
        "links": [[lk.a, lk.b, float(lk.rate_mbps), lk.mtu, lk.buffer_kb,
                   float(lk.loss_percent)] for lk in fabric.links],
        "lossless": list(fabric.lossless),
        "nvlinks": [[lk.a, lk.b, float(lk.rate_mbps), lk.mtu, lk.buffer_kb]
                    for lk in fabric.nvlinks],
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --- the cost model -----------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """One algorithm's ``time(size) = alpha_s + size / beta_bytes_per_s`` (beta is
    infinite when the times did not grow with size)."""

    alpha_s: float
    beta_bytes_per_s: float
    sizes: tuple[int, ...]  # the distinct sizes it was fitted on, ascending
    rms_rel_error: float  # root mean square of (predicted - measured) / measured

    def predict(self, size: int) -> float:
        return self.alpha_s + size / self.beta_bytes_per_s


@dataclass(frozen=True)
class Choice:
    algo: str
    predicted: float  # seconds
    alternatives: tuple[tuple[str, float], ...]  # the other algorithms, fastest first
    reason: str
    extrapolated: bool = False  # the size lies outside some algorithm's measured sizes


def _points(algo: str, rows: Iterable[dict]) -> list[tuple[int, float]]:
    """(size, seconds) of the rows whose data came out right (``wrong`` 0), averaged per
    size: a result with wrong values timed something other than the collective."""
    by_size: dict[int, list[float]] = {}
    for row in rows:
        if row.get("wrong", 0):
            continue
        if not row["time_us"] > 0:
            raise ValueError(f"{algo}: a row at size {row['size']} has time_us "
                             f"{row['time_us']!r}")
        by_size.setdefault(int(row["size"]), []).append(row["time_us"] / 1e6)
    return sorted((s, sum(t) / len(t)) for s, t in by_size.items())


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(alpha, 1/beta) by weighted least squares, both kept >= 0.

    The weights are 1/t²: the fit minimises the sum of squared *relative* errors. The
    times of a sweep span two orders of magnitude (tens of ms at 64 KiB, seconds at
    4 MiB); an unweighted fit would spend itself on the largest sizes and leave alpha, the
    small sizes' whole story, to chance. Relative errors let every size count alike, and
    they are what a choice is judged by (within 5 % of the best). It stays a linear
    problem in (alpha, 1/beta), solved in closed form, unlike a fit in log space.
    When the unconstrained optimum has a negative term, the optimum with the terms kept
    non-negative lies on a boundary: the better of alpha = 0 and 1/beta = 0.
    """
    w = [1 / t ** 2 for _, t in points]
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, points, strict=True))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points, strict=True))
    st = sum(wi * t for wi, (_, t) in zip(w, points, strict=True))
    sxt = sum(wi * x * t for wi, (x, t) in zip(w, points, strict=True))
    det = sw * sxx - sx * sx
    candidates = [(0.0, sxt / sxx), (st / sw, 0.0)]  # alpha = 0; 1/beta = 0
    if det > 0:
        candidates.append(((sxx * st - sx * sxt) / det, (sw * sxt - sx * st) / det))

    def loss(c: tuple[float, float]) -> float:
        return sum(wi * (c[0] + c[1] * x - t) ** 2 for wi, (x, t) in zip(w, points, strict=True))

    return min((c for c in candidates if c[0] >= 0 and c[1] >= 0), key=loss)


@dataclass(frozen=True)
class Model:
    """Fitted cost models of All-Reduce algorithms on the fabric named by ``fabric_key``."""

    fabric_key: str
    fits: Mapping[str, Fit]

    @classmethod
    def fit(cls, sweeps: Mapping[str, Iterable[dict]], fabric_key: str) -> Model:
        """Fit each algorithm's sweep rows (``{algo: [row, ...]}``; an algorithm needs rows
        at two sizes at least). The sweeps must all come from the fabric ``fabric_key``
        names: that is the caller's word, the rows do not say."""
        if not sweeps:
            raise ValueError("no sweeps to fit")
        fits = {}
        for algo in sorted(sweeps, key=_algo_rank):
            if algo not in ALGOS:
                raise ValueError(f"{algo!r} is not an All-Reduce algorithm (known: "
                                 f"{', '.join(ALGOS)}); pass one sweep per algorithm, all "
                                 "measured on one fabric")
            points = _points(algo, sweeps[algo])
            if len(points) < 2:
                raise ValueError(f"{algo}: rows at {len(points)} size(s) without wrong values; "
                                 "a fit needs two sizes at least")
            alpha, slope = _fit(points)
            rms = math.sqrt(sum(((alpha + slope * x - t) / t) ** 2 for x, t in points)
                            / len(points))
            fits[algo] = Fit(alpha, 1 / slope if slope else math.inf,
                             tuple(x for x, _ in points), rms)
        return cls(fabric_key, fits)

    @property
    def algos(self) -> tuple[str, ...]:
        return tuple(self.fits)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Every size some algorithm was fitted on, ascending."""
        return tuple(sorted({s for f in self.fits.values() for s in f.sizes}))

    def predict(self, algo: str, size: int) -> float:
        """Predicted seconds of one All-Reduce of ``size`` bytes with ``algo``."""
        if algo not in self.fits:
            raise KeyError(f"no fit for {algo!r} (fitted: {', '.join(self.fits)})")
        return self.fits[algo].predict(size)

    def choose(self, size: int, allowed: Sequence[str] | None = None) -> Choice:
        """The algorithm with the smallest predicted time at ``size`` (ties: the order of
        :data:`ALGOS`) among ``allowed`` (default: every one fitted), the others'
        predictions and why, in one sentence."""
        if size <= 0:
            raise ValueError(f"a size must be positive, got {size}")
        ranked = sorted((a for a in self.fits if allowed is None or a in allowed),
                        key=lambda a: (self.predict(a, size), _algo_rank(a)))
        if not ranked:
            raise ValueError(f"none of {', '.join(allowed or ())} was fitted")
        best, others = ranked[0], tuple((a, self.predict(a, size)) for a in ranked[1:])
        outside = [a for a, f in self.fits.items() if not f.sizes[0] <= size <= f.sizes[-1]]
        measured = f"{_size(self.sizes[0])} to {_size(self.sizes[-1])}"
        where = (f"extrapolated beyond the sizes measured on this fabric, {measured}"
                 if outside else f"fitted from sweeps of this fabric, {measured}")
        against = (f" against {_and([f'{a} {_time(t)}' for a, t in others])}" if others
                   else ", the only algorithm measured")
        reason = (f"{best}: {_time(self.predict(best, size))} predicted at {_size(size)}"
                  f"{against} ({where})")
        return Choice(best, self.predict(best, size), others, reason, bool(outside))

    def check(self, fabric_key: str) -> None:
        """Raise ValueError unless this model was fitted on the fabric ``fabric_key``."""
        if fabric_key != self.fabric_key:
            raise ValueError(f"this model was fitted on fabric {self.fabric_key}, not "
                             f"{fabric_key}: sweep this fabric and fit a model of its own")

    def to_json(self) -> str:
        doc = {"format": FORMAT, "version": VERSION, "fabric_key": self.fabric_key,
               "op": "all_reduce", "sizes": list(self.sizes),
               "algos": {a: {"alpha_s": f.alpha_s,
                             "beta_bytes_per_s": None if math.isinf(f.beta_bytes_per_s)
                             else f.beta_bytes_per_s,
                             "sizes": list(f.sizes), "rms_rel_error": f.rms_rel_error}
                         for a, f in self.fits.items()}}
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, fabric_key: str | None = None, file: str = "the model"
                  ) -> Model:
        """A model saved by :meth:`to_json` (read from ``file``); with ``fabric_key``, only
        if it was fitted on that fabric (ValueError otherwise)."""
        doc = inputs.json_document(text, file)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a saved autotune model (no \"format\": \"{FORMAT}\")")
        if doc.get("version") != VERSION:
            raise ValueError(f"autotune model version {doc.get('version')!r}; this labkit "
                             f"reads version {VERSION}")
        try:
            fits = {a: Fit(float(f["alpha_s"]),
                           math.inf if f["beta_bytes_per_s"] is None
                           else float(f["beta_bytes_per_s"]),
                           tuple(int(s) for s in f["sizes"]), float(f["rms_rel_error"]))
                    for a, f in doc["algos"].items()}
            model = cls(str(doc["fabric_key"]), fits)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"a saved autotune model with a missing or bad field: "
                             f"{type(exc).__name__}: {exc}") from None
        if fabric_key is not None:
            model.check(fabric_key)
        return model


# --- how good the choices are -------------------------------------------------------------


def regret(model: Model, sweeps: Mapping[str, Iterable[dict]],
           sizes: Iterable[int] | None = None) -> list[dict]:
    """Per size measured by every algorithm of ``sweeps`` (or those of ``sizes``): the
    algorithm ``model`` chooses, the best one measured, and ``relative``: the chosen one's
    measured time over the best one's (1.0: the best; None if the chosen one was not
    measured at that size)."""
    measured = {algo: dict(_points(algo, rows)) for algo, rows in sweeps.items()}
    common = set.intersection(*(set(m) for m in measured.values())) if measured else set()
    out = []
    for size in sorted(common if sizes is None else set(sizes) & common):
        times = {a: m[size] for a, m in measured.items()}
        best = min(times, key=lambda a: (times[a], _algo_rank(a)))
        choice = model.choose(size)
        mine = times.get(choice.algo)
        out.append({"size": size, "chosen": choice.algo, "best": best,
                    "relative": None if mine is None else mine / times[best],
                    "predicted_s": choice.predicted, "measured_s": times,
                    "extrapolated": choice.extrapolated, "reason": choice.reason})
    return out


def leave_one_out(sweeps: Mapping[str, Iterable[dict]], fabric_key: str) -> list[dict]:
    """:func:`regret` at each size measured by every algorithm, each time from a model
    fitted on the other sizes only: how the model does at a size it has not seen."""
    sweeps = {a: list(rows) for a, rows in sweeps.items()}
    common = set.intersection(*({int(r["size"]) for r in rows} for rows in sweeps.values()))
    out = []
    for size in sorted(common):
        rest = {a: [r for r in rows if int(r["size"]) != size] for a, rows in sweeps.items()}
        out += regret(Model.fit(rest, fabric_key), sweeps, [size])
    return out


# --- words --------------------------------------------------------------------------------


def _algo_rank(algo: str) -> tuple[int, str]:
    return (ALGOS.index(algo) if algo in ALGOS else len(ALGOS), algo)


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
