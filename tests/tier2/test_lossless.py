"""Link-level pause for real: two unmodified UDP senders (iperf3) on leaf1 send to g3
behind leaf2, 180 Mbit/s into a 100 Mbit/s uplink and then a 50 Mbit/s host link. Lossy,
the fabric drops; lossless, leaf2 pauses leaf1's uplink, whose queue fills and pauses the
senders' NICs in turn (hop by hop), nothing is dropped, and g3's link still runs at its
rate. A whole scenario run keeps the ring All-Reduce from losing or resending anything."""

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from pyroute2 import IPRoute

from labkit.kernel import tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.pauser import Pauser
from labkit.kernel.registry import Registry
from labkit.model import lossless, scenario
from labkit.model.topo import Topology
from labkit.runs import runner
from tests.conftest import free_port
from tests.leaks import assert_no_leaks

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
RATE_MBPS, LAST_MBPS, BUFFER_KB, SECONDS = 100, 50, 1024, 3

DOC = {"name": "pause-test",
       "defaults": {"link": {"rate_mbps": RATE_MBPS, "mtu": 9000, "buffer_kb": BUFFER_KB}},
       "fabric": {"routers": ["leaf1", "leaf2"],
                  "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3"]}},
                  "links": [["leaf1", "leaf2"],
                            {"between": ["g3", "leaf2"], "rate_mbps": LAST_MBPS}],
                  "bottlenecks": [["leaf1", "leaf2"]]},
       "traffic": [{"kind": "allreduce", "algo": "ring", "ranks": "gpu",
                    "size_bytes": 1 << 20, "iterations": 1}]}

TOPO = Topology(scenario.parse(DOC).fabric)
UPLINK, LAST = TOPO.port_towards("leaf1", "leaf2"), TOPO.port_towards("leaf2", "g3")


def blast(fabric, topo) -> list[dict]:
    """g1 and g2 each send 90 Mbit/s of UDP to g3 for SECONDS: 180 into 100."""
    ports = [free_port() for _ in range(2)]
    servers = [fabric.popen("g3", ["iperf3", "-s", "-1", "-p", str(p)], "iperf3 server",
                            stdout=subprocess.DEVNULL) for p in ports]
    time.sleep(0.5)
    clients = [fabric.popen(g, ["iperf3", "-c", topo.host_ip("g3"), "-p", str(p), "-u",
                                "-b", "90M", "-l", "8000", "-t", str(SECONDS), "-J"],
                            "iperf3 client", stdout=subprocess.PIPE)
               for g, p in zip(("g1", "g2"), ports, strict=True)]
    out = [json.loads(c.communicate(timeout=SECONDS + 30)[0])["end"]["sum"] for c in clients]
    for s in servers:
        s.wait(timeout=10)
    return out


class Backlog:
    """The uplink's backlog, sampled every millisecond while the senders run."""

    def __init__(self, fabric, port):
        self.ns, self.ifname, self.samples = fabric.ns[port.node], port.ifname, []
        self.done = threading.Event()
        self.thread = self.ns.thread(self._sample, "backlog")

    def _sample(self):
        with IPRoute() as ipr, tc.StatsReader() as reader:
            (index,) = ipr.link_lookup(ifname=self.ifname)
            while not self.done.is_set():
                self.samples.append(sum(c.backlog_bytes for c in reader.read(index)))
                time.sleep(0.001)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def drops_at(fabric, port) -> int:
    def read():
        with IPRoute() as ipr, tc.StatsReader() as reader:
            (index,) = ipr.link_lookup(ifname=port.ifname)
            return sum(c.drops for c in reader.read(index))
    return fabric.ns[port.node].run(read)


class Blasted(NamedTuple):
    sent: list[dict]  # each iperf3 client's sums
    rows: list  # the pauses (PauseRow)
    errors: list[str]  # the pauser's
    drops: int  # at the uplink and the last link
    peak: int  # the last link's largest backlog, bytes
    queue: lossless.Queue  # the last link's, as planned

    def received_mbps(self) -> float:
        return sum(s["bits_per_second"] * (1 - s["lost_percent"] / 100)
                   for s in self.sent) / 1e6


