"""The scenario checker's part for ``defaults`` and ``fabric``: routers, hosts by role and
router, links and their properties, bottlenecks, a lossless fabric's lanes and GPU
servers; the references between them, and the address plan's and Linux's limits
(:data:`MAX_SUBNETS`, :data:`IFNAMSIZ`). The keys and ranges are
:mod:`labkit.model.scenario_doc`'s; :func:`labkit.model.scenario.parse` calls
:func:`check_fabric` and :func:`check_link_defaults`. Pure.
"""

from __future__ import annotations

from collections import Counter

from labkit.model import lossless
from labkit.model.abi import LANES
from labkit.model.checker import Checker, join
from labkit.model.fabric_spec import FabricSpec, HostSpec, LinkSpec, ServerSpec
from labkit.model.scenario_doc import (
    DEFAULTS,
    FABRIC,
    FABRIC_HOSTS,
    LINK,
    LINK_ENTRY,
    MAX_BOTTLENECKS,
    NVLINK,
    ROUTING,
)
from labkit.model.shapes import Keys, kind_of

IFNAMSIZ = 15  # Linux's longest interface name (16 bytes with its NUL)
MAX_SUBNETS = 255  # hosts, router links, NVLinks: 10.0.<i>, 10.1.<j>, 10.2.<k> (labkit.model.topo)
NVLINK_RATIO = 10  # an NVLink's default rate, times the GPU hosts' link rate (real: ~18)


def check_link_defaults(c: Checker, defaults) -> dict:
    """``defaults``: the links' properties where the fabric does not say."""
    c.keys(defaults, "defaults", DEFAULTS)
    link = c.keys(defaults.get("link", {}), "defaults.link", LINK)
    out = {"rate_mbps": 200.0, "mtu": 9000, "buffer_kb": 1024, "loss_percent": 0.0,
           "delay_ms": 0.0, "jitter_ms": 0.0}
    out.update(_link_props(c, link, "defaults.link", LINK))
    _check_jitter(c, out, "defaults.link")
    return out


def _check_jitter(c: Checker, props: dict, key: str) -> None:
    """A link's jitter within its delay (each frame's delay is drawn from delay ± jitter)."""
    if props["jitter_ms"] > props["delay_ms"]:
        c.fail(f"{key}.jitter_ms", f"{props['jitter_ms']:g} ms is more than the link's "
               f"delay_ms ({props['delay_ms']:g}): each frame's delay is drawn from delay ± "
               "jitter, so give the link a delay at least as large")


def _link_props(c: Checker, d: dict, key: str, shape: Keys) -> dict:
    """The keys of ``d`` that are a link's (``shape``: a link's or an NVLink's) checked."""
    return {k: c.check(shape[k], v, join(key, k)) for k, v in d.items() if k in shape.keys}


