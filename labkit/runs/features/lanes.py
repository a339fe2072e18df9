"""The lane classifier as a feature of a policy's stack."""

from __future__ import annotations

from labkit.kernel.fabric import port_key
from labkit.kernel.lanes import Classifier
from labkit.runs.features.base import Feature, Stack, pin_dir, watched_ports


class Lanes(Feature):
    """The lane classifier on every router port (under the FIFO layouts it only counts),
    watching the bottleneck ports' lanes when the policy has telemetry; pinned."""

    classifier: Classifier | None = None

    def load(self, stack: Stack) -> None:
        self.classifier = Classifier(stack.sc.lanes, stack.policy.port_layout,
                                     record=stack.registry.add, path=stack.classifier_object)
        for port in watched_ports(stack.topo) if stack.telemetry else []:
            self.classifier.watch(port_key(port))

    def build(self, stack: Stack) -> None:
        assert self.classifier, "loaded"
        watch = watched_ports(stack.topo) if stack.telemetry else []
        for port in stack.topo.router_ports():
            h = stack.fabric.handle(port)
            self.classifier.attach(h.ns, h.ifname, h.ifindex, watch=port in watch)
        self.classifier.pin(pin_dir(stack))

    @property
    def config_map(self):
        """The classifier's ``lk_config``, which the probes and valves share."""
        assert self.classifier, "loaded"
        return self.classifier.shared.maps.lk_config

    def close(self) -> None:
        if self.classifier:
            self.classifier.close()
