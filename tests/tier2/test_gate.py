"""Kernel-side enforcement: an unmodified iperf3 held at its host's gate.

h1 -> r1 -> h2 at 100 Mbit/s, h1's NIC held (its valve is its gate); iperf3 (TCP, the
C tool, knowing nothing of labkit) runs from h1 to h2. A controller's decisions (valve
settings) must show in h1's output, read from the kernel's own class counters every
2 ms, within 20 ms: a rate, a hold (nothing new admitted; what the rate had queued gone
within 60 ms), a release; and TCP must come back within 20 ms of the release (woken),
with no retransmission timeout at any point.
"""

import json
import subprocess
import threading
import time

from labkit.kernel import tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.gates import Gates
from labkit.kernel.lanes import Classifier
from labkit.kernel.registry import Registry
from labkit.kernel.valve import GATE_LANE, Valves
from labkit.model import scenario, topo
from tests.leaks import assert_no_leaks

LINK_MBPS, RATE_MBPS, HOLD_MBPS = 100, 20, 0.1
PATH = scenario.parse({
    "name": "held-nic",
    "defaults": {"link": {"rate_mbps": LINK_MBPS, "mtu": 9000, "buffer_kb": 1024}},
    "fabric": {"routers": ["r1"], "hosts": {"storage": {"r1": ["h1"]}, "gpu": {"r1": ["h2"]}},
               "bottlenecks": [["r1", "h2"]]},
    "traffic": [{"kind": "allreduce", "ranks": ["h2", "h1"], "size_bytes": 1024,
                 "iterations": 1}],
}, "test_gate.py")
MS = 1_000_000


def sample(ifindex: int, stop: threading.Event, rows: list) -> None:
    """(t_ns, bytes sent by the held class) every 2 ms, in h1's namespace."""
    with tc.StatsReader() as reader:
        while not stop.wait(0.002):
            held = [s for s in reader.read(ifindex) if s.classid == tc.HELD_CLASS]
            rows.append((time.monotonic_ns(), held[0].bytes))


def tcp_timeouts() -> int:
    """Retransmission timeouts of this namespace's TCP so far."""
    out = subprocess.run(["nstat", "-az", "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["kernel"].get("TcpExtTCPTimeouts", 0)


def bytes_between(rows, t0: int, t1: int) -> int:
    inside = [r for r in rows if t0 <= r[0] <= t1]
    return inside[-1][1] - inside[0][1]


def mbps_between(rows, t0: int, t1: int) -> float:
    inside = [r for r in rows if t0 <= r[0] <= t1]
    (ta, ba), (tb, bb) = inside[0], inside[-1]
    return (bb - ba) * 8 / ((tb - ta) / 1e9) / 1e6


def test_an_unmodified_iperf3_is_held_within_20_ms_and_released(fabric_ready):
    t = topo.Topology(PATH.fabric)
    with Fabric(t, Registry("test-gate"), host_layout="held") as f:
        classifier = Classifier(PATH.lanes, "fifo")
        valves = Valves(classifier.shared.maps.lk_config)
        gates = None
        try:
            nic = f.nic("h1")
            valves.open("h1", vip_class=tc.LANE_CLASS["vip"])
            valves.attach("h1", nic.ns, nic.ifname, nic.ifindex)
            gates = Gates(valves, f, ["h1"]).start()
            server = f.popen("h2", ["iperf3", "-s", "-1"], "iperf3 server",
                             stdout=subprocess.DEVNULL)
            time.sleep(0.3)
            client = f.popen("h1", ["iperf3", "-c", t.host_ip("h2"), "-t", "4"], "iperf3",
                             stdout=subprocess.DEVNULL)
            rows: list = []
            stop = threading.Event()
            sampler = f.ns["h1"].thread(lambda: sample(nic.ifindex, stop, rows), "sampler")
            sampler.start()
            time.sleep(1.0)
            timeouts_before = f.ns["h1"].run(tcp_timeouts)
            limited_at = time.monotonic_ns()
            valves.set("h1", GATE_LANE, "test: a rate", mbps=RATE_MBPS)
            time.sleep(0.8)
            held_at = time.monotonic_ns()
            valves.set("h1", GATE_LANE, "test: hold", mbps=HOLD_MBPS)
            time.sleep(0.5)
            released_at = time.monotonic_ns()
            valves.set("h1", GATE_LANE, "test: release", mbps=None)
            time.sleep(0.6)
            timeouts = f.ns["h1"].run(tcp_timeouts) - timeouts_before
            stop.set()
            sampler.join()
            client.wait(timeout=10)
            server.wait(timeout=10)
        finally:
            if gates:
                gates.stop()
            valves.close()
            classifier.close()
    before = mbps_between(rows, limited_at - 500 * MS, limited_at)
    # from 20 ms after the decision: the rate, plus the bucket (50 ms of it) once
    limited = mbps_between(rows, limited_at + 20 * MS, held_at)
    # a hold admits nothing new at once; what the rate had queued (at most the gate's bucket,
    # 50 ms of it) leaves at the link once HTB's debt for the last packet at the rate (one
    # 64 KiB packet: 26 ms) is paid
    queued = bytes_between(rows, held_at + 20 * MS, held_at + 60 * MS)
    held = mbps_between(rows, held_at + 60 * MS, released_at)
    back = mbps_between(rows, released_at + 2 * MS, released_at + 22 * MS)
    after = mbps_between(rows, released_at + 100 * MS, released_at + 600 * MS)
    assert before > 0.6 * LINK_MBPS, before
    assert 0.5 * RATE_MBPS < limited <= RATE_MBPS * (1 + 0.05 / 0.78) + 1, limited
    assert queued <= RATE_MBPS * 1e6 / 8 * 0.05 + 65536, queued
    assert held < 0.1, held  # segments with data are refused: only what has none leaves
    # woken, not left to a 200 ms timer (which would send nothing in these 20 ms); a quarter
    # of the link, as a 2 ms sampler on a busy machine can lose a few ms of the window
    assert back > 0.25 * LINK_MBPS, back
    assert after > 0.6 * LINK_MBPS, after
    assert timeouts == 0
    assert gates.wakes == 1  # the release; a lower rate needs no waking
    assert_no_leaks()


def _bfifo_limits() -> dict[str, int]:
    """Leaf qdisc handle -> bfifo limit (bytes) of every interface in this namespace."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {f"{q['index']}/{q['handle'] >> 16:x}": q.get_attr("TCA_OPTIONS")["limit"]
                for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "bfifo"}


def test_every_leaf_queue_holds_the_links_buffer(fabric_ready):
    """A held class's queue too: the gate in front of it bounds what waits there."""
    t = topo.Topology(PATH.fabric)
    with Fabric(t, Registry("test-held-queues"), router_layout="lanes", host_layout="held") as f:
        router = f.ns["r1"].run(_bfifo_limits)
        host = f.ns["h1"].run(_bfifo_limits)
    assert len(router) == 6 and set(router.values()) == {1024 * 1024}
    assert len(host) == 2 and set(host.values()) == {1024 * 1024}
    assert_no_leaks()
