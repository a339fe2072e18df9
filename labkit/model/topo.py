"""The fabric as a pure graph: nodes with roles, ports, addresses and routes.

Naming and addressing rules (stable, so recorded data stays readable):

* a port is ``<node>-eth<k>``, ``k`` counting that node's links in scenario order;
* host links come first, one per host in scenario order: host number ``i``
  (from 1) gets ``10.0.i.0/24``, the router side ``.1`` and the host ``.2``;
* router-router link number ``j`` (from 1) gets ``10.1.j.0/24``, ``.1`` on the
  first-named end and ``.2`` on the other;
* NVLink number ``k`` (from 1; servers' switch-GPU links, ``fabric.gpus_per_host``)
  gets ``10.2.k.0/24``, ``.1`` on the switch ``nvs<m>`` and ``.2`` on the GPU host,
  whose NVLink port comes after its NIC;
* hosts route everything through their router; routers reach every host
  subnet along shortest router paths, with one nexthop per equal-cost path
  (ECMP multipath routes). A GPU host reaches the other GPUs of its server through
  their switch (a route per peer's NIC address, with its own NIC address as the
  source, so that a peer sees one address for it whichever way a packet came),
  and the switch reaches each GPU by its NIC address.

Nothing here touches the kernel; :mod:`labkit.kernel.fabric` builds this graph.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

from labkit.model.fabric_spec import FabricSpec, LinkSpec


@dataclass(frozen=True)
class Port:
    node: str
    ifname: str
    ip: str  # dotted quad
    prefixlen: int
    peer: str  # the node at the other end
    peer_ip: str
    link: LinkSpec


@dataclass(frozen=True)
class Route:
    dst: str  # "10.0.3.0/24" or "default"
    nexthops: tuple[str, ...]
    src: str | None = None  # the source address packets on this route take


class Topology:
    """Ports, addresses and routes derived from a validated :class:`FabricSpec`."""

    def __init__(self, fabric: FabricSpec):
        self.fabric = fabric
        self.roles = {r: "router" for r in fabric.routers}
        self.roles.update({h.name: h.role for h in fabric.hosts})
        self.roles.update({s.switch: "nvswitch" for s in fabric.servers})
        self.server_of = {g: s for s in fabric.servers for g in s.gpus}
        self.ports: dict[str, list[Port]] = {n: [] for n in self.roles}
        self.links: list[tuple[Port, Port]] = []
        n_hosts = len(fabric.hosts)
        for idx, link in enumerate(fabric.links):
            subnet = f"10.0.{idx + 1}" if idx < n_hosts else f"10.1.{idx - n_hosts + 1}"
            self._add_link(link, f"{subnet}.1", f"{subnet}.2")
        for idx, link in enumerate(fabric.nvlinks):
            self._add_link(link, f"10.2.{idx + 1}.1", f"10.2.{idx + 1}.2")

    def _add_link(self, link: LinkSpec, ip_a: str, ip_b: str) -> None:
        pa = Port(link.a, f"{link.a}-eth{len(self.ports[link.a])}", ip_a, 24, link.b, ip_b, link)
        pb = Port(link.b, f"{link.b}-eth{len(self.ports[link.b])}", ip_b, 24, link.a, ip_a, link)
        self.ports[link.a].append(pa)
        self.ports[link.b].append(pb)
        self.links.append((pa, pb))

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.fabric.hosts]

    @property
    def routers(self) -> list[str]:
        return list(self.fabric.routers)

    def host_ip(self, host: str) -> str:
        return self.ports[host][0].ip

    def port_towards(self, node: str, peer: str) -> Port:
        """The (first) port of ``node`` whose link leads to ``peer``."""
        for port in self.ports[node]:
            if port.peer == peer:
                return port
        raise KeyError(f"{node} has no link to {peer}")

    def router_ports(self) -> list[Port]:
        return [p for r in self.routers for p in self.ports[r]]

    def switch_ports(self) -> list[Port]:
        """The ports of the servers' NVLink switches."""
        return [p for s in self.fabric.servers for p in self.ports[s.switch]]

    def bottleneck_ports(self) -> list[Port]:
        """Both egress ports (one per direction) of every bottleneck link."""
        return [p for a, b in self.fabric.bottlenecks for p in
                (self.port_towards(a, b), self.port_towards(b, a))]

    def routes(self, node: str) -> list[Route]:
        if self.roles[node] == "nvswitch":
            return [Route(f"{self.host_ip(p.peer)}/32", (p.peer_ip,)) for p in self.ports[node]]
        if self.roles[node] != "router":
            server = self.server_of.get(node)
            via = [] if server is None else [
                Route(f"{self.host_ip(g)}/32", (self.port_towards(node, server.switch).peer_ip,),
                      self.host_ip(node)) for g in server.gpus if g != node]
            return [*via, Route("default", (self.ports[node][0].peer_ip,))]
        dist = self._dist
        out = []
        for host in self.fabric.hosts:
            if host.router == node:
                continue
            target = host.router
            hops = tuple(
                p.peer_ip for p in self.ports[node]
                if self.roles[p.peer] == "router" and dist[p.peer][target] == dist[node][target] - 1
            )
            out.append(Route(f"10.0.{self.hosts.index(host.name) + 1}.0/24", hops))
        return out

    def router_hops(self) -> dict[str, dict[str, int]]:
        """Router-to-router hop counts along shortest paths: ``hops[a][b]``."""
        return self._dist

    @cached_property
    def _dist(self) -> dict[str, dict[str, int]]:  # computed once: the graph does not change
        adj = {r: [p.peer for p in self.ports[r] if self.roles[p.peer] == "router"]
               for r in self.routers}
        out = {}
        for src in self.routers:
            dist, todo = {src: 0}, deque([src])
            while todo:
                n = todo.popleft()
                for m in adj[n]:
                    if m not in dist:
                        dist[m] = dist[n] + 1
                        todo.append(m)
            out[src] = dist
        return out

    def path(self, src: str, dst: str) -> list[str]:
        """One shortest node path from host ``src`` to host ``dst`` (for reports and tests):
        through their switch for two GPUs of one server."""
        server = self.server_of.get(src)
        if server is not None and dst in server.gpus:
            return [src, server.switch, dst]
        dist = self._dist
        a, b = self.ports[src][0].peer, self.ports[dst][0].peer
        path = [src, a]
        while path[-1] != b:
            here = path[-1]
            path.append(next(p.peer for p in self.ports[here]
                             if self.roles[p.peer] == "router"
                             and dist[p.peer][b] == dist[here][b] - 1))
        return path + [dst]

    def hops(self, src: str, dst: str) -> set[tuple[str, str]]:
        """Every hop ``(node, next node)`` of every shortest path from host ``src`` to host
        ``dst`` (ECMP may take any of them): the ports a flow between them may leave by."""
        server = self.server_of.get(src)
        if server is not None and dst in server.gpus:
            return {(src, server.switch), (server.switch, dst)}
        dist = self._dist
        a, b = self.ports[src][0].peer, self.ports[dst][0].peer
        out, todo = {(src, a)}, [a]
        while todo:
            here = todo.pop()
            for p in self.ports[here]:
                if self.roles[p.peer] == "router" and dist[p.peer][b] == dist[here][b] - 1 \
                        and (here, p.peer) not in out:
                    out.add((here, p.peer))
                    todo.append(p.peer)
        return out | {(b, dst)}

    def crosses_bottleneck(self, src: str, dst: str) -> bool:
        """Whether traffic from host ``src`` to host ``dst`` may leave by a bottleneck port."""
        return any((p.node, p.peer) in self.hops(src, dst) for p in self.bottleneck_ports())

    def link_port(self, name: str) -> Port:
        """The port of the first-named node of the link called ``name`` ("a-b" or "b-a")."""
        for pa, pb in self.links:
            if name == f"{pa.node}-{pb.node}":
                return pa
            if name == f"{pb.node}-{pa.node}":
                return pb
        known = ", ".join(f"{pa.node}-{pb.node}" for pa, pb in self.links)
        raise KeyError(f"no link {name!r} in this fabric (links: {known})")

    def links_on_path(self, src: str, dst: str) -> list[LinkSpec]:
        nodes = self.path(src, dst)
        return [self.port_towards(x, y).link for x, y in zip(nodes, nodes[1:], strict=False)]
