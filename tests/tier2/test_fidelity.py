"""Dequeue fidelity: while packets wait, a port that keeps time sends each next packet one
wire time after the previous one. labkit's queue probe measures the gaps; perf, reading
the same tracepoint on its own, must see the same gaps."""

import copy
import re
import subprocess
import sys
import time

import polars as pl

from labkit import analysis, scenario, tc, topo
from labkit.abi import EV_GAP
from labkit.fabric import Fabric
from labkit.registry import Registry
from labkit.telemetry import EventReader, QueueProbe
from labkit.traffic import roce
from tests.conftest import require
from tests.leaks import assert_no_leaks
from tests.tier2.test_telemetry import SMALL

RATE_MBPS = 50  # two batching senders keep it backlogged; this machine holds it


def test_gaps_agree_with_perf_and_the_port_keeps_time(fabric_ready, tmp_path):
    require(subprocess.run(["which", "perf"], capture_output=True).returncode == 0,
            "needs perf (make setup installs linux-perf)")
    doc = copy.deepcopy(SMALL)
    doc["defaults"]["link"] = {"rate_mbps": 1000, "mtu": 9000, "buffer_kb": 256}
    doc["fabric"]["links"][0]["rate_mbps"] = RATE_MBPS
    t = topo.Topology(scenario.parse(doc).fabric)
    template = roce.data_templates(0x101, 1024)["middle"]  # every packet the same size
    with Fabric(t, Registry("test-fidelity")) as f:
        port = f.handle(t.port_towards("r1", "h3"))
        probe = QueueProbe(sample_every=1)
        try:
            probe.watch(port.ns, port.ifindex, port.ifname)
            senders = [f.popen(h, [sys.executable, "-m", "labkit.traffic.sender",
                                   t.host_ip("h3"), "4", template.hex()], "sender",
                               stdout=subprocess.DEVNULL) for h in ("h1", "h2")]
            time.sleep(1)  # the queue fills and stays full
            events = EventReader(probe).start()
            # the independent tracer: perf on the same tracepoint, the same clock
            subprocess.run(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-a",
                            "-e", "qdisc:qdisc_dequeue",
                            "--filter", f"ifindex == {port.ifindex} && packets > 0",
                            "-o", str(tmp_path / "perf.data"), "--", "sleep", "2"],
                           check=True, capture_output=True)
            ours = [e for e in events.stop() if e[6] == EV_GAP]
            for s in senders:
                s.wait(timeout=20)
        finally:
            probe.close()
    gaps = pl.DataFrame([(e[0], port.ifname, e[2], e[3], e[1]) for e in ours],
                        schema=["t_ns", "port", "gap_ns", "bytes", "busy_bytes"], orient="row")
    fid = analysis.dequeue_fidelity(gaps, RATE_MBPS,
                                    tc.burst_bytes(RATE_MBPS * 1_000_000 // 8, 9000), 10_000.0)
    assert fid["pairs"] > 5000 and not fid["flagged"], fid
    assert fid["p99"] < 1.0  # no dequeue a whole wire time late, 99 times in 100

    script = subprocess.run(["perf", "script", "--ns", "-F", "time", "-i",
                             str(tmp_path / "perf.data")], capture_output=True, text=True,
                            check=True).stdout
    stamps = [float(s) for s in re.findall(r"(\d+\.\d+):", script)]
    theirs = pl.Series([(b - a) * 1e9 for a, b in zip(stamps, stamps[1:], strict=False)])
    assert len(theirs) > 5000
    # the same gaps: their median and p90 within 10 % of perf's (the issue asks 20 %). Both
    # sides keep gaps under 1.5 wire times: perf loses a few events under load (its gap then
    # spans two packets), labkit leaves such pairs out itself. perf stamps a hit 2-32 us
    # after labkit's program does (measured), which stretches its gaps' tail: at p90 its gaps
    # ran 5.1 % longer once in a CI run (192 vs 183 us). (Not the deviations' quantiles:
    # that jitter is as large as deviations of a few us from a 173 us wire time.)
    wire_ns = gaps["bytes"].median() * 8e3 / RATE_MBPS
    mine = gaps["gap_ns"].filter(gaps["gap_ns"] < 1.5 * wire_ns)
    theirs = theirs.filter(theirs < 1.5 * wire_ns)
    for q in (0.5, 0.9):
        assert abs(mine.quantile(q) - theirs.quantile(q)) <= 0.10 * theirs.quantile(q), \
            (q, mine.quantile(q), theirs.quantile(q))
    assert_no_leaks()