def blasted(lossless_on: bool, unseen_dequeues: bool = False) -> Blasted:
    """:func:`blast` through DOC's fabric, lossless or not; ``unseen_dequeues``: the pause
    program's dequeue half detached once the pauser runs, so that no dequeue sends an XON
    (as when the kernel skips the program at the one dequeue that crosses Xon)."""
    fabric = Fabric(TOPO, Registry(f"test-pause-{lossless_on}"), pausable=lossless_on)
    with fabric:
        plan = lossless.queues(TOPO, ("vip",), "fifo")
        (queue,) = [q for q in plan if q.port == LAST]
        pauser = Pauser(fabric, plan).start() if lossless_on else None
        if pauser and unseen_dequeues:
            _, dequeues = pauser.links  # lk_pause_enqueue's, lk_pause_dequeue's
            dequeues.close()
        try:
            with Backlog(fabric, LAST) as backlog:
                sent = blast(fabric, TOPO)
        finally:
            rows = pauser.stop() if pauser else []
            if pauser:
                pauser.close()
        drops = drops_at(fabric, UPLINK) + drops_at(fabric, LAST)
    assert_no_leaks()
    return Blasted(sent, rows, pauser.errors if pauser else [], drops, max(backlog.samples),
                   queue)


@pytest.mark.parametrize("lossless_on", [False, True], ids=["lossy", "lossless"])
def test_pauses_spread_hop_by_hop_and_nothing_is_dropped(fabric_ready, lossless_on):
    b = blasted(lossless_on)
    if not lossless_on:  # the same load without pause: the fabric drops
        assert b.drops > 100
        return
    rows, queue = b.rows, b.queue
    assert b.drops == 0 and sum(s["lost_packets"] for s in b.sent) == 0
    assert b.received_mbps() > 0.85 * LAST_MBPS, "resumed senders keep the last link busy"
    assert queue.xoff_bytes <= b.peak < BUFFER_KB * 1024, "pauses start at xoff, in time"
    assert len(rows) > 20 and not b.errors
    who_paused_whom = {(r.cause, r.port) for r in rows}
    assert (f"leaf2/{LAST.ifname}", f"leaf1/{UPLINK.ifname}") in who_paused_whom
    assert {(f"leaf1/{UPLINK.ifname}", f"{g}/{g}-eth0") for g in ("g1", "g2")} <= who_paused_whom
    reactions = sorted(r.reaction_ns for r in rows)
    assert reactions[len(reactions) // 2] < lossless.REACTION_BUDGET_S * 1e9
    # a pause lasts at least as long as the queue takes to drain from xoff to xon
    drain_ns = (queue.xoff_bytes - queue.xon_bytes) * 8 / LAST_MBPS * 1e3
    hop_one = [r.paused_ns for r in rows if r.cause == f"leaf2/{LAST.ifname}"]
    assert sorted(hop_one)[len(hop_one) // 2] > 0.5 * drain_ns


def test_the_watchdog_ends_a_pause_whose_xon_no_dequeue_sent(fabric_ready):
    """No dequeue sends an XON (the program's dequeue half detached): each pause still
    ends, by the watchdog, once its queue is empty. Without it the first pause would hold
    to the end and the senders would stand still; with it nothing is dropped, the pauses
    keep coming and going, and the last link still carries well over half its rate (it
    idles a moment each time its queue empties before its neighbour resumes)."""
    b = blasted(True, unseen_dequeues=True)
    assert b.drops == 0 and sum(s["lost_packets"] for s in b.sent) == 0
    assert len(b.rows) > 20 and not b.errors
    assert max(r.paused_ns for r in b.rows) < SECONDS * 1e9 / 4, b.rows
    assert b.received_mbps() > 0.6 * LAST_MBPS, b.received_mbps()


def test_a_lossless_run_drops_no_vip_packet_and_resends_nothing(fabric_ready, tmp_path):
    sc = scenario.load(TOPOLOGIES / "lossless.yaml")
    run = runner.run(sc, policies=["fifo"], duration=6, out=tmp_path / "run")
    fifo = run.summary.policies["fifo"]
    assert fifo.bottleneck.lanes.vip.drops == 0
    assert fifo.transport.retransmits == 0
    pauses = fifo.lossless
    assert pauses.pauses > 10 and pauses.reaction_us.p50 < pauses.packet_us
    paused = {p.split("/")[0] for p in pauses.paused_ms}
    assert {"leaf2", "leaf3"} <= paused, "spine1 paused the ring's and the storage's uplinks"
    assert_no_leaks()
