"""What the delay line costs (issue 49): h1 -> r1 -> h2 at 100 Mbit/s, the link r1-h2 with a
propagation delay or without, side by side in one run.

- the RTT the splice adds when the delay is next to nothing (1 µs): ping's median over the
  same path without a delay, both passes through the delay line included;
- how late its sends are against their deadlines (p50, p99) while iperf3 fills the
  link through 5 ms each way, and the CPU it spends per frame (the process's own clock,
  /proc/<pid>/schedstat; a frame is often a GRO run of several packets, and a veth's send
  runs the receiving host's softirq work in the sender's context, so that is counted too);
- iperf3's goodput through 5 ms each way over the same link's without a delay.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.path import two_hosts
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.model import topo
from labkit.model.scenario_spec import Scenario
from tests import ping

RATE_MBPS = 100
SECONDS = 6


def paths() -> dict[str, topo.Topology]:
    """The path with no delay on r1-h2, with next to none (the splice alone), and with
    5 ms each way."""
    sc = two_hosts(RATE_MBPS, 1500, 512)
    return {"none": _delayed(sc, 0.0), "splice": _delayed(sc, 0.001), "5ms": _delayed(sc, 5.0)}


def _delayed(sc: Scenario, delay_ms: float) -> topo.Topology:
    """The path with ``delay_ms`` on the link r1-h2 (0: none)."""
    links = tuple(dataclasses.replace(link, delay_ms=delay_ms) if {link.a, link.b} == {"r1", "h2"}
                  else link for link in sc.fabric.links)
    return topo.Topology(dataclasses.replace(sc.fabric, links=links))


def _rtt_ms(f: Fabric, dst: str) -> float:
    """ping's median RTT from h1 to ``dst`` over 200 pings."""
    out = f.nodes["h1"].cmd(f"ping -c 200 -i 0.005 -n {dst}")
    times = ping.rtts_ms(out)
    if len(times) < 190:
        raise RuntimeError(f"ping h1 -> {dst}: {out.strip()[-200:]}")
    return statistics.median(times)


def _iperf3_mbps(f: Fabric, dst: str) -> float:
    server = f.popen("h2", ["iperf3", "-s", "-1", "-p", "5311"], "iperf3 server",
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    out = f.nodes["h1"].cmd(f"iperf3 -c {dst} -p 5311 -t {SECONDS} -O 2 -w 2M -J")
    server.wait(timeout=10)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def run() -> list[dict]:
    path = paths()
    dst = path["none"].host_ip("h2")
    with Fabric(path["none"], Registry("bench-delay-none")) as f:
        rtt_plain = _rtt_ms(f, dst)
        mbps_plain = _iperf3_mbps(f, dst)
    with Fabric(path["splice"], Registry("bench-delay-splice")) as f:
        rtt_splice = _rtt_ms(f, dst)
    with Fabric(path["5ms"], Registry("bench-delay-5ms")) as f:
        line = f.delay_line
        assert line is not None and line.proc is not None
        before, cpu0 = line.report(), _cpu_ns(line.proc.pid)
        mbps_delayed = _iperf3_mbps(f, dst)
        cpu, stats = _cpu_ns(line.proc.pid) - cpu0, line.report()
    if before is None or stats is None:
        raise RuntimeError("the delay line gave no report")
    frames = sum(p.frames for p in stats.pipes) - sum(p.frames for p in before.pipes)
    forward = stats.pipes[0]  # r1 -> h2: the data
    return [
        {"name": "delayline_added_rtt_us", "value": (rtt_splice - rtt_plain) * 1e3,
         "unit": "us", "goal": "<= 150"},
        {"name": "delayline_late_p50_us", "value": forward.late_p50_ns / 1e3, "unit": "us",
         "goal": "<= 100"},
        {"name": "delayline_late_p99_us", "value": forward.late_p99_ns / 1e3, "unit": "us",
         "goal": None},
        {"name": "delayline_cpu_us_per_frame", "value": cpu / 1e3 / max(frames, 1),
         "unit": "us/frame", "goal": "<= 50"},
        {"name": "delayline_goodput_ratio", "value": mbps_delayed / mbps_plain, "unit": "x",
         "goal": ">= 0.95"},
    ]


if __name__ == "__main__":
    for record in run():
        print(record)
