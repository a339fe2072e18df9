"""A lossless fabric's pauses as a feature of a policy's stack."""

from __future__ import annotations

from labkit.kernel.pauser import Pauser
from labkit.model import lossless
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import PauseRow
from labkit.runs.features.base import Feature, Stack
from labkit.runs.result import PolicyResult


class Pausing(Feature):
    """A lossless fabric's pauses (:mod:`labkit.kernel.pauser`), from the traffic's start
    to its end."""

    pauser: Pauser | None = None
    started = False

    def __init__(self) -> None:
        self.rows: list[PauseRow] = []

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return bool(sc.fabric.lossless)

    def build(self, stack: Stack) -> None:
        self.pauser = Pauser(stack.fabric, lossless.queues(stack.topo, stack.sc.fabric.lossless,
                                                           stack.policy.port_layout))

    def start(self) -> None:
        assert self.pauser, "built"
        self.pauser.start()
        self.started = True

    def stop(self) -> None:
        if self.pauser and self.started:
            self.rows, self.started = self.pauser.stop(), False

    def notes(self) -> list[str]:
        """What the pauser could not do."""
        return self.pauser.notes() if self.pauser else []

    def collect(self, result: PolicyResult) -> None:
        result.pauses, result.pause_notes = self.rows, self.notes()

    def close(self) -> None:
        if self.pauser:
            self.pauser.close()
