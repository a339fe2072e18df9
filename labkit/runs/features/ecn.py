"""ECN step marking at the bottleneck ports as a feature of a policy's stack."""

from __future__ import annotations

from labkit.kernel.ecnmark import EcnMarks
from labkit.model.scenario_spec import Policy, Scenario
from labkit.runs.features.base import Feature, Stack
from labkit.runs.result import PolicyResult


class EcnMarking(Feature):
    """DCTCP's step marking at the bottleneck ports (``transport.ecn_k_packets``)."""

    marks: EcnMarks | None = None

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return bool(sc.transport.ecn_k_packets)

    def build(self, stack: Stack) -> None:
        k = stack.sc.transport.ecn_k_packets
        assert k, "wanted only with ecn_k_packets"
        self.marks = EcnMarks(stack.registry.add)
        for port in stack.topo.bottleneck_ports():
            h = stack.fabric.handle(port)
            self.marks.attach(h.ns, h.ifname, h.ifindex, k, port.link.mtu)

    def collect(self, result: PolicyResult) -> None:
        if self.marks:
            result.ecn_marks = self.marks.counts()

    def close(self) -> None:
        if self.marks:
            self.marks.close()
