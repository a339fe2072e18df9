"""Step marking at a real port, for traffic labkit did not write: two iperf3 flows into
one 100 Mbit/s port with a 425-packet buffer (the DCTCP paper's, and Mininet-HiFi's
reproduction of it). Marked CE past K = 20 packets, the kernel's own Reno, which
negotiated ECN, holds the queue within a few K; at a drop-tail port CUBIC fills most of
the buffer. Both fill the link. And a scenario's ``transport.ecn_k_packets`` marks at its
bottleneck ports and says so in the summary."""

import statistics
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import labkit
from labkit.kernel import cgroups, tc
from labkit.kernel.ecnmark import EcnMarks
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.model import scenario, topo
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
RATE_MBPS, K, BUFFER_PACKETS, MTU = 100, 20, 425, 1500
FRAME = MTU + 14
PAPER = scenario.parse({
    "name": "dctcp-paper",
    "defaults": {"link": {"rate_mbps": 1000, "mtu": MTU, "buffer_kb": 1024}},
    "fabric": {"routers": ["r1"], "hosts": {"storage": {"r1": ["s1", "s2"]},
                                            "gpu": {"r1": ["g1", "g2"]}},
               "links": [{"between": ["r1", "g2"], "rate_mbps": RATE_MBPS,
                          "buffer_kb": -(-BUFFER_PACKETS * FRAME // 1024)}],
               "bottlenecks": [["r1", "g2"]]},
    "traffic": [{"kind": "allreduce", "ranks": ["g1", "g2"], "size_bytes": 1024,
                 "iterations": 1}],
}, "test_ecnmark.py")


def _sample(ifindex: int, stop: threading.Event, rows: list) -> None:
    """(t_ns, bytes queued, bytes sent) at the port every 2 ms, in its router's namespace."""
    with tc.StatsReader() as reader:
        while not stop.wait(0.002):
            classes = reader.read(ifindex)
            rows.append((time.monotonic_ns(), sum(c.backlog_bytes for c in classes),
                         sum(c.bytes for c in classes)))


def two_flows(cc: str, mark: bool, run_id: str) -> dict:
    """s1 and s2 send to g2 with iperf3 (congestion control ``cc``) for 6 s; from 1.5 s
    on, the queue at r1's port to g2 (packets) and what it sent (Mbit/s)."""
    t = topo.Topology(PAPER.fabric)
    registry = Registry(run_id)
    with Fabric(t, registry, cgroup=cgroups.fabric_path(run_id, "paper")) as f:
        port = f.handle(t.port_towards("r1", "g2"))
        marks = EcnMarks(registry.add)
        try:
            if mark:
                marks.attach(port.ns, port.ifname, port.ifindex, K, MTU)
            servers = [f.popen("g2", ["iperf3", "-s", "-1", "-p", str(5201 + i)],
                               "iperf3 server", stdout=subprocess.DEVNULL) for i in range(2)]
            time.sleep(0.3)
            clients = [f.popen(h, ["iperf3", "-c", t.host_ip("g2"), "-p", str(5201 + i),
                                   "-t", "6", "-C", cc], f"iperf3 on {h}",
                               stdout=subprocess.DEVNULL)
                       for i, h in enumerate(("s1", "s2"))]
            time.sleep(1.5)  # past slow start
            rows: list = []
            stop = threading.Event()
            sampler = port.ns.thread(lambda: _sample(port.ifindex, stop, rows), "sampler")
            sampler.start()
            time.sleep(3.5)
            stop.set()
            sampler.join()
            for p in (*clients, *servers):
                assert p.wait(timeout=20) == 0
            counts = marks.counts()
        finally:
            marks.close()
    queue = [b / FRAME for _, b, _ in rows]
    (t0, _, sent0), (t1, _, sent1) = rows[0], rows[-1]
    return {"median": statistics.median(queue), "p99": sorted(queue)[int(0.99 * len(queue))],
            "mbps": (sent1 - sent0) * 8 / ((t1 - t0) / 1e9) / 1e6, "marks": counts}


def test_marking_at_k_holds_ecn_tcp_where_drop_tail_fills(fabric_ready):
    marked = two_flows("reno", True, "test-ecnmark")
    tail = two_flows("cubic", False, "test-ecnmark-tail")
    assert marked["median"] <= 2 * K and marked["p99"] <= 4 * K, marked
    assert tail["median"] >= 200, tail
    assert marked["mbps"] >= 0.95 * RATE_MBPS and tail["mbps"] >= 0.95 * RATE_MBPS
    counts = marked["marks"]["r1/r1-eth3"]
    assert 0 < counts["ce"] < counts["ect"]
    assert_no_leaks()


def test_a_scenario_marks_at_its_bottleneck_and_says_so(fabric_ready, tmp_path):
    sc = replace(scenario.load(REPO / "topologies/bottleneck.yaml"),
                 transport=scenario.TransportSpec(ecn_k_packets=K))
    run = labkit.run(sc, ["fifo"], duration=3, out=tmp_path / "run")
    queues = run.summary.policies["fifo"].queues
    assert queues is not None and queues.k_packets == K
    assert len(queues.ports) == 2  # both directions of leaf1-spine1
    port = queues.ports["spine1/spine1-eth0"]  # where the reads and the ring queue
    assert port.ce is not None and port.ect is not None
    assert 0 < port.ce <= port.ect  # the storage TCP negotiates ECN, RoCE does not
    assert port.queue_p99_packets is not None and port.queue_p99_packets > 0
    assert run.manifest.scenario["transport"] == {"ecn_k_packets": K}
    assert_no_leaks()
