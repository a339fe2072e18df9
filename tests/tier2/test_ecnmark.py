"""Step marking at a real port, for traffic labkit did not write: two iperf3 flows into
one 100 Mbit/s port with a 425-packet buffer (the DCTCP paper's, and Mininet-HiFi's
reproduction of it). Marked CE past K = 20 packets, the kernel's own Reno, which
negotiated ECN, holds the queue within a few K; at a drop-tail port CUBIC fills most of
the buffer. Both fill the link. And a scenario's ``transport.ecn_k_packets`` marks at its
bottleneck ports and says so in the summary."""

from dataclasses import replace
from pathlib import Path

import labkit
from labkit.model import scenario
from tests.leaks import assert_no_leaks
from tests.paper import RATE_MBPS, K, two_flows

REPO = Path(__file__).resolve().parents[2]


def test_marking_at_k_holds_ecn_tcp_where_drop_tail_fills(fabric_ready):
    marked = two_flows("test-ecnmark", "reno")
    tail = two_flows("test-ecnmark-tail", "cubic", mark=False)
    assert marked.median <= 2 * K and marked.p99 <= 4 * K, marked
    assert tail.median >= 200, tail
    assert marked.mbps >= 0.95 * RATE_MBPS and tail.mbps >= 0.95 * RATE_MBPS
    counts = marked.marks["r1/r1-eth3"]
    assert 0 < counts["ce"] < counts["ect"]
    assert_no_leaks()


def test_a_scenario_marks_at_its_bottleneck_and_says_so(fabric_ready, tmp_path):
    sc = replace(scenario.load(REPO / "topologies/bottleneck.yaml"),
                 transport=scenario.TransportSpec(ecn_k_packets=K))
    run = labkit.run(sc, ["fifo"], duration=2, out=tmp_path / "run")
    queues = run.summary.policies["fifo"].queues
    assert queues is not None and queues.k_packets == K
    assert len(queues.ports) == 2  # both directions of leaf1-spine1
    port = queues.ports["spine1/spine1-eth0"]  # where the reads and the ring queue
    assert port.ce is not None and port.ect is not None
    assert 0 < port.ce <= port.ect  # the storage TCP negotiates ECN, RoCE does not
    assert port.queue_p99_packets is not None and port.queue_p99_packets > 0
    assert run.manifest.scenario["transport"] == {"ecn_k_packets": K}
    assert_no_leaks()
