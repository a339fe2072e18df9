"""A controller over the hosts' valves as a feature of a policy's stack."""

from __future__ import annotations

from labkit.control.session import ControlSession
from labkit.model.scenario_spec import Policy, Scenario
from labkit.runs.features.base import Feature, Stack
from labkit.runs.features.lanes import Lanes
from labkit.runs.result import PolicyResult


class Control(Feature):
    """A policy's controller over the hosts' valves, fed the fabric's telemetry
    (:class:`labkit.control.session.ControlSession`)."""

    session: ControlSession | None = None
    running = False

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return policy.controller is not None

    def load(self, stack: Stack) -> None:
        self.session = ControlSession(stack.sc, stack.topo, stack.policy,
                                      stack.need(Lanes, "a controller").config_map,
                                      stack.registry.add)

    def build(self, stack: Stack) -> None:
        controller = stack.policy.controller
        assert self.session and controller is not None, "loaded"
        self.session.build(stack.fabric, stack.controllers[controller])

    def start(self) -> None:
        assert self.session, "built"
        self.session.start()
        self.running = True

    def stop(self) -> None:
        if self.session and self.running:
            self.session.stop()
            self.running = False

    def collect(self, result: PolicyResult) -> None:
        if self.session:
            result.controller = self.session.valves.decisions
            result.control = self.session.summary_counters()

    def close(self) -> None:
        if self.session:
            self.session.close()
