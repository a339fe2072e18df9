"""labkit's delay line (labkit/kernel/delayline.c) on its own: two namespaces joined through
a third that holds the delay line, each side's egress shaped by HTB as a fabric's port is,
checked with instruments labkit did not write: ping's RTT, iperf3's goodput, and the
order in which a receiver sees numbered datagrams."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.kernel.delayline import DELAYLINE, DelayLine, DelayStats, Pipe, ring_bytes
from tests import ping

pytestmark = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                                reason="needs root")

RATE_MBPS = 100


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


class Splice:
    """a -- d -- b: namespaces named after this process, removed by those names."""

    def __init__(self):
        self.prefix = f"lkdl{os.getpid()}"
        self.ns = {n: f"{self.prefix}-{n}" for n in "adb"}
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        a, d, b = self.ns["a"], self.ns["d"], self.ns["b"]
        sh("ip", "link", "add", "pa", "netns", a, "type", "veth", "peer", "name", "da", "netns", d)
        sh("ip", "link", "add", "db", "netns", d, "type", "veth", "peer", "name", "pb", "netns", b)
        sh("ip", "-n", a, "addr", "add", "10.77.0.1/24", "dev", "pa")
        sh("ip", "-n", b, "addr", "add", "10.77.0.2/24", "dev", "pb")
        for ns, dev in ((a, "pa"), (d, "da"), (d, "db"), (b, "pb")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            # as the fabric's ports: TSO off where frames leave, GRO on where they arrive
            self.run(ns, "ethtool", "-K", dev, "tso", "off", "gro", "on", check=False)
        for ns, dev in ((a, "pa"), (b, "pb")):
            self.run(ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
                     "default", "1")
            self.run(ns, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1",
                     "htb", "rate", f"{RATE_MBPS}mbit")

    def run(self, ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *argv, check=check)

    def popen(self, ns: str, argv: list[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", ns, *argv], **kwargs)

    def line(self, tmp: Path, delay_ms: float, jitter_ms: float = 0.0) -> DelayLine:
        d, j = int(delay_ms * 1e6), int(jitter_ms * 1e6)
        size = ring_bytes(RATE_MBPS, d, j)
        pipes = [Pipe("da", "db", d, j, size, 1), Pipe("db", "da", d, j, size, 2)]
        return DelayLine(lambda argv, **kw: self.popen(self.ns["d"], argv, **kw),
                         pipes).start()

    def close(self) -> None:
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def splice():
    if not DELAYLINE.exists():
        pytest.fail(f"{DELAYLINE} is missing: make setup builds it")
    s = Splice()
    yield s
    s.close()


def rtts_ms(s: Splice, count: int = 40, size: int = 56) -> list[float]:
    out = s.run(s.ns["a"], "ping", "-c", str(count), "-i", "0.02", "-s", str(size),
                "10.77.0.2").stdout
    return ping.rtts_ms(out)


@pytest.mark.parametrize("delay_ms", [1.0, 5.0])
def test_pings_rtt_grows_by_twice_the_delay_plus_the_wire(splice, tmp_path, delay_ms):
    """Against the same path with no delay (the delay line forwarding at once): what is
    left is twice the delay and each way's wire time, within 5 %. Each frame's deadline
    is its kernel receive time plus the delay, so a delayed frame does not wait for the
    delay line to wake as an undelayed one does (50-120 us a round trip here, 5 % of the
    1 ms case): each path's RTT is taken less the median lateness the delay line
    recorded for its frames, both ways."""

    def rtt_less_lateness(delay: float) -> tuple[float, list[float], DelayStats]:
        line = splice.line(tmp_path, delay)
        try:
            rtts = rtts_ms(splice)
        finally:
            stats = line.stop()
        assert stats is not None
        late_ms = sum(p.late_p50_ns for p in stats.pipes) / 1e6
        return statistics.median(rtts) - late_ms, rtts, stats

    base, _, _ = rtt_less_lateness(0.0)
    delayed, rtts, stats = rtt_less_lateness(delay_ms)
    wire_ms = 2 * (56 + 28 + 14) * 8 / (RATE_MBPS * 1e3)  # each way, at the shaper
    added = delayed - base
    assert added == pytest.approx(2 * delay_ms + wire_ms, rel=0.05), (base, delayed, rtts)
    assert stats is not None and all(p.frames >= len(rtts) and not p.dropped
                                     for p in stats.pipes), stats


def test_iperf3_fills_a_delayed_link(splice, tmp_path):
    line = splice.line(tmp_path, 5.0)
    server = splice.popen(splice.ns["b"], ["iperf3", "-s", "-1", "-p", "5301"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = splice.run(splice.ns["a"], "iperf3", "-c", "10.77.0.2", "-p", "5301", "-t", "4",
                         "-O", "1", "-w", "2M", "-J").stdout
    finally:
        server.wait(timeout=10)
        stats = line.stop()
    mbps = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
    goodput_max = RATE_MBPS * 1448 / 1514  # TCP's payload of each full frame the shaper sends
    assert mbps >= 0.95 * goodput_max, mbps
    assert stats is not None and stats.pipes[0].frames > 1000, stats


RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: a busy machine, keep all
s.bind(("10.77.0.2", 5302)); s.settimeout(2.0)
seen = []
try:
    while True:
        seen.append(int(s.recv(64)))
except socket.timeout:
    pass
print(len(seen), sum(b < a for a, b in zip(seen, seen[1:])))
"""
SENDER = """
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(3000):
    s.sendto(str(i).encode(), ("10.77.0.2", 5302)); time.sleep(0.0002)
"""


def test_jitter_never_reorders(splice, tmp_path):
    line = splice.line(tmp_path, 4.0, jitter_ms=3.0)
    receiver = splice.popen(splice.ns["b"], [sys.executable, "-c", RECEIVER],
                            stdout=subprocess.PIPE, text=True)
    try:
        rtts_ms(splice, count=2)  # the neighbour resolved first: its queue's flush races
        time.sleep(0.3)           # the sender's next datagram, reordering one (no fabric's)
        splice.run(splice.ns["a"], sys.executable, "-c", SENDER)
        got, out_of_order = map(int, receiver.communicate(timeout=30)[0].split())
        rtts = rtts_ms(splice)
    finally:
        stats = line.stop()
    assert got == 3000 and out_of_order == 0
    assert 2 * 1.0 <= min(rtts) and max(rtts) <= 2 * 7.0 + 1.0, rtts  # delay ± jitter
    assert statistics.pstdev(rtts) > 0.3, rtts  # it does vary
    assert stats is not None and stats.pipes[0].jitter_ns == 3_000_000
