"""What every feature of a policy's stack is built with (:class:`Stack`) and what a
feature is (:class:`Feature`); the helpers several features share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from labkit.control import Controller
from labkit.kernel import bpf
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.topo import Port, Topology
from labkit.runs.result import PolicyResult
from labkit.traffic.agents import Engine


@dataclass
class Stack:
    """What every feature of one policy's stack is built with, and its features so far,
    in order (:meth:`get`: loaded, then built)."""

    sc: Scenario
    topo: Topology
    policy: Policy
    registry: Registry
    fabric: Fabric
    telemetry: bool = True
    controllers: Mapping[str, type[Controller]] = field(default_factory=dict)
    classifier_object: Path | None = None  # the user's classifier (None: labkit's)
    built: list[Feature] = field(default_factory=list)

    def get(self, kind: type[F]) -> F | None:
        """The feature of this kind, if the policy has it."""
        return next((f for f in self.built if isinstance(f, kind)), None)

    def need(self, kind: type[F], by: str) -> F:
        """The feature of this kind, which ``by`` cannot do without."""
        if (found := self.get(kind)) is None:
            raise RuntimeError(f"{by} needs {kind.__name__}, which this policy has not built")
        return found


class Feature:
    """One capability of a policy's stack (see the module docstring)."""

    after_fabric: ClassVar[bool] = False  # closed once the fabric (and its sockets) is gone
    records_only: ClassVar[bool] = False  # does nothing to the traffic (a shell skips it)

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return True

    def load(self, stack: Stack) -> None:
        """Open and load what needs no fabric (BPF objects), recording it in
        ``stack.registry``: called while the fabric is being built, from a second thread,
        in the order of the features (each sees what those before it loaded)."""

    def build(self, stack: Stack) -> None:
        """Attach to ``stack.fabric`` (started), recording what is made in its registry."""

    def start(self) -> None:
        """The traffic is about to start."""

    def jobs_started(self, engines: Mapping[str, Sequence[Engine]]) -> None:
        """labkit's jobs have started: each job's engines, which take lines on stdin."""

    def op_done(self, job: str, op: int, compute_ns: int) -> None:
        """A job's first rank has completed op (or iteration) ``op``, having computed
        ``compute_ns`` for it (labkit's own jobs, as their engines report them)."""

    def stop(self) -> None:
        """The traffic has ended (also after a failure)."""

    def collect(self, result: PolicyResult) -> None:
        """This feature's figures and rows into the policy's result."""

    def close(self) -> None:
        """Undo :meth:`build` (also after a failed build: what was made)."""



F = TypeVar("F", bound=Feature)


def watched_ports(topo: Topology) -> list[Port]:
    """The bottleneck ports the probes watch: a router's (a host's own NIC has no lanes),
    in the routers' order."""
    bottlenecks = topo.bottleneck_ports()
    return [p for p in topo.router_ports() if p in bottlenecks]


def pin_dir(stack: Stack) -> Path:
    """The run's pin directory (recorded in its registry once)."""
    pins = bpf.pin_dir(stack.registry.run_id)
    stack.registry.add_pin_dir(pins)
    return pins