def check_fabric(c: Checker, fab, link_defaults: dict) -> FabricSpec:
    """``fabric``, its links' properties ``link_defaults`` where it does not say."""
    c.keys(fab, "fabric", FABRIC)
    routers = []
    for i, r in enumerate(c.seq(fab["routers"], "fabric.routers")):
        r = c.name(r, f"fabric.routers[{i}]")
        if r in routers:
            c.fail(f"fabric.routers[{i}]", f"router {r!r} is listed twice")
        routers.append(r)
    if not routers:
        c.fail("fabric.routers", "must name at least one router")

    hosts: list[HostSpec] = []
    router_of: dict[str, str] = {}
    c.keys(fab["hosts"], "fabric.hosts", FABRIC_HOSTS)
    for role, placement in fab["hosts"].items():
        key = f"fabric.hosts.{role}"
        if not isinstance(placement, dict):
            c.fail(key, f"must map routers to lists of hosts, got {kind_of(placement)}")
        for router, names in placement.items():
            rkey = join(key, router)
            if router not in routers:
                c.fail(rkey, f"{router!r} is not a router (routers: {', '.join(routers)})")
            for i, h in enumerate(c.seq(names, rkey)):
                h = c.name(h, f"{rkey}[{i}]")
                if h in routers:
                    c.fail(f"{rkey}[{i}]", f"{h!r} is already a router")
                if h in router_of:
                    c.fail(f"{rkey}[{i}]", f"host {h!r} is placed twice (also at {router_of[h]})")
                router_of[h] = router
                hosts.append(HostSpec(h, role, router))
    if not hosts:
        c.fail("fabric.hosts", "must place at least one host")
    if len(hosts) > MAX_SUBNETS:
        c.fail("fabric.hosts", f"{len(hosts)} hosts; the address plan has room for "
                               f"{MAX_SUBNETS} (host i's link is 10.0.i.0/24)")

    nodes = set(routers) | set(router_of)
    overrides: dict[frozenset, dict] = {}
    router_links: list[LinkSpec] = []
    listed: dict[frozenset, int] = {}  # each link's first entry
    for i, entry in enumerate(c.seq(fab.get("links", []), "fabric.links")):
        key = f"fabric.links[{i}]"
        if isinstance(entry, list):
            ends, props = entry, {}
        else:
            c.keys(entry, key, LINK_ENTRY)
            ends, props = entry["between"], _link_props(c, entry, key, LINK)
            _check_jitter(c, {**link_defaults, **props}, key)
            key = f"{key}.between"
        a, b = _pair(c, ends, key, nodes)
        pair = frozenset((a, b))
        if pair in listed:
            c.fail(key, f"link {a}-{b} is listed twice (also fabric.links[{listed[pair]}]; "
                        f"[{a}, {b}] and [{b}, {a}] are one link): keep one, labkit builds no "
                        "parallel links")
        listed[pair] = i
        if a in router_of or b in router_of:
            host, other = (a, b) if a in router_of else (b, a)
            if router_of[host] != other:
                c.fail(key, f"host {host!r} is attached to {router_of[host]!r}, not {other!r}")
            overrides[pair] = props
        else:
            router_links.append(LinkSpec(a, b, **{**link_defaults, **props}))
    host_links = [
        LinkSpec(h.router, h.name, **{**link_defaults, **overrides.get(frozenset((h.router,
                                                                                   h.name)), {})})
        for h in hosts
    ]

    if len(router_links) > MAX_SUBNETS:
        c.fail("fabric.links", f"{len(router_links)} links between routers; the address plan "
                               f"has room for {MAX_SUBNETS} (link j is 10.1.j.0/24)")
    links = tuple(host_links + router_links)
    pairs = {frozenset((link.a, link.b)) for link in links}
    bottlenecks: list[tuple[str, str]] = []
    for i, ends in enumerate(c.seq(fab["bottlenecks"], "fabric.bottlenecks")):
        key = f"fabric.bottlenecks[{i}]"
        a, b = _pair(c, ends, key, nodes)
        if frozenset((a, b)) not in pairs:
            c.fail(key, f"there is no link between {a!r} and {b!r} to be a bottleneck")
        if {a, b} in map(set, bottlenecks):
            c.fail(key, f"the link between {a!r} and {b!r} is listed twice")
        bottlenecks.append((a, b))
    if not bottlenecks:
        c.fail("fabric.bottlenecks", "must name at least one link")
    if len(bottlenecks) > MAX_BOTTLENECKS:
        c.fail("fabric.bottlenecks", f"at most {MAX_BOTTLENECKS} links: the queue probe "
                                     f"watches {2 * MAX_BOTTLENECKS} ports")
    _check_connected(c, routers, router_links)
    servers, nvlinks = _servers(c, fab, hosts, set(routers) | set(router_of), link_defaults)
    ports = Counter(end for link in links for end in (link.a, link.b))
    for i, r in enumerate(routers):  # hosts have two ports at most, a switch 8
        if len(last := f"{r}-eth{ports[r] - 1}") > IFNAMSIZ:
            c.fail(f"fabric.routers[{i}]", f"{r} has {ports[r]} links, and its port {last} "
                   f"is {len(last)} characters, past Linux's {IFNAMSIZ}: shorten the name "
                   "or give it fewer links")
    spec = FabricSpec(tuple(routers), tuple(hosts), links, tuple(bottlenecks),
                      _lossless(c, fab.get("lossless", False)), servers, nvlinks,
                      _routing(c, fab.get("routing", "static")))
    if problem := lossless.headroom_problem(spec):
        c.fail("fabric.lossless", problem)
    return spec


NVLINK_RATIO = 10  # an NVLink's default rate, times the GPU hosts' link rate (real: ~18)


