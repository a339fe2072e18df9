"""Routers' kernel routes to the hosts as they change: read once, then from the kernel's own
notices (rtnetlink's IPv4 route group), one watcher thread in each router's namespace,
each change with the time it arrived (:class:`labkit.model.tables.RouteRow`). It reads
what a routed fabric (:mod:`labkit.kernel.frr`) decided where the packets are forwarded,
not from FRR. The notices come on a plain netlink socket, parsed by pyroute2: pyroute2's
own sockets queue what they read where ``select`` cannot see it, and open their socket in
the thread that first uses them.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import threading
import time

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import RTMGRP_IPV4_ROUTE
from pyroute2.netlink.rtnl.marshal import MarshalRtnl

from labkit.kernel.frr import HOST_SUBNETS
from labkit.kernel.netns import Netns
from labkit.model.tables import RouteRow

HOSTS = ipaddress.IPv4Network(HOST_SUBNETS)
MAIN_TABLE = 254
READY_S = 10.0


def via(msg) -> str:
    """A route message's next hops, sorted, space-separated ("" for none)."""
    hops = [hop.get_attr("RTA_GATEWAY") for hop in msg.get_attr("RTA_MULTIPATH") or []]
    if not hops and msg.get_attr("RTA_GATEWAY"):
        hops = [msg.get_attr("RTA_GATEWAY")]
    return " ".join(sorted(h for h in hops if h))


def host_route(msg) -> str | None:
    """The host subnet a route message is about (``10.0.5.0/24``), or None."""
    dst = msg.get_attr("RTA_DST")
    if msg["event"] not in ("RTM_NEWROUTE", "RTM_DELROUTE") or dst is None or \
            msg.get_attr("RTA_TABLE", msg["table"]) != MAIN_TABLE:
        return None
    net = ipaddress.IPv4Network(f"{dst}/{msg['dst_len']}", strict=False)
    return str(net) if net.subnet_of(HOSTS) else None


def host_routes(ipr: IPRoute) -> dict[str, str]:
    """Each host subnet the namespace ``ipr`` was opened in routes, and its next hops
    (:func:`via`)."""
    return {dst: hops for msg in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE)
            if (dst := host_route(msg)) and (hops := via(msg))}


class RouteWatch:
    """Every given router's host routes, from :meth:`start` until :meth:`stop`, in
    ``rows`` (appended to by the watchers' threads). A watcher that fails fails the run:
    :meth:`start` or :meth:`stop` raise what it met, rather than leave its rows cut short."""

    def __init__(self, routers: dict[str, Netns]):
        self.routers = routers
        self.rows: list[RouteRow] = []
        self.errors: list[str] = []  # what a watcher met, "<router>: <error>"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """A watcher in each router's namespace, each once it has read its routes."""
        for router, ns in self.routers.items():
            ready = threading.Event()
            thread = ns.thread(functools.partial(self._guarded, router, ready),
                               f"labkit-routes-{router}")
            thread.start()
            self._threads.append(thread)
            if not ready.wait(READY_S) or self.errors:
                raise RuntimeError(f"could not watch {router}'s routes: "
                                   f"{'; '.join(self.errors) or 'no answer'}")

    def _guarded(self, router: str, ready: threading.Event) -> None:
        try:
            self._watch(router, ready)
        except Exception as exc:  # noqa: BLE001 (raised again by start or stop)
            self.errors.append(f"{router}: {exc!r}")
            ready.set()

    def _watch(self, router: str, ready: threading.Event) -> None:
        """Inside ``router``'s namespace: its routes now, then each change."""
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            sock.bind((0, RTMGRP_IPV4_ROUTE))  # before the dump: no change falls between
            sock.settimeout(0.1)
            with IPRoute() as ipr:
                now = time.monotonic_ns()
                self.rows += [RouteRow(now, router, dst, hops, "start")
                              for dst, hops in host_routes(ipr).items()]
            ready.set()
            marshal = MarshalRtnl()
            while not self._stop.is_set():
                try:
                    data = sock.recv(1 << 16)
                except TimeoutError:
                    continue
                now = time.monotonic_ns()
                for msg in marshal.parse(data):
                    if dst := host_route(msg):
                        gone = msg["event"] == "RTM_DELROUTE"
                        self.rows.append(RouteRow(now, router, dst, "" if gone else via(msg),
                                                  "del" if gone else "new"))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        errors, self.errors = self.errors, []  # raised once
        if errors:
            raise RuntimeError(f"the routers' routes were not all recorded: {'; '.join(errors)}")
