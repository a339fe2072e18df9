"""Build and tear down a :class:`~labkit.model.topo.Topology` as a Mininet network.

Every node (GPU host, storage host, router) is a plain Mininet ``Node`` in its
own network namespace; routers forward IPv4 with ECMP (L4 hash, seeded by the router's
name) and no switch or controller is involved, so Open vSwitch is never needed. Links
are veth pairs; a link with a propagation delay is spliced through one more namespace,
:data:`DELAY_NODE`, where labkit's delay line (:mod:`labkit.kernel.delayline`) holds
each direction's frames after the link's shapers.
Addresses, static neighbours, routes and sysctls are set over netlink
(pyroute2) inside each namespace; every port is shaped by :mod:`labkit.kernel.tc`.

Each node's shell process is recorded in the run registry the moment it
exists, so a killed run can be cleaned from the registry alone.

Mininet's global set-up (``fixLimits``, which raises machine-wide sysctls) and
global cleanup are never used: this machine is shared.
"""

from __future__ import annotations

import os
import signal
import socket
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

from pyroute2 import IPRoute
from pyroute2.ethtool import Ethtool

from labkit.kernel import cgroups, routewatch, tc
from labkit.kernel.delayline import DelayLine, Pipe, ring_bytes
from labkit.kernel.frr import Frr
from labkit.kernel.netns import Netns, in_thread
from labkit.kernel.registry import Registry
from labkit.model.topo import Port, Topology

NUD_PERMANENT = 0x80
# nodes started, then configured, at once: each mostly waits on its shell, on netlink
# and on its ports' carrier
CONFIGURE_THREADS = 4
DELAY_NODE = "lk-delay"  # no scenario's node: a node's name is [a-z][a-z0-9]*


def mac_for(ip: str) -> str:
    """A locally administered MAC derived from the port's address (stable, readable)."""
    return "02:00:" + ":".join(f"{int(b):02x}" for b in ip.split("."))


def _delay_mac(ifname: str) -> str:
    """A locally administered MAC for an end in :data:`DELAY_NODE` ("dl<i>a", "dl<i>b")."""
    i, side = int(ifname[2:-1]), ifname[-1] == "b"
    return f"02:dd:00:{i >> 8:02x}:{i & 0xff:02x}:{side:02x}"


class Pair(NamedTuple):
    """A veth pair to make: ``port`` to the other node's end (its name, its MAC, and its
    port, None for the delay node's)."""

    port: Port
    node: str
    ifname: str
    mac: str
    peer: Port | None


@cache
def _made_link() -> type:
    """Mininet's Link over a veth pair that exists (:meth:`Fabric._make_veths`)."""
    from mininet.link import Link

    class MadeLink(Link):
        @classmethod
        def makeIntfPair(cls, *args, **kwargs) -> None:
            """The pair exists already."""

    return MadeLink


TSO = ("tx-tcp-segmentation", "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation",
       "tx-tcp6-segmentation", "tx-tcp-accecn-segmentation")


def _receive_in_order(ethtool: Ethtool, ifname: str) -> None:
    """Make a veth receive through NAPI: one poller per queue, so a flow's packets stay in
    order even when two CPUs transmit them. Without NAPI a veth hands each packet to the
    transmitting CPU's backlog, and a router's dequeues on two CPUs reorder a flow, which
    RoCE takes for loss (measured: up to 19 NAKs per rank in a 40-op ring with no drop
    anywhere). A veth uses NAPI only with GRO on at the receiver and TSO off at the
    sender (``veth_skb_is_eligible_for_gro``); TCP still sends large segments (GSO
    splits them after the qdisc, GRO merges them again at the next hop)."""
    features = ethtool.get_features(ifname)
    features.features["rx-gro"].enable = True
    for name in TSO:
        if name in features.features:
            features.features[name].enable = False
    ethtool.set_features(ifname, features)


def _sysctl(path: str, value: str) -> None:
    Path("/proc/sys", path.replace(".", "/")).write_text(value)


