"""Dequeue fidelity: while packets wait, a port that keeps time sends each next packet one
wire time after the previous one. labkit's queue probe measures the gaps; the kernel's own
tracer (ftrace, in an instance of the test's, on the same tracepoint) must see the same
deviations, and a port that sent slower than its rate must be flagged."""

import copy
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import polars as pl

from labkit.analysis import fidelity
from labkit.kernel import tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.kernel.telemetry import EventReader, QueueProbe
from labkit.model import scenario, topo
from labkit.model.abi import EV_GAP, EV_SOJOURN
from labkit.model.summary import DequeueTiming
from tests.conftest import require
from tests.leaks import assert_no_leaks
from tests.tier2.test_telemetry import SMALL

RATE_MBPS = 50  # two batching senders keep it backlogged; this machine holds it
MTU = 9000
TRACING = Path("/sys/kernel/tracing")


@contextmanager
def ftrace_dequeues(ifindex: int):
    """The qdisc_dequeue events of one port (single packets), recorded by ftrace into an
    instance of this test's own (monotonic clock, the one labkit's programs read); yields
    a function that stops recording and returns the events' times in ns. The instance is
    removed on the way out."""
    inst = TRACING / "instances" / f"labkit-test-{os.getpid()}"
    inst.mkdir()
    try:
        (inst / "trace_clock").write_text("mono")
        (inst / "buffer_size_kb").write_text("16384")
        event = inst / "events/qdisc/qdisc_dequeue"
        (event / "filter").write_text(f"ifindex == {ifindex} && packets == 1")
        (event / "enable").write_text("1")

        def stop() -> list[int]:
            (event / "enable").write_text("0")
            text = (inst / "trace").read_text()
            assert "LOST" not in text, "ftrace lost events: a larger buffer is needed"
            return [round(float(s) * 1e9) for s in re.findall(r" (\d+\.\d+): qdisc_dequeue",
                                                               text)]
        yield stop
    finally:
        inst.rmdir()


def flood_and_measure(f: Fabric, t: topo.Topology, traced: bool = False):
    """Two batching senders fill the port towards h3; labkit's probe (and ftrace, when
    ``traced``) record 2 s of its dequeues. Returns (labkit's gaps frame, its sojourns in
    ns, ftrace's event times or None)."""
    port = f.handle(t.port_towards("r1", "h3"))
    probe = QueueProbe(sample_every=1)
    try:
        senders = [f.popen(h, [sys.executable, "-m", "labkit.traffic.hotpath",
                               t.host_ip("h3"), "4"], "sender",
                           stdout=subprocess.DEVNULL) for h in ("h1", "h2")]
        time.sleep(1)  # the queue fills and stays full (the senders go on 4 s in all,
        # a second past the recording)
        with ftrace_dequeues(port.ifindex) if traced else nullcontext() as stop_trace:
            # ftrace's probe is registered first, so it stamps each dequeue before
            # labkit's program runs and labkit's work never delays its stamps
            probe.watch(port.ns, port.ifindex, port.ifname)
            events = EventReader(probe).start()
            time.sleep(2)
            recorded = events.stop()
            theirs = stop_trace() if traced else None
        for s in senders:
            s.wait(timeout=20)
    finally:
        probe.close()
    gaps = pl.DataFrame([(e[0], port.ifname, e[2], e[3], e[1]) for e in recorded
                         if e[6] == EV_GAP],
                        schema=["t_ns", "port", "gap_ns", "bytes", "busy_bytes"], orient="row")
    sojourns = pl.Series([e[2] for e in recorded if e[6] == EV_SOJOURN])
    return gaps, sojourns, theirs


def one_port_fabric() -> topo.Topology:
    doc = copy.deepcopy(SMALL)
    doc["defaults"]["link"] = {"rate_mbps": 1000, "mtu": MTU, "buffer_kb": 256}
    doc["fabric"]["links"][0]["rate_mbps"] = RATE_MBPS
    return topo.Topology(scenario.parse(doc).fabric)


def fidelity_of(gaps: pl.DataFrame, sojourns: pl.Series, rate_mbps: float) -> DequeueTiming:
    return fidelity.dequeue_fidelity(gaps, rate_mbps,
                                     tc.burst_bytes(tc.bytes_per_s(rate_mbps), MTU),
                                     sojourns.quantile(0.99) / 1e3)


def test_a_port_the_machine_holds_keeps_time_as_ftrace_sees_it(fabric_ready):
    require(TRACING.joinpath("instances").is_dir(), "needs tracefs (make setup mounts it)")
    t = one_port_fabric()
    with Fabric(t, Registry("test-fidelity")) as f:
        gaps, sojourns, stamps = flood_and_measure(f, t, traced=True)
    fid = fidelity_of(gaps, sojourns, RATE_MBPS)
    assert fid.pairs > 5000 and not fid.flagged, fid
    assert fid.p99 < 1.0  # no dequeue a whole wire time late, 99 times in 100
    assert abs(fid.excess) < 0.02, fid

    # ftrace's deviations over the same span: every packet is the same size and the queue
    # is never empty, so each pair of consecutive dequeues is a back-to-back pair
    wire_ns = gaps["bytes"].median() * 8e3 / RATE_MBPS
    start, end = gaps["t_ns"].min(), gaps["t_ns"].max()
    theirs = (pl.DataFrame({"t_ns": stamps}).with_columns(pl.col("t_ns").diff().alias("gap_ns"))
              .drop_nulls().filter(pl.col("t_ns").is_between(start, end)))
    assert theirs.height > 5000
    dev = (theirs["gap_ns"] / wire_ns - 1).abs()
    # within 20 % of each other at p50 and p90, as the issue asks (measured: 1-4 %)
    for q, ours in (("p50", fid.p50), ("p90", fid.p90)):
        their = dev.quantile(float(q[1:]) / 100, interpolation="linear")
        assert abs(ours - their) <= 0.20 * their, (q, ours, their)
    assert_no_leaks()


def test_a_port_that_sends_slower_than_its_rate_is_flagged(fabric_ready):
    """The kernel's link is set to 40 Mbit/s under labkit's 50: what a machine that cannot
    dequeue at the rate would do to every gap (this VM keeps time at every rate it can fill;
    see docs/data-model.md), and labkit must say so."""
    t = one_port_fabric()
    with Fabric(t, Registry("test-fidelity")) as f:
        port = f.handle(t.port_towards("r1", "h3"))
        slower = tc.bytes_per_s(RATE_MBPS * 0.8)
        f.ns["r1"].run(_set_link_rate, port.ifname, slower)
        gaps, sojourns, _ = flood_and_measure(f, t)
    fid = fidelity_of(gaps, sojourns, RATE_MBPS)
    assert fid.pairs > 5000 and fid.flagged, fid
    assert 0.20 < fid.excess < 0.30, fid  # 50 / 40 - 1
    note = fidelity.late_reason(fid)
    assert "longer to send them than its rate allows" in note, note
    assert_no_leaks()


def _set_link_rate(ifname: str, rate: int) -> None:
    """The port's whole-link class 1:1 and its fifo leaf at ``rate`` bytes/s."""
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        (index,) = ipr.link_lookup(ifname=ifname)
        for classid, parent in ((tc.PARENT, tc.ROOT), (tc.FIFO_CLASS, tc.PARENT)):
            burst = tc.burst_bytes(rate, MTU)
            ipr.tc("change-class", "htb", index, classid, parent=parent, rate=rate, ceil=rate,
                   burst=burst, cburst=burst, quantum=tc.QUANTUM_BYTES, mtu=MTU)
