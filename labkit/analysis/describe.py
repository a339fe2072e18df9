"""A scenario's fabric as plain data (``labkit inspect``): nodes and their ports with
addresses, each node's routes, every host pair's shortest paths, the classifier's rules in
the order it tries them, and the bottleneck links. Everything is read from the scenario and
:class:`labkit.model.topo.Topology`: no user code, nothing touched.

A node's ``level`` places it for drawing: hosts 0, routers with hosts (leaves) 1, other
routers one more than their router hops to the nearest leaf, NVLink switches -1.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict
from functools import cache

from labkit.model.abi import LANES
from labkit.model.scenario_spec import NETWORK_CONTROL, ROCEV2_PORT, LaneRule, Scenario
from labkit.model.topo import Port, Topology

KIND_NAMES = {"gpu": "GPU host", "storage": "storage host", "router": "router",
              "nvswitch": "NVLink switch"}  # a node's role, or its kind for other nodes


def fabric(sc: Scenario) -> dict:
    """The description of ``sc``'s fabric, ready for JSON."""
    topo = Topology(sc.fabric)
    egress = {(p.node, p.peer) for p in topo.bottleneck_ports()}
    far = {p.ifname: q for a, b in topo.links for p, q in ((a, b), (b, a))}
    owner = {p.ip: p.node for ports in topo.ports.values() for p in ports}
    subnet = {str(ipaddress.ip_interface(f"{p.ip}/{p.prefixlen}").network): h
              for h in topo.hosts for p in topo.ports[h][:1]}
    subnet.update({f"{topo.host_ip(h)}/32": h for h in topo.hosts})
    names = [*topo.hosts, *topo.routers, *(s.switch for s in sc.fabric.servers)]
    paths = [_path(topo, a, b, egress) for a in topo.hosts for b in topo.hosts if a != b]
    hops, leaves = topo.router_hops(), {h.router for h in sc.fabric.hosts}
    levels = {r: 1 + min(hops[r][leaf] for leaf in leaves) for r in topo.routers}
    return {
        "scenario": sc.name, "file": sc.path, "description": sc.description,
        "scale_factor": sc.scale_factor, "rate_factor": sc.emulation.rate_factor,
        "routing": sc.fabric.routing,
        "nodes": [_node(sc, topo, name, levels, far, egress) for name in names],
        "links": [_link(topo, a, b, egress) for a, b in topo.links],
        "routes": {name: [{**asdict(r), "hosts": [subnet[r.dst]] if r.dst in subnet else [],
                           "via": [owner[ip] for ip in r.nexthops]}
                          for r in topo.routes(name)] for name in names},
        "paths": paths,
        "lanes": _lanes(sc),
        "bottlenecks": [_bottleneck(sc, topo.port_towards(a, b), topo.port_towards(b, a),
                                    paths) for a, b in sc.fabric.bottlenecks],
    }


def _node(sc: Scenario, topo: Topology, name: str, levels: dict[str, int],
          far: dict[str, Port], egress: set[tuple[str, str]]) -> dict:
    role = topo.roles[name]
    host = next((h for h in sc.fabric.hosts if h.name == name), None)  # None: not a host
    server = topo.server_of.get(name)
    return {
        "name": name, "kind": "host" if host else role, "role": host.role if host else None,
        "router": host.router if host else None, "server": server.switch if server else None,
        "level": levels.get(name, -1 if role == "nvswitch" else 0),
        "ports": [{"ifname": p.ifname, "address": f"{p.ip}/{p.prefixlen}", "peer": p.peer,
                   "peer_port": far[p.ifname].ifname, "peer_address": p.peer_ip,
                   "link": p.link.name, "bottleneck": (p.node, p.peer) in egress}
                  for p in topo.ports[name]],
    }