def _servers(c: Checker, fab: dict, hosts: list[HostSpec], names: set[str],
             link_defaults: dict) -> tuple[tuple[ServerSpec, ...], tuple[LinkSpec, ...]]:
    """``fabric.gpus_per_host`` (1-8) and ``fabric.nvlink``: each router's GPU hosts, in
    scenario order, make servers of that many, each joined by a switch ``nvs<k>``."""
    n = c.get(fab, "fabric", FABRIC, "gpus_per_host", 1)
    if n == 1:
        if "nvlink" in fab:
            c.fail("fabric.nvlink", "needs fabric.gpus_per_host of 2 or more")
        return (), ()
    props = _link_props(c, c.keys(fab.get("nvlink", {}), "fabric.nvlink", NVLINK),
                        "fabric.nvlink", NVLINK)
    servers: list[ServerSpec] = []
    for router in dict.fromkeys(h.router for h in hosts):
        gpus = [h.name for h in hosts if h.router == router and h.role == "gpu"]
        if len(gpus) % n:
            c.fail(f"fabric.hosts.gpu.{router}", f"{len(gpus)} GPU hosts do not make servers "
                   f"of {n} (fabric.gpus_per_host): list a multiple of {n}")
        for i in range(0, len(gpus), n):
            switch = f"nvs{len(servers) + 1}"
            if switch in names:
                c.fail("fabric.gpus_per_host", f"the servers' switches are named nvs1, "
                       f"nvs2, ...: rename the node {switch!r}")
            servers.append(ServerSpec(switch, tuple(gpus[i:i + n])))
    link = {**link_defaults, "rate_mbps": link_defaults["rate_mbps"] * NVLINK_RATIO,
            "loss_percent": 0.0, "delay_ms": 0.0, "jitter_ms": 0.0, **props}
    nvlinks = tuple(LinkSpec(s.switch, g, **link) for s in servers for g in s.gpus)
    return tuple(servers), nvlinks


def server_problem(fabric: FabricSpec, ranks: tuple[str, ...]) -> str | None:
    """Why ``ranks`` cannot run the hierarchical All-Reduce on ``fabric`` (it needs
    servers, and the ranks to come whole servers at a time), or None."""
    if not fabric.servers:
        return "hierarchical needs servers: set fabric.gpus_per_host (2-8)"
    n = fabric.gpus_per_host
    of = {g: s.switch for s in fabric.servers for g in s.gpus}
    for i in range(0, len(ranks), n):
        part = ranks[i:i + n]
        if len(part) < n or {of.get(r) for r in part} != {of.get(part[0])} or None in {
                of.get(r) for r in part}:
            return (f"hierarchical needs the ranks a whole server at a time, {n} by {n} "
                    f"(fabric.gpus_per_host): {', '.join(part)} is not one server's GPUs")
    return None




def _routing(c: Checker, value) -> str:
    """``fabric.routing``: static (labkit's routes) or bgp (FRR in every router)."""
    if value not in ROUTING:
        c.fail("fabric.routing", "must be static (labkit's routes, the default) or bgp "
                                 f"(BGP with BFD in every router, by FRR), got {value!r}")
    return value


def _lossless(c: Checker, value) -> tuple[str, ...]:
    """``fabric.lossless``: true (the vip lane), false, or a list of lanes."""
    key = "fabric.lossless"
    if isinstance(value, bool):
        return ("vip",) if value else ()
    if not isinstance(value, list):
        c.fail(key, f"must be true (the vip lane), false, or a list of lanes "
                    f"({', '.join(LANES)}), got {kind_of(value)}")
    lanes = value
    for i, lane in enumerate(lanes):
        if lane not in LANES:
            c.fail(f"{key}[{i}]", f"must be a lane ({', '.join(LANES)}), got {lane!r}")
    if len(set(lanes)) != len(lanes):
        c.fail(key, "names a lane twice")
    return tuple(lane for lane in LANES if lane in lanes)


def _pair(c: Checker, ends, key: str, nodes: set[str]) -> tuple[str, str]:
    if not isinstance(ends, list) or len(ends) != 2:
        c.fail(key, f"must be a pair of node names like [leaf1, spine1], got {ends!r}")
    a, b = (c.name(x, f"{key}[{i}]") for i, x in enumerate(ends))
    for i, x in enumerate((a, b)):
        if x not in nodes:
            c.fail(f"{key}[{i}]", f"{x!r} is neither a router nor a host of this fabric")
    if a == b:
        c.fail(key, f"a link needs two different nodes, got {a!r} twice")
    return a, b


def _check_connected(c: Checker, routers: list[str], links: list[LinkSpec]) -> None:
    adj: dict[str, set[str]] = {r: set() for r in routers}
    for link in links:
        if link.a in adj and link.b in adj:
            adj[link.a].add(link.b)
            adj[link.b].add(link.a)
    reached, todo = {routers[0]}, [routers[0]]
    while todo:
        for n in adj[todo.pop()] - reached:
            reached.add(n)
            todo.append(n)
    if missing := [r for r in routers if r not in reached]:
        c.fail("fabric.links", f"routers {', '.join(missing)} are not connected to {routers[0]}")


