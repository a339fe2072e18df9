"""Links with a propagation delay in a real fabric (issue 49): ping across a delayed link
against the same fabric without the delay, a run of a delayed scenario recorded whole, and
`labkit clean` after kill -9 leaving no delay line and no namespace behind."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from labkit.kernel.fabric import DELAY_NODE, Fabric
from labkit.kernel.registry import Registry
from labkit.model import scenario
from labkit.model.topo import Topology
from tests import ping
from tests.leaks import assert_no_leaks, labkit_objects

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.ui.cli"]
DELAY_MS = 5.0


def doc(delay_ms: float) -> dict:
    link = {"between": ["r1", "r2"], **({"delay_ms": delay_ms} if delay_ms else {})}
    return {
        "name": "delays", "defaults": {"link": {"rate_mbps": 100, "mtu": 1500,
                                                "buffer_kb": 256}},
        "fabric": {"routers": ["r1", "r2"], "hosts": {"gpu": {"r1": ["g1"], "r2": ["g2"]}},
                   "links": [link], "bottlenecks": [["r1", "r2"]]},
        "traffic": [{"kind": "allreduce", "ranks": ["g1", "g2"], "size_bytes": "256KiB",
                     "iterations": 20}],
    }


def median_rtt_ms(delay_ms: float, name: str) -> tuple[float, set[str]]:
    topo = Topology(scenario.parse(doc(delay_ms), "test_delays.py").fabric)
    with Fabric(topo, Registry(f"{name}-{int(time.time())}")) as f:
        out = f.nodes["g1"].cmd(f"ping -c 50 -i 0.02 -n {topo.host_ip('g2')}")
        nodes = set(f.nodes)
    times = ping.rtts_ms(out)
    assert len(times) >= 48, out
    return statistics.median(times), nodes


def test_ping_across_a_delayed_link_takes_twice_its_delay_more(fabric_ready):
    base, plain_nodes = median_rtt_ms(0.0, "delay-none")
    delayed, nodes = median_rtt_ms(DELAY_MS, "delay-5ms")
    assert DELAY_NODE in nodes and DELAY_NODE not in plain_nodes  # no splice without a delay
    assert delayed - base == pytest.approx(2 * DELAY_MS, rel=0.05), (base, delayed)
    assert_no_leaks()


@pytest.mark.untimed
def test_a_run_with_a_delay_records_and_kill_9_then_clean_leaves_nothing(fabric_ready,
                                                                          tmp_path):
    path = tmp_path / "delays.yaml"
    path.write_text(yaml.safe_dump(doc(DELAY_MS)))
    done = subprocess.run([*LABKIT, "run", str(path), "--policy", "isolated", "--out",
                           str(tmp_path / "run")], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "summary.json").is_file()
    assert_no_leaks()
    proc = subprocess.Popen([*LABKIT, "run", str(path), "--policy", "fifo", "--out",
                             str(tmp_path / "killed")], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline, running = time.monotonic() + 60, False
    while time.monotonic() < deadline and not running:
        running = any("/_delayline" in p for p in labkit_objects()["processes"])
        time.sleep(0.1)
    assert running
    time.sleep(1)
    proc.kill()  # while the delay line runs
    proc.wait()
    clean = subprocess.run([*LABKIT, "clean"], capture_output=True, text=True, cwd=REPO)
    assert clean.returncode == 0, clean.stderr
    assert_no_leaks()