HASH_SEED = "net.ipv4.fib_multipath_hash_seed"  # Linux 6.11 on


def ecmp_seed(router: str) -> int:
    """The seed a router hashes flows onto its equal-cost paths with: fixed by its name, so
    a fabric sends the same flows the same ways on every machine. With 0, the kernel's
    default, the hash's key is drawn at boot: which flows shared an uplink changed from
    boot to boot (a tree broadcast on leaf-spine: 18 or 36 Mbit/s at 1 MiB)."""
    return zlib.crc32(router.encode()) or 1


def mininet_version() -> str:
    try:
        from mininet.net import VERSION
    except ImportError:
        return "not found"
    return VERSION


def port_key(port: Port) -> str:
    """How a port is named in lookups and labels: "<node>/<ifname>"."""
    return f"{port.node}/{port.ifname}"


@dataclass(frozen=True)
class PortHandle:
    """A port of a running fabric as the kernel knows it: where to reach it."""

    ns: Netns
    ifname: str
    ifindex: int
    key: str  # port_key(port)


class Fabric:
    """A running emulated fabric. Use as a context manager, or call :meth:`stop`."""

    def __init__(self, topology: Topology, registry: Registry, router_layout: str = "fifo",
                 host_layout: str = "fifo", pausable: bool = False,
                 cgroup: Path | None = None, spliced: frozenset[str] = frozenset()):
        self.topo = topology
        self.registry = registry
        self.router_layout = router_layout
        self.host_layout = host_layout  # "held" where a controller shapes the hosts' NICs
        self.pausable = pausable  # every leaf queue a TBF that can pause (lossless fabrics)
        self.cgroup_path = cgroup  # where its processes run (None: no cgroup v2 here)
        self.group: cgroups.Cgroup | None = None
        self.net = None
        self.nodes: dict = {}
        self.ns: dict[str, Netns] = {}
        self.ifindex: dict[str, int] = {}  # port_key(port) -> ifindex
        self.delay_line: DelayLine | None = None
        self.spliced = spliced  # links given a delay line though they have no delay (yet)
        self.routed = topology.fabric.routing == "bgp"  # routers learn their routes by BGP
        self.frr: Frr | None = None

    def start(self) -> Fabric:
        """Build the fabric (:meth:`build`); on a failure, tear down what was made."""
        try:
            return self.build()
        except BaseException:
            self.stop()
            raise

    def build(self) -> Fabric:
        """Build the fabric; on a failure, what was made is left to :meth:`stop` (a policy
        closes its features first: the registry's teardown removes their BPF objects too,
        which they hold until then)."""
        from mininet.net import Mininet

        Mininet.inited = True  # skip mininet.util.fixLimits(): it changes global sysctls
        if self.cgroup_path:
            self.group = cgroups.make(self.cgroup_path, self.registry.add)
        net = self.net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                                 autoStaticArp=False, waitConnected=False)
        delayed = self.delayed_links()
        self._add_nodes(net, [*self.topo.roles, *([DELAY_NODE] if delayed else [])])
        pairs: list[Pair] = []
        for pa, pb in self.topo.links:
            splice = delayed.get((pa, pb))
            pairs += ([Pair(pa, DELAY_NODE, splice[0], _delay_mac(splice[0]), None),
                       Pair(pb, DELAY_NODE, splice[1], _delay_mac(splice[1]), None)]
                      if splice else [Pair(pa, pb.node, pb.ifname, mac_for(pb.ip), pb)])
        in_thread(lambda: self._make_veths(pairs))
        for pair in pairs:
            self._tell_mininet(net, pair)
        if delayed:
            self.ns[DELAY_NODE].run(self._configure_delay, delayed)
            self._start_delay_line(delayed)
        # every node's ports up, then each node's routes once its links have carrier
        # (which needs the other end up: a node's own pass cannot wait for it)
        with ThreadPoolExecutor(CONFIGURE_THREADS, thread_name_prefix="configure") as pool:
            for step in (self._configure, self._route):
                for done in [pool.submit(self.ns[name].run, step, name)
                             for name in self.topo.roles]:
                    done.result()  # the first node's error, once all have ended
        if self.routed:
            self.frr = Frr(self.topo, self.popen,
                           lambda d: self.registry.add("session_dir", path=str(d))).start()
            self.frr.converged(self.host_routes)
        return self

    def _add_nodes(self, net, names: list[str]) -> None:
        """Each node in ``net``: its shell in a namespace of its own, recorded as it starts.
        The shells start side by side (each node waits for its shell's prompt, then for a
        command's; one after another, 12 nodes took 0.12 s of a 0.45 s build); every one
        that started is kept, then the first error raised."""
        from mininet.node import Node

        def start(name: str) -> Node:
            node = Node(name, ip=None, inNamespace=True)
            self.registry.add_process(node.pid, f"mininet node {name}", signal.SIGHUP)
            return node

        with ThreadPoolExecutor(CONFIGURE_THREADS, thread_name_prefix="nodes") as pool:
            started = [(name, pool.submit(start, name)) for name in names]
        for name, future in started:
            if future.exception() is not None:
                continue
            node = future.result()
            if self.group:  # what the node's shell runs (its command line's) joins it
                self.group.add(node.pid)
            net.hosts.append(node)  # as Mininet's addHost does, for its CLI
            net.nameToNode[name] = node
            self.nodes[name] = node
            self.ns[name] = Netns(node.pid, name)
            self.registry.add("netns", node=name, pid=node.pid, inode=self.ns[name].inode)
        for _, future in started:
            future.result()  # the first error, once every node that started is kept

    def _make_veths(self, pairs: list[Pair]) -> None:
        """Each pair, made over netlink in one request and recorded (Mininet's own makes
        it with an ``ip`` command run in a node's shell and brings each end up with
        another, about 8 ms a link); :meth:`_configure` sets each end up."""
        with IPRoute() as ipr:
            for port, node, ifname, mac, _ in pairs:
                ipr.link("add", ifname=port.ifname, address=mac_for(port.ip), kind="veth",
                         net_ns_pid=self.nodes[port.node].pid,
                         peer={"ifname": ifname, "address": mac,
                               "net_ns_pid": self.nodes[node].pid})
                self.registry.add("veth", ends=[f"{port.node}/{port.ifname}",
                                                f"{node}/{ifname}"])

    @staticmethod
    def _tell_mininet(net, pair: Pair) -> None:
        """Mininet's link over a pair :meth:`_make_veths` made (:func:`_made_link`), not
        brought up by Mininet (``up=None``), its ends' addresses known: they are
        configured over netlink (:meth:`_configure`), and Mininet's CLI shows them in
        `dump` and `pingall` (it reads a host's address afresh, with ifconfig, when a
        command names the host)."""
        port, peer = pair.port, pair.peer
        link = net.addLink(port.node, pair.node, cls=_made_link(), intfName1=port.ifname,
                           intfName2=pair.ifname, addr1=mac_for(port.ip), addr2=pair.mac,
                           params1={"up": None}, params2={"up": None})
        link.intf1.ip, link.intf1.prefixLen = port.ip, port.prefixlen
        if peer:
            link.intf2.ip, link.intf2.prefixLen = peer.ip, peer.prefixlen

    def delayed_links(self) -> dict[tuple[Port, Port], tuple[str, str]]:
        """Each link with a propagation delay (or in ``spliced``: one whose delay changes
        during the run), and the names of its two ends in :data:`DELAY_NODE` (towards its
        first port, towards its second)."""
        return {(pa, pb): (f"dl{i}a", f"dl{i}b")
                for i, (pa, pb) in enumerate(
                    (pa, pb) for pa, pb in self.topo.links
                    if pa.link.delay_ms > 0 or pa.link.name in self.spliced)}

    def set_delay(self, link: str, delay_ms: float, jitter_ms: float) -> None:
        """Hold link ``link``'s frames (both ways) ``delay_ms`` ± ``jitter_ms`` from now on;
        the link must have been spliced (a delay of its own, or in ``spliced``)."""
        ends = next((e for (pa, _), e in self.delayed_links().items()
                     if pa.link.name == link), None)
        if ends is None or self.delay_line is None:
            raise RuntimeError(f"link {link} has no delay line: give it a delay_ms")
        for into in ends:
            self.delay_line.set_delay(into, int(delay_ms * 1e6), int(jitter_ms * 1e6))

    def _configure_delay(self, delayed: dict[tuple[Port, Port], tuple[str, str]]) -> None:
        """:data:`DELAY_NODE`'s ends up, with their link's MTU, as every port receives."""
        with IPRoute() as ipr, Ethtool() as ethtool:
            (lo,) = ipr.link_lookup(ifname="lo")
            ipr.link("set", index=lo, state="up")
            for (pa, _), ends in delayed.items():
                for ifname in ends:
                    _sysctl(f"net.ipv6.conf.{ifname}.disable_ipv6", "1")
                    (index,) = ipr.link_lookup(ifname=ifname)
                    ipr.link("set", index=index, mtu=pa.link.mtu, state="up")
                    _receive_in_order(ethtool, ifname)

    def _start_delay_line(self, delayed: dict[tuple[Port, Port], tuple[str, str]]) -> None:
        """One delay line for every delayed link, both directions."""
        pipes = []
        for (pa, _), (a, b) in delayed.items():
            link = pa.link
            delay, jitter = int(link.delay_ms * 1e6), int(link.jitter_ms * 1e6)
            size = ring_bytes(link.rate_mbps, delay, jitter)
            seed = zlib.crc32(f"{pa.node}/{pa.ifname}".encode())
            pipes += [Pipe(a, b, delay, jitter, size, seed),
                      Pipe(b, a, delay, jitter, size, seed + 1)]
        self.delay_line = DelayLine(
            lambda argv, **kw: self.popen(DELAY_NODE, argv, "delay line", **kw), pipes).start()

    def _configure(self, name: str) -> None:
        router = self.topo.roles[name] in ("router", "nvswitch")
        for key, value in (("net.ipv6.conf.all.disable_ipv6", "1"),
                           ("net.ipv6.conf.default.disable_ipv6", "1"),
                           ("net.ipv4.conf.all.rp_filter", "0"),
                           ("net.ipv4.conf.default.rp_filter", "0"),
                           ("net.ipv4.ip_forward", "1" if router else "0"),
                           ("net.ipv4.fib_multipath_hash_policy", "1"),
                           ("net.ipv4.tcp_ecn", "1")):  # storage TCP heeds CE marks
            _sysctl(key, value)
        if router and Path("/proc/sys", HASH_SEED.replace(".", "/")).exists():
            _sysctl(HASH_SEED, str(ecmp_seed(name)))
        with IPRoute() as ipr, Ethtool() as ethtool:
            (lo,) = ipr.link_lookup(ifname="lo")
            ipr.link("set", index=lo, state="up")
            ports = self.topo.ports[name]
            # each port: IPv6 off, GRO/TSO set, up, then its MTU and qdiscs (tc.shape);
            # with the MTU set before it was up, its link's operational state waited for
            # the kernel's next batch of link events, about a second (measured)
            for port in ports:
                _sysctl(f"net.ipv6.conf.{port.ifname.replace('.', '/')}.disable_ipv6", "1")
                _receive_in_order(ethtool, port.ifname)
                ipr.link("set", ifname=port.ifname, state="up")
                shape = self.shape_of(port)
                index = tc.shape(ipr, shape)
                self.registry.add("qdisc", node=name, ifname=port.ifname,
                                  handle=tc.classid_str(tc.ROOT), layout=shape.layout)
                self.ifindex[port_key(port)] = index
                ipr.addr("add", index=index, address=port.ip, prefixlen=port.prefixlen)
                ipr.neigh("add", dst=port.peer_ip, lladdr=mac_for(port.peer_ip), ifindex=index,
                          state=NUD_PERMANENT)

    def _route(self, name: str) -> None:
        """Once every port of ``name`` has carrier, its routes (a router of a routed fabric:
        none, FRR's are learnt)."""
        with IPRoute() as ipr:
            tc.wait_for_carrier(ipr, [p.ifname for p in self.topo.ports[name]])
            bgp = self.routed and self.topo.roles[name] == "router"  # FRR's, not labkit's
            for route in [] if bgp else self.topo.routes(name):
                dst = {} if route.dst == "default" else {"dst": route.dst}
                if route.src:
                    dst["prefsrc"] = route.src
                if len(route.nexthops) == 1:
                    ipr.route("add", gateway=route.nexthops[0], **dst)
                else:  # family given explicitly: pyroute2 0.9 fails to infer it for multipath
                    ipr.route("add", family=socket.AF_INET,
                              multipath=[{"gateway": gw} for gw in route.nexthops], **dst)

    def host_routes(self, node: str) -> dict[str, str]:
        """Each host subnet ``node``'s kernel routes now, and its next hops."""
        def body() -> dict[str, str]:
            with IPRoute() as ipr:
                return routewatch.host_routes(ipr)
        return self.ns[node].run(body)

    def shape_of(self, port: Port) -> tc.PortShape:
        """How ``port`` is shaped: a router's ports by the router layout, a host's NIC by
        the host layout, NVLink ports (a switch's, a GPU's second) with one FIFO."""
        link, role = port.link, self.topo.roles[port.node]
        layout = (self.router_layout if role == "router" else "fifo" if role == "nvswitch"
                  or port is not self.topo.ports[port.node][0] else self.host_layout)
        return tc.PortShape(port.ifname, link.rate_mbps, link.buffer_kb * 1024, link.mtu,
                            layout, self.pausable)

    def interact(self) -> None:
        """Mininet's own command line on this fabric (``g1 ping -c 3 g5``, ``leaf1 tc -s
        qdisc``); returns on ``exit`` or end of input."""
        from mininet.cli import CLI

        CLI(self.net)

    def handle(self, port: Port) -> PortHandle:
        """The namespace, name and ifindex of ``port``."""
        return PortHandle(self.ns[port.node], port.ifname, self.ifindex[port_key(port)],
                          port_key(port))

    def nic(self, host: str) -> PortHandle:
        """The handle of ``host``'s one NIC."""
        return self.handle(self.topo.ports[host][0])

    def host_shape(self, host: str) -> tc.PortShape:
        """How ``host``'s NIC is shaped."""
        return self.shape_of(self.topo.ports[host][0])

    def popen(self, node: str, argv: list[str], what: str,
              group: cgroups.Cgroup | None = None, **kwargs):
        """Start ``argv`` inside ``node``'s namespace, in cgroup ``group`` (default: the
        fabric's), which it joins before it runs anything, and record the process."""
        group = group or self.group
        if group is None:
            proc = self.nodes[node].popen(argv, **kwargs)
        else:
            fd = os.open(group.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), fd)
            try:
                proc = self.nodes[node].popen(cgroups.joining(argv, fd), **kwargs)
            finally:
                os.close(fd)
        self.registry.add_process(proc.pid, f"{what} on {node}")
        return proc

    def stop(self) -> None:
        """Tear down by the registry: agents, then node shells (their namespaces, veths,
        qdiscs and filters go with them), then pins."""
        for ns in self.ns.values():
            ns.close()
        self.ns.clear()
        try:
            self.registry.teardown()
        finally:
            for node in self.nodes.values():
                with suppress(Exception):
                    node.cleanup()  # closes the pty Mininet kept for the (now dead) shell
            self.nodes.clear()
            self.net = None

    def __enter__(self) -> Fabric:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
