"""Lossy links' droppers as a feature of a policy's stack."""

from __future__ import annotations

from labkit.kernel import loss
from labkit.runs.features.base import Feature, Stack
from labkit.runs.result import PolicyResult


class LossyLinks(Feature):
    """Packet loss on purpose, on the links that ask for it (:mod:`labkit.kernel.loss`)."""

    links: loss.LossyLinks | None = None

    def build(self, stack: Stack) -> None:
        self.links = loss.attach(stack.topo, stack.fabric, record=stack.registry.add)

    def collect(self, result: PolicyResult) -> None:
        if self.links:
            result.loss_drops = self.links.drops()

    def close(self) -> None:
        if self.links:
            self.links.close()
