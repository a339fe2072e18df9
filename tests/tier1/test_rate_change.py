"""A link's rate changed on time (an event's ``rate_mbps``): the requests
:func:`labkit.kernel.tc.rate_requests` prepares, sent through a :class:`labkit.kernel.tc.Rtnl`
in the port's namespace, leave each of the port's HTB classes as :func:`labkit.kernel.tc.shape`
makes them for a port shaped at that rate, by iproute2's own reading (``tc -d class show``);
every class keeps its queue; and a change is sent in under 5 ms (a handful of system
calls: 0.2-1.6 ms in a run)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from pyroute2 import IPRoute

from labkit.kernel import tc
from labkit.kernel.netns import Netns
from tests.conftest import require

LAYOUTS = ("fifo", "lanes", "weights", "held")


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def namespace():
    """A namespace of this process's own with a veth pair, ``rc-a`` and ``rc-b``, up."""
    require(os.geteuid() == 0, "needs root")
    name = f"lkrc{os.getpid()}"
    sh("ip", "netns", "add", name)
    ns = None
    try:
        sh("ip", "-n", name, "link", "add", "rc-a", "type", "veth", "peer", "name", "rc-b")
        for dev in ("rc-a", "rc-b"):
            sh("ip", "-n", name, "link", "set", dev, "up")
        ns = Netns.inherited(os.open(f"/run/netns/{name}", os.O_RDONLY), name)
        yield name, ns
    finally:
        if ns:
            ns.close()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def classes(name: str, dev: str) -> list[str]:
    """The port's HTB classes as iproute2 reads them, each in full: its parent, leaf
    queue, priority, quantum, rate, ceiling, bursts and their raw buffer times (its JSON
    omits HTB's options, so the text)."""
    return sorted(sh("ip", "netns", "exec", name, "tc", "-d", "-raw", "class", "show",
                     "dev", dev).splitlines())


def qdiscs(name: str, dev: str) -> list[tuple[str, str]]:
    shown = json.loads(sh("ip", "netns", "exec", name, "tc", "-j", "qdisc", "show",
                          "dev", dev))
    return sorted((q["kind"], q["handle"]) for q in shown)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_prepared_rate_change_is_the_shape_of_a_port_at_that_rate(namespace, layout):
    name, ns = namespace
    before = tc.PortShape("rc-a", 100, 256 << 10, 1500, layout)
    after = tc.PortShape("rc-b", 35, 256 << 10, 1500, layout)  # shaped at the new rate

    def shape_both() -> int:
        with IPRoute() as ipr:
            tc.shape(ipr, after)
            return tc.shape(ipr, before)

    index = ns.run(shape_both)
    queues = qdiscs(name, "rc-a")
    requests = tc.rate_requests(index, before, after.rate_mbps)
    rtnl = ns.run(tc.Rtnl)  # opened in the namespace: its socket stays there
    try:
        start = time.perf_counter()
        for request in requests:
            rtnl.call(request)
        took = time.perf_counter() - start
        assert classes(name, "rc-a") == classes(name, "rc-b")
        assert qdiscs(name, "rc-a") == queues  # every class kept its queue
        for request in tc.rate_requests(index, before, before.rate_mbps):  # and back
            rtnl.call(request)
    finally:
        rtnl.close()
    assert classes(name, "rc-a") != classes(name, "rc-b")
    assert took < 0.005, took  # a handful of system calls, not tables of Python
