"""A job's rhythm: the pattern of collectives it repeats once per iteration.

A training loop issues the same collectives in the same order every iteration (a plain
``all_reduce`` after each step, a tensor-parallel layer's pair, a pipeline's sends). An
op's *signature* is its name and size; the job's *period* is the shortest ``p`` for which
its signatures repeat every ``p`` ops. :class:`Rhythm` follows it online, op by op, and
says which op ends an iteration: labkit's start-up hook (:mod:`labkit.traffic.torchhook`)
cuts an unmodified job's steps with it. Standard library only: a job's own interpreter
imports it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

MAX_PERIOD = 32  # ops per iteration, at most, that a rhythm is looked for in
REPEATS = 2  # a period counts once its pattern has been seen this many times in a row


def repeats_every(signatures: Sequence[Hashable], p: int, repeats: int = REPEATS) -> bool:
    """Whether the last ``repeats * p`` signatures repeat every ``p``."""
    n = len(signatures)
    if n < repeats * p:
        return False
    tail = signatures[n - repeats * p:]
    return all(tail[i] == tail[i + p] for i in range(len(tail) - p))


def period(signatures: Sequence[Hashable], repeats: int = REPEATS) -> int | None:
    """The shortest ``p`` (at most :data:`MAX_PERIOD`) such that the last ``repeats * p``
    signatures repeat every ``p``; None when there is none yet."""
    return next((p for p in range(1, min(MAX_PERIOD, len(signatures) // repeats) + 1)
                 if repeats_every(signatures, p, repeats)), None)


def run_period(signatures: Sequence[Hashable], stray: float = 0.1) -> int:
    """The period of a whole run's ops, found afterwards: the shortest ``p`` for which all
    but ``stray`` of the ops (or 2) match the one ``p`` before (a preamble or an
    evaluation pass breaks it here and there); 1 when there is none."""
    n = len(signatures)
    for p in range(1, min(MAX_PERIOD, n // REPEATS) + 1):
        if sum(signatures[i] != signatures[i + p] for i in range(n - p)) <= max(
                2, stray * (n - p)):
            return p
    return 1


class Rhythm:
    """A job's ops as they end, and the ones that end an iteration: once a period ``p`` is
    established, every ``p``-th op after the first it was seen at. A pattern that breaks
    (an evaluation pass, a checkpoint's barrier) ends nothing until it repeats again; a
    period found holds for as long as it repeats."""

    def __init__(self) -> None:
        self.signatures: list[Hashable] = []
        self.p: int | None = None
        self._since = 0  # ops since the last iteration's end

    def ended(self, signature: Hashable) -> bool:
        """Note an op that ended; True when it ends an iteration."""
        self.signatures.append(signature)
        del self.signatures[:-REPEATS * MAX_PERIOD]
        self._since += 1
        # the period found holds while it repeats (a shorter one inside it may show up in
        # the tail: A A B A A B ends in A A)
        p = self.p if self.p and repeats_every(self.signatures, self.p) else \
            period(self.signatures)
        if p is None:
            self.p = None
            return False
        if p != self.p:  # found (or changed): the op that shows it ends an iteration
            self.p, self._since = p, 0
            return True
        if self._since >= p:
            self._since = 0
            return True
        return False
