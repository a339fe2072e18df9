"""A routed fabric's routes as they change (``fabric.routing: bgp``), a feature of its
stack: every router's kernel routes to the hosts as the traffic starts and each change
after (:mod:`labkit.kernel.routewatch`), the ``routes`` table.
"""

from __future__ import annotations

from labkit.kernel.routewatch import RouteWatch
from labkit.model.scenario_spec import Policy, Scenario
from labkit.runs.features.base import Feature, Stack
from labkit.runs.result import PolicyResult


class Routes(Feature):
    """Every router's host routes, recorded as the kernel changes them."""

    records_only = True
    watch: RouteWatch | None = None

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return sc.fabric.routing == "bgp"

    def build(self, stack: Stack) -> None:
        self.watch = RouteWatch({r: stack.fabric.ns[r] for r in stack.topo.fabric.routers})

    def start(self) -> None:
        if self.watch:
            self.watch.start()

    def stop(self) -> None:
        if self.watch:
            self.watch.stop()

    def collect(self, result: PolicyResult) -> None:
        result.routes = sorted(self.watch.rows) if self.watch else []

    def close(self) -> None:
        self.stop()
