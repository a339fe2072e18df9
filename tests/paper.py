"""The DCTCP paper's port, built by hand for the tier-2 tests of the marker and of
lk_dctcp (Alizadeh et al., SIGCOMM 2010; Mininet-HiFi's reproduction, CoNEXT 2012):
iperf3 flows from s1 and s2 into one 100 Mbit/s port (r1 to g2) with a 425-packet
buffer. The shipped scenario is ``topologies/dctcp-paper.yaml``."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field

from labkit.kernel import cgroups, tc
from labkit.kernel.dctcp import Dctcp
from labkit.kernel.ecnmark import EcnMarks
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.model import scenario, topo
from labkit.model.abi import DctcpSample

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
}, "tests/paper.py")


@dataclass
class Flows:
    """What the port saw past slow start: its queue (median, p99, in frames), the rate it
    sent at, its marks; each sender's congestion control, lk_dctcp's windows."""

    median: float
    p99: float
    mbps: float
    marks: dict[str, dict[str, int]]
    cc: list[str]
    windows: list[DctcpSample] = field(default_factory=list)


# an iperf3 interval line: "[  7]   5.00-6.00   sec  5.88 MBytes  49.3 Mbits/sec"
INTERVAL = re.compile(r"\]\s+([\d.]+)-([\d.]+)\s+sec\s+\S+ \S+\s+([\d.]+) ([KMG]?)bits/sec")
SCALE = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}


def settled_mbps(server_out: str) -> float:
    """A flow's goodput (Mbit/s) over the second half of its first test, from the
    per-second intervals its iperf3 server reported (the receiver's count, not labkit's):
    the share it settled at, past slow start and the first seconds of converging."""
    intervals = {}
    for line in server_out.split("- - -")[0].splitlines():  # the first test's intervals
        if m := INTERVAL.search(line):
            intervals[float(m[1])] = (float(m[2]), float(m[3]) * SCALE[m[4]])
    assert intervals, f"no interval in iperf3's report:\n{server_out}"
    end = max(e for e, _ in intervals.values())
    return statistics.fmean(mbps for start, (_, mbps) in intervals.items() if start >= end / 2)


def _sample(ifindex: int, stop: threading.Event, rows: list) -> None:
    """(t_ns, bytes queued, bytes sent) at the port every 2 ms, in its router's namespace."""
    with tc.StatsReader() as reader:
        while not stop.wait(0.002):
            classes = reader.read(ifindex)
            rows.append((time.monotonic_ns(), sum(c.backlog_bytes for c in classes),
                         sum(c.bytes for c in classes)))


def two_flows(run_id: str, cc: str | None = None, mark: bool = True,
              dctcp: tuple[str, ...] = ()) -> Flows:
    """s1 and s2 send to g2 for SECONDS with iperf3, under ``cc`` (``iperf3 -C``; None:
    each namespace's own, or lk_dctcp in the namespaces of ``dctcp``), the port marking
    past K when ``mark``."""
    t = topo.Topology(PAPER.fabric)
    registry = Registry(run_id)
    chosen = Dctcp(registry.add) if dctcp else None
    try:
        with Fabric(t, registry, cgroup=cgroups.fabric_path(run_id, "paper")) as f:
            port = f.handle(t.port_towards("r1", "g2"))
            marks = EcnMarks(registry.add)
            try:
                if mark:
                    marks.attach(port.ns, port.ifname, port.ifindex, K, MTU)
                if chosen:
                    chosen.attach(f.group.path)
                    for host in dctcp:
                        chosen.select(f.ns[host])
                servers = [f.popen("g2", ["iperf3", "-s", "-1", "-p", str(5201 + i)],
                                   "iperf3 server", stdout=subprocess.DEVNULL)
                           for i in range(2)]
                time.sleep(0.3)
                clients = [f.popen(h, ["iperf3", "-c", t.host_ip("g2"), "-p", str(5201 + i),
                                       "-t", str(SECONDS), "-J", *(("-C", cc) if cc else ())],
                                   f"iperf3 on {h}", stdout=subprocess.PIPE, text=True)
                           for i, h in enumerate(("s1", "s2"))]
                time.sleep(1.5)  # past slow start
                rows: list = []
                stop = threading.Event()
                sampler = port.ns.thread(lambda: _sample(port.ifindex, stop, rows), "sampler")
                sampler.start()
                time.sleep(SECONDS - 2.5)
                stop.set()
                sampler.join()
                reports = [c.communicate(timeout=20)[0] for c in clients]
                for p in (*clients, *servers):
                    assert p.wait(timeout=20) == 0
                counts = marks.counts()
            finally:
                marks.close()
            windows = chosen.samples() if chosen else []
    finally:
        if chosen:
            chosen.close()
    queue = [b / FRAME for _, b, _ in rows]
    (t0, _, sent0), (t1, _, sent1) = rows[0], rows[-1]
    return Flows(median=statistics.median(queue), p99=sorted(queue)[int(0.99 * len(queue))],
                 mbps=(sent1 - sent0) * 8 / ((t1 - t0) / 1e9) / 1e6, marks=counts,
                 cc=[json.loads(r)["end"].get("sender_tcp_congestion") for r in reports],
                 windows=windows)
