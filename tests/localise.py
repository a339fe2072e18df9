"""`make localise`: does a run's summary name the culprit of a fault it was never told of?

20 runs of topologies/straggler.yaml's job (its own event left out), each with one fault
chosen by its seed: a host's link at 40 % of its rate, the link losing 3 % of its
packets, or the host's rank computing twice as long, for three seconds from the second
one. The summary's culprit of the phase that lost the most time (labkit.analysis.culprits,
which never reads the events) must be the fault's host, of the right kind (a link's, or a
rank's). Writes data/bench/localise.json; exits 1 when fewer than 18 of 20 are named
right, or a run leaves anything behind.
"""

from __future__ import annotations

import copy
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import labkit
from labkit.model import scenario
from labkit.model.paths import scenario_file
from labkit.model.summary import Culprit
from tests.leaks import labkit_objects

REPO = Path(__file__).resolve().parents[1]
RUNS = 20
NEEDED = 18
KINDS = ("rate", "loss", "slow")
HOSTS = ("g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8")


def fault(seed: int, kind: str | None = None) -> tuple[str, str, dict]:
    """A fault chosen by ``seed`` (of ``kind``, if given): its kind, its host and the
    event that makes it."""
    rng = random.Random(seed)
    kind = kind or rng.choice(KINDS)
    host = rng.choice(HOSTS)
    leaf = "leaf1" if host in HOSTS[:4] else "leaf2"
    change = {"rate": {"link": [host, leaf], "rate_mbps": 40},
              "loss": {"link": [host, leaf], "loss_percent": 3},
              "slow": {"host": host, "slow": 2}}[kind]
    return kind, host, {"at_s": 2, "for_s": 3, **change}


def faulty(event: dict, seed: int, rate_factor: float = 1.0) -> scenario.Scenario:
    """straggler.yaml with ``event`` as its only one, at ``rate_factor`` times its rates
    (``emulation.rate_factor``: its compute and the event's times divided by it too)."""
    path = scenario_file("straggler")
    _, doc = scenario.read_yaml(path)
    doc = copy.deepcopy(doc)
    doc["events"], doc["seed"] = [event], seed
    doc["emulation"] = {**(doc.get("emulation") or {}), "rate_factor": rate_factor}
    return scenario.parse(doc, str(path))


def worst(culprits: tuple[Culprit, ...] | None) -> Culprit | None:
    """The phase that lost the most time: the one the run points at."""
    return max(culprits or (), key=lambda c: c.lost_ms, default=None)


def named_right(kind: str, host: str, found: Culprit | None) -> bool:
    return bool(found) and found.name == host and found.kind == (
        "rank" if kind == "slow" else "link")


def localise(seed: int, kind: str | None, out: Path, rate_factor: float = 1.0) -> dict:
    """One run with one fault; what it was and what the summary named."""
    kind, host, event = fault(seed, kind)
    run = labkit.run(faulty(event, seed, rate_factor), out=out)
    found = worst(run.summary.policies["isolated"].culprits)
    return {"seed": seed, "fault": kind, "host": host,
            "named": None if found is None else {"kind": found.kind, "name": found.name,
                                                 "evidence": found.evidence},
            "right": named_right(kind, host, found)}


def main() -> int:
    rows, leaks = [], []
    with tempfile.TemporaryDirectory(prefix="labkit-localise-") as tmp:
        for seed in range(1, RUNS + 1):
            t = time.monotonic()
            row = localise(seed, None, Path(tmp) / f"run{seed}")
            rows.append(row)
            left = {k: v for k, v in labkit_objects().items() if v}
            if left:
                leaks.append({"seed": seed, "left": left})
            named = row["named"] or {"kind": "nothing", "name": ""}
            print(f"{seed:2d} {row['fault']:4s} {row['host']}: named {named['kind']} "
                  f"{named['name']} {'right' if row['right'] else 'WRONG'} "
                  f"({time.monotonic() - t:.0f} s)", flush=True)
    right = sum(r["right"] for r in rows)
    out = REPO / "data" / "bench" / "localise.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": rows, "right": right, "leaks": leaks}, indent=1))
    print(f"named right in {right} of {RUNS} runs (needed {NEEDED}); {out}")
    return 0 if right >= NEEDED and not leaks else 1


if __name__ == "__main__":
    sys.exit(main())
