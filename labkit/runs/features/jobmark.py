"""A user's programs' cgroups and job markers as a feature of a policy's stack."""

from __future__ import annotations

from labkit.kernel import cgroups
from labkit.kernel.jobmark import JobMarks
from labkit.model.scenario_spec import Policy, Scenario
from labkit.runs.features.base import Feature, Stack
from labkit.runs.features.control import Control


class JobMarking(Feature):
    """A cgroup per rank of each of the user's programs, and on each rank host's NIC the
    job marker that knows the cgroup and the program's DSCP (writing the host's valve's
    phase, under a controller); a program's hosts are its own."""

    marks: JobMarks | None = None

    def __init__(self) -> None:
        self.groups: dict[str, cgroups.Cgroup] = {}

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return bool(sc.programs)

    def build(self, stack: Stack) -> None:
        base = cgroups.fabric_dir(stack.registry.run_id, stack.policy.name)
        control = stack.get(Control)
        marks = self.marks = JobMarks(stack.registry.add)
        for spec, host in ((p, h) for p in stack.sc.programs for h in p.ranks):
            group = self.groups[host] = cgroups.make(base / host, stack.registry.add,
                                                     first=True)
            nic = stack.fabric.nic(host)
            phase = control.session.valves.valves[host].obj.maps.lk_phase \
                if control and control.session else None
            far = [stack.topo.host_ip(peer) for peer in spec.ranks
                   if peer != host and stack.topo.crosses_bottleneck(host, peer)]
            marks.attach(host, nic.ns, nic.ifname, nic.ifindex, group, spec.dscp,
                         spec.quiet_ms, spec.quiet_ms, far, phase)

    def close(self) -> None:
        if self.marks:
            self.marks.close()
