"""lk_dctcp against the DCTCP paper's queue (Alizadeh et al., SIGCOMM 2010; Mininet-HiFi's
reproduction, CoNEXT 2012): long-lived iperf3 flows into one 100 Mbit/s port with a
425-packet buffer. DCTCP: the port marks at K = 20 packets and the senders run lk_dctcp,
and the queue stays near K. TCP: a drop-tail port and the kernel's CUBIC, which fills
most of the buffer. ``run_paper`` runs either; the test checks the mechanism."""

import json
import statistics
import subprocess
import threading
import time

from labkit.kernel import cgroups, tc
from labkit.kernel.dctcp import Dctcp, registered
from labkit.kernel.ecnmark import EcnMarks
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.model import scenario, topo
from tests.leaks import assert_no_leaks

RATE_MBPS, K, BUFFER_PACKETS, MTU = 100, 20, 425, 1500
FRAME = MTU + 14
SECONDS = 6
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
}, "test_dctcp.py")


def _backlog(ifindex: int, stop: threading.Event, rows: list) -> None:
    """(t_ns, bytes queued, bytes sent) at the port every 2 ms, in its router's namespace."""
    with tc.StatsReader() as reader:
        while not stop.wait(0.002):
            classes = reader.read(ifindex)
            rows.append((time.monotonic_ns(), sum(c.backlog_bytes for c in classes),
                         sum(c.bytes for c in classes)))


def run_paper(dctcp: bool, run_id: str, senders: tuple[str, ...] = ("s1", "s2"),
              chosen: tuple[str, ...] = ("s1", "s2", "g2")) -> dict:
    """Flows from ``senders`` to g2 for SECONDS, under lk_dctcp with marking at K, or CUBIC
    at a drop-tail port: the queue at r1's port to g2 and what the port sent (past slow
    start), its marks and lk_dctcp's windows."""
    t = topo.Topology(PAPER.fabric)
    registry = Registry(run_id)
    cc = Dctcp(registry.add) if dctcp else None
    try:
        with Fabric(t, registry, cgroup=cgroups.fabric_path(run_id, "paper")) as f:
            port = f.handle(t.port_towards("r1", "g2"))
            marks = EcnMarks(registry.add)
            try:
                if cc:
                    marks.attach(port.ns, port.ifname, port.ifindex, K, MTU)
                    cc.attach(f.group.path)
                    for host in chosen:
                        cc.select(f.ns[host])
                servers = [f.popen("g2", ["iperf3", "-s", "-1", "-p", str(5201 + i)],
                                   "iperf3 server", stdout=subprocess.DEVNULL)
                           for i in range(len(senders))]
                time.sleep(0.3)
                clients = [f.popen(h, ["iperf3", "-c", t.host_ip("g2"), "-p", str(5201 + i),
                                       "-t", str(SECONDS), "-J",
                                       *(() if cc else ("-C", "cubic"))], f"iperf3 on {h}",
                                   stdout=subprocess.PIPE, text=True)
                           for i, h in enumerate(senders)]
                time.sleep(1.5)  # past slow start
                rows: list = []
                stop = threading.Event()
                sampler = port.ns.thread(lambda: _backlog(port.ifindex, stop, rows), "sampler")
                sampler.start()
                time.sleep(SECONDS - 2.5)
                stop.set()
                sampler.join()
                reports = [c.communicate(timeout=20)[0] for c in clients]
                for s in servers:
                    s.wait(timeout=10)
                counts = marks.counts()
            finally:
                marks.close()
            samples = cc.samples() if cc else []
    finally:
        if cc:
            cc.close()
    queue = [b / FRAME for _, b, _ in rows]
    (t0, _, sent0), (t1, _, sent1) = rows[0], rows[-1]
    return {"median": statistics.median(queue), "p99": sorted(queue)[int(0.99 * len(queue))],
            "link_mbps": (sent1 - sent0) * 8 / ((t1 - t0) / 1e9) / 1e6, "marks": counts,
            "samples": samples,
            "cc": [json.loads(r)["end"].get("sender_tcp_congestion") for r in reports]}


def test_lk_dctcp_runs_the_flows_of_the_hosts_chosen_and_reacts_to_marks(fabric_ready):
    """s1 and g2 (the receiver) chosen, s2 not: s1's iperf3 runs lk_dctcp (ECN negotiated
    by the selector, before the SYN), s2's the namespace's default; the port marks past
    K, s1's windows meet those marks and alpha follows them; nothing is left after.

    The queue itself: :func:`test_the_papers_queue`."""
    run = run_paper(True, "test-dctcp", ("s1", "s2"), chosen=("s1", "g2"))
    assert run["cc"][0] == "lk_dctcp" and run["cc"][1] != "lk_dctcp", run["cc"]
    windows = [w for w in run["samples"] if w.dport == 5201]  # s1's, as a sender
    assert windows and not [w for w in run["samples"] if w.dport == 5202]  # s2 is not ours
    marked = [w for w in windows if w.marked]
    assert len(marked) > 100, len(marked)
    assert all(0 < w.alpha <= 1024 and w.marked <= w.acked for w in marked)
    assert max(w.cwnd for w in windows) < 10 * BUFFER_PACKETS  # a window, not garbage
    counts = run["marks"]["r1/r1-eth3"]
    assert 0 < counts["ce"] < counts["ect"]
    assert run["link_mbps"] >= 0.9 * RATE_MBPS, run["link_mbps"]
    assert not registered()
    assert_no_leaks()


def test_the_papers_queue(fabric_ready):
    """Two flows: under lk_dctcp with marking at K the queue's median is within [15, 25]
    packets (the paper and the reproduction: about 21), under CUBIC at a drop-tail port
    it fills most of the buffer (the reproduction: about 355 of 425), and the link is
    full in both."""
    tcp = run_paper(False, "test-dctcp-tcp")
    dctcp = run_paper(True, "test-dctcp")
    assert dctcp["cc"] == ["lk_dctcp", "lk_dctcp"] and tcp["cc"] == ["cubic", "cubic"]
    assert 15 <= dctcp["median"] <= 25, dctcp["median"]
    assert tcp["median"] >= 200, tcp["median"]
    for run in (dctcp, tcp):
        assert run["link_mbps"] >= 0.95 * RATE_MBPS, run["link_mbps"]
    assert not registered()
    assert_no_leaks()
