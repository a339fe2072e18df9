"""TCP's congestion control as a feature of a policy's stack (``transport.tcp``)."""

from __future__ import annotations

import socket
import sys

from labkit.kernel.dctcp import Dctcp, tcp_congestion_control
from labkit.model.abi import DctcpSample
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.tables import DctcpRow
from labkit.model.topo import Topology
from labkit.runs.features.base import Feature, Stack
from labkit.runs.result import PolicyResult


class TcpControl(Feature):
    """``transport.tcp``: lk_dctcp for the TCP sockets of the hosts it names, chosen per
    socket from the fabric's cgroup, or a kernel congestion control in each host's
    namespace. lk_dctcp is unregistered once the fabric's sockets are gone."""

    after_fabric = True
    dctcp: Dctcp | None = None

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return sc.transport.tcp != "default"

    def build(self, stack: Stack) -> None:
        t, fabric = stack.sc.transport, stack.fabric
        self.topo = stack.topo
        hosts = t.hosts or stack.topo.hosts
        if t.tcp != "dctcp":
            for host in hosts:
                fabric.ns[host].run(tcp_congestion_control, t.tcp)
            return
        if fabric.group is None:
            raise RuntimeError("transport.tcp: dctcp picks lk_dctcp per socket from the "
                               "fabric's cgroup, and this machine has no cgroup v2")
        self.dctcp = Dctcp(stack.registry.add)
        self.dctcp.attach(fabric.group.path)
        for host in hosts:
            self.dctcp.select(fabric.ns[host])

    def collect(self, result: PolicyResult) -> None:
        if self.dctcp:
            result.dctcp = dctcp_rows(self.dctcp.samples(), self.topo)

    def close(self) -> None:
        if self.dctcp:
            self.dctcp.close()


def dctcp_rows(samples: list[DctcpSample], topo: Topology) -> list[DctcpRow]:
    """lk_dctcp's windows as rows of the ``dctcp`` table, each with its sending host."""
    hosts = {topo.host_ip(h): h for h in topo.hosts}
    rows = []
    for w in samples:
        src, dst = (socket.inet_ntoa(a.to_bytes(4, sys.byteorder)) for a in (w.saddr, w.daddr))
        rows.append(DctcpRow(w.t_ns, hosts.get(src, src), f"{src}:{w.sport} > {dst}:{w.dport}",
                             w.alpha / 1024, w.cwnd, w.acked, w.marked))
    return rows