def _link(topo: Topology, a: Port, b: Port, egress: set[tuple[str, str]]) -> dict:
    roles = {topo.roles[a.node], topo.roles[b.node]}
    return {
        "name": a.link.name,
        "kind": "nvlink" if "nvswitch" in roles else "router" if roles == {"router"} else "host",
        **{k: v for k, v in asdict(a.link).items() if k not in ("a", "b")},
        "ends": [{"node": p.node, "ifname": p.ifname, "address": f"{p.ip}/{p.prefixlen}"}
                 for p in (a, b)],
        "bottleneck": (a.node, b.node) in egress,
    }


def _path(topo: Topology, src: str, dst: str, egress: set[tuple[str, str]]) -> dict:
    hops = topo.hops(src, dst)
    after: dict[str, list[str]] = {}
    for a, b in hops:
        after.setdefault(a, []).append(b)

    @cache
    def ways(node: str) -> int:  # shortest paths from node on to dst
        return 1 if node == dst else sum(map(ways, after[node]))

    return {"src": src, "dst": dst, "nodes": topo.path(src, dst), "ways": ways(src),
            "hops": sorted(map(list, hops)), "bottleneck": sorted(map(list, hops & egress))}


def kind_text(node: dict) -> str:
    """A node's kind in words: ``GPU host on leaf1``, ``spine router``."""
    if node["kind"] == "host":
        return f"{KIND_NAMES[node['role']]} on {node['router']}" + (
            f" and {node['server']}" if node["server"] else "")
    if node["kind"] == "nvswitch":
        return "NVLink switch"
    return {1: "leaf router", 2: "spine router"}.get(node["level"],
                                                     f"router, tier {node['level']}")


def rate_text(rate_mbps: float, scale_factor: float) -> str:
    """``100 Mbit/s (400 Gbit/s real)``: a link's emulated rate and what it stands for."""
    real = rate_mbps * scale_factor
    return f"{rate_mbps:g} Mbit/s ({real / 1000:g} Gbit/s real)" if real >= 1000 else \
        f"{rate_mbps:g} Mbit/s ({real:g} Mbit/s real)"


def rule_text(rule: LaneRule) -> str:
    """What a lane rule matches, in words: ``RoCEv2 (UDP to 4791, a BTH)``, ``DSCP 26``."""
    proto = (rule.proto or "").upper()
    parts = [f"DSCP {rule.dscp}"] if rule.dscp is not None else []
    if rule.roce:
        parts.append(f"RoCEv2 (UDP to {ROCEV2_PORT}, a BTH)")
    elif rule.dport:
        parts.append(f"{proto} to port {rule.dport}")
    if rule.sport:
        parts.append(f"{proto} from port {rule.sport}")
    if rule.port:
        parts.append(f"{proto} port {rule.port} (either side)")
    return " and ".join(parts)


def _lanes(sc: Scenario) -> dict:
    """The rules in the classifier's order (the first that matches decides), who added each,
    and the lanes a lossless fabric pauses."""
    added = {LaneRule("vip", dscp=p.dscp): f"{p.key}: the DSCP program {p.name}'s packets "
             "carry" for p in sc.programs}
    if sc.fabric.routing == "bgp":
        added[LaneRule("vip", dscp=NETWORK_CONTROL)] = (
            "fabric.routing: bgp: the routers' BGP and BFD packets (CS6), ahead of data")
    return {
        "classifier": sc.classifier, "default": "normal", "order": list(LANES),
        "lossless": list(sc.fabric.lossless),
        "rules": [{**asdict(r), "text": rule_text(r), "added_by": added.get(r)}
                  for r in sc.lanes],
    }


def _bottleneck(sc: Scenario, a: Port, b: Port, paths: list[dict]) -> dict:
    link = a.link
    ports = [[a.node, b.node], [b.node, a.node]]
    return {
        "link": link.name, "rate_mbps": link.rate_mbps,
        "real_mbps": link.rate_mbps * sc.scale_factor, "mtu": link.mtu,
        "buffer_kb": link.buffer_kb, "loss_percent": link.loss_percent,
        "ports": [{"ifname": p.ifname, "node": p.node, "towards": p.peer} for p in (a, b)],
        "host_pairs": sum(1 for p in paths if any(h in ports for h in p["bottleneck"])),
    }
