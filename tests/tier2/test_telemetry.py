"""Telemetry cross-check on a real queue.

A steady queue on one HTB port of known rate: two hosts flood a third through a
router whose port towards it is the bottleneck. The median time in the queue
measured by the tracepoints must agree with backlog ÷ rate read over netlink,
within ±15 %.
"""

import statistics
import time

from labkit.kernel import tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.kernel.telemetry import EventReader, QueueProbe
from labkit.model import scenario, topo
from labkit.model.abi import EV_SOJOURN
from tests.leaks import assert_no_leaks

RATE_MBPS = 40
SMALL = {
    "name": "steady-queue",
    "defaults": {"link": {"rate_mbps": 100, "mtu": 1500, "buffer_kb": 256}},
    "fabric": {"routers": ["r1"], "hosts": {"gpu": {"r1": ["h1", "h2", "h3"]}},
               "links": [{"between": ["h3", "r1"], "rate_mbps": RATE_MBPS}],
               "bottlenecks": [["r1", "h3"]]},
    "traffic": [{"kind": "allreduce", "ranks": ["h1", "h2"], "size_bytes": 1024,
                 "iterations": 1}],
}
FLOOD = ("import socket, sys, time\n"
         "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "end = time.monotonic() + float(sys.argv[2]); data = bytes(1400)\n"
         "while time.monotonic() < end:\n"
         "    s.sendto(data, (sys.argv[1], 9000))\n")


def backlog_samples(ifindex: int, seconds: float) -> list[int]:
    """The port's class backlog every 10 ms (run inside the port's namespace)."""
    rows = []
    with tc.StatsReader() as reader:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rows += [s.backlog_bytes for s in reader.read(ifindex)]
            time.sleep(0.01)
    return rows


def test_sojourn_agrees_with_backlog_over_rate(fabric_ready):
    t = topo.Topology(scenario.parse(SMALL).fabric)
    with Fabric(t, Registry("test-telemetry")) as f:
        port = t.port_towards("r1", "h3")
        ns, ifindex = f.ns["r1"], f.handle(port).ifindex
        probe = QueueProbe(sample_every=1)
        try:
            probe.watch(ns, ifindex, port.ifname)
            floods = [f.popen(h, ["python3", "-c", FLOOD, t.host_ip("h3"), "4"], "flood")
                      for h in ("h1", "h2")]
            time.sleep(1.5)  # the queue fills and stays full
            events = EventReader(probe).start()
            backlog = ns.run(backlog_samples, ifindex, 2.0)
            sojourns = [e[2] for e in events.stop() if e[6] == EV_SOJOURN]
            for p in floods:
                p.wait(timeout=10)
        finally:
            probe.close()
    expected_ns = statistics.median(backlog) / (RATE_MBPS * 1e6 / 8) * 1e9
    measured_ns = statistics.median(sojourns)
    assert len(sojourns) > 1000 and expected_ns > 10e6  # a real, steady queue
    assert abs(measured_ns - expected_ns) <= 0.15 * expected_ns, (measured_ns, expected_ns)
    assert_no_leaks()
