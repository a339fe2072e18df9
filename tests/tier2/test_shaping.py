"""Kernel-side enforcement: an unmodified iperf3 held to the rate a controller sets.

h1 -> r1 -> h2 at 100 Mbit/s, h1's NIC in the held layout; iperf3 (TCP, the C tool,
knowing nothing of labkit) runs from h1 to h2. A controller's decision (a valve
setting) moves h1's held class; its output, read from the kernel's own class
counters every 2 ms, must follow within 20 ms, and come back once released.
"""

import subprocess
import threading
import time

from labkit import scenario, tc, topo
from labkit.control.shaper import HELD_LANE, Shaper
from labkit.control.valve import Valves
from labkit.fabric import Fabric
from labkit.lanes import Classifier
from labkit.registry import Registry
from tests.leaks import assert_no_leaks

LINK_MBPS, HELD_MBPS = 100, 10
PATH = scenario.parse({
    "name": "held-nic",
    "defaults": {"link": {"rate_mbps": LINK_MBPS, "mtu": 9000, "buffer_kb": 1024}},
    "fabric": {"routers": ["r1"], "hosts": {"storage": {"r1": ["h1"]}, "gpu": {"r1": ["h2"]}},
               "bottlenecks": [["r1", "h2"]]},
    "traffic": [{"kind": "allreduce", "ranks": ["h2", "h1"], "size_bytes": 1024,
                 "iterations": 1}],
}, "test_shaping.py")


def sample(ifindex: int, stop: threading.Event, rows: list) -> None:
    """(t_ns, bytes sent by the held class) every 2 ms, in h1's namespace."""
    with tc.StatsReader() as reader:
        while not stop.wait(0.002):
            held = [s for s in reader.read(ifindex) if s.classid == tc.HELD_CLASS]
            rows.append((time.monotonic_ns(), held[0].bytes))


def mbps_between(rows, t0: int, t1: int) -> float:
    inside = [r for r in rows if t0 <= r[0] <= t1]
    (ta, ba), (tb, bb) = inside[0], inside[-1]
    return (bb - ba) * 8 / ((tb - ta) / 1e9) / 1e6


def test_an_unmodified_iperf3_is_held_within_20_ms_and_released(fabric_ready):
    t = topo.Topology(PATH.fabric)
    with Fabric(t, Registry("test-shaping"), host_layout="held") as f:
        classifier = Classifier(PATH.lanes, "fifo")
        valves = Valves(classifier.shared.maps["lk_config"])
        shaper = None
        try:
            nic = f.nic("h1")
            valves.attach("h1", nic.ns, nic.ifname, nic.ifindex,
                          vip_class=tc.LANE_CLASS["vip"])
            shaper = Shaper(valves, f, ["h1"], lead_ms=5).start()
            server = f.popen("h2", ["iperf3", "-s", "-1"], "iperf3 server",
                             stdout=subprocess.DEVNULL)
            time.sleep(0.3)
            client = f.popen("h1", ["iperf3", "-c", t.host_ip("h2"), "-t", "4"], "iperf3",
                             stdout=subprocess.DEVNULL)
            rows: list = []
            stop = threading.Event()
            sampler = f.ns["h1"].thread(lambda: sample(nic.ifindex, stop, rows), "sampler")
            sampler.start()
            time.sleep(1.5)
            held_at = time.monotonic_ns()
            valves.set("h1", HELD_LANE, "test: hold", mbps=HELD_MBPS)
            time.sleep(1.0)
            released_at = time.monotonic_ns()
            valves.set("h1", HELD_LANE, "test: release", mbps=None)
            time.sleep(1.0)
            stop.set()
            sampler.join()
            client.wait(timeout=10)
            server.wait(timeout=10)
        finally:
            if shaper:
                shaper.stop()
            valves.close()
            classifier.close()
    ms = 1_000_000
    before = mbps_between(rows, held_at - 500 * ms, held_at)
    # from 20 ms after the decision on, every 100 ms window at the held rate: a window
    # may also carry one GSO segment train (64 KiB, the unit HTB dequeues; 5 Mbit/s here)
    windows = [mbps_between(rows, held_at + k * ms, held_at + (k + 100) * ms)
               for k in range(20, 900, 100)]
    after = mbps_between(rows, released_at + 100 * ms, released_at + 900 * ms)
    assert before > 0.6 * LINK_MBPS, before
    assert max(windows) <= HELD_MBPS + 65536 * 8 / 0.1 / 1e6 + 0.5, windows
    assert after > 0.6 * LINK_MBPS, after
    assert shaper.changes == 2
    assert_no_leaks()


def _bfifo_limits() -> dict[str, int]:
    """Leaf qdisc handle -> bfifo limit (bytes) of every interface in this namespace."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {f"{q['index']}/{q['handle'] >> 16:x}": q.get_attr("TCA_OPTIONS")["limit"]
                for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "bfifo"}


def test_only_a_held_class_gets_the_short_queue(fabric_ready):
    """Every leaf queue holds the link's buffer, except the held class of a held NIC (whose
    handle 20: is the normal lane's on a lanes port: a short queue there would starve
    normal traffic at the routers)."""
    t = topo.Topology(PATH.fabric)
    with Fabric(t, Registry("test-held-queues"), router_layout="lanes", host_layout="held") as f:
        router = f.ns["r1"].run(_bfifo_limits)
        host = f.ns["h1"].run(_bfifo_limits)
    assert len(router) == 6 and set(router.values()) == {1024 * 1024}
    assert sorted(host.values()) == [tc.HELD_BUFFER_BYTES, 1024 * 1024]
    assert_no_leaks()
