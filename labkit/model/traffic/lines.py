"""The line protocol a user's program speaks to labkit: JSON lines on its stdout.

A rank of a ``kind: program`` entry may print, among its own output, one JSON object
per line with a ``"labkit"`` key; labkit keeps the rank's whole stdout and reads these
lines back after the run. Times are ``CLOCK_MONOTONIC`` nanoseconds (Python's
``time.monotonic_ns()``, C's ``clock_gettime(CLOCK_MONOTONIC)``): one clock for every
namespace on the machine, the one labkit's own ranks and eBPF programs use::

    {"labkit": "iteration", "i": 3, "start_ns": 1200, "end_ns": 1900, "exposed_ns": 400}
    {"labkit": "op", "i": 3, "op": "all_reduce", "bytes": 2097152, "start_ns": 1500, "end_ns": 1900}

* ``iteration``: one training step of this rank. ``exposed_ns`` (optional): the part of
  it spent waiting for communication; the rest was compute.
* ``op``: one collective op of this rank (``op`` names it, ``bytes`` its size, both
  optional), within iteration ``i`` (optional).

``i`` counts from 0; without it a line takes the next number of its kind. A line that
starts like one of these but is not is counted, never fatal. :mod:`labkit.torch`
prints these for a PyTorch job. Standard library only: a job's own interpreter imports
it.
"""

from __future__ import annotations

import json
from typing import NamedTuple

KEY = "labkit"


class Iteration(NamedTuple):
    i: int
    start_ns: int
    end_ns: int
    exposed_ns: int | None


class Op(NamedTuple):
    i: int | None
    op: str
    bytes: int | None
    start_ns: int
    end_ns: int


def iteration_line(i: int, start_ns: int, end_ns: int, exposed_ns: int | None = None) -> str:
    doc = {KEY: "iteration", "i": i, "start_ns": start_ns, "end_ns": end_ns}
    if exposed_ns is not None:
        doc["exposed_ns"] = exposed_ns
    return json.dumps(doc)


def op_line(op: str, start_ns: int, end_ns: int, nbytes: int | None = None,
            i: int | None = None) -> str:
    doc = {KEY: "op", "op": op, "start_ns": start_ns, "end_ns": end_ns}
    if nbytes is not None:
        doc["bytes"] = nbytes
    if i is not None:
        doc["i"] = i
    return json.dumps(doc)


def _count(value, low: int = 0) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= low \
        else None


def parse(text: str) -> tuple[list[Iteration], list[Op], int]:
    """The iterations and ops a rank printed, and how many lines looked like the protocol
    but were not valid (a bad time, a missing field)."""
    iterations: list[Iteration] = []
    ops: list[Op] = []
    bad = 0
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{") or f'"{KEY}"' not in line:
            continue
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or "[[[..." past Python's stack
            bad += 1
            continue
        kind = doc.get(KEY) if isinstance(doc, dict) else None
        start, end = _count(doc.get("start_ns"), 1), _count(doc.get("end_ns"), 1)
        if kind not in ("iteration", "op") or start is None or end is None or end < start:
            bad += 1
            continue
        i = _count(doc.get("i"))
        if kind == "iteration":
            exposed = _count(doc.get("exposed_ns"))
            if "exposed_ns" in doc and (exposed is None or exposed > end - start):
                bad += 1
                continue
            iterations.append(Iteration(len(iterations) if i is None else i, start, end,
                                        exposed))
        else:
            name = doc.get("op", "op")
            ops.append(Op(i, name if isinstance(name, str) and name else "op",
                          _count(doc.get("bytes")), start, end))
    return iterations, ops, bad
