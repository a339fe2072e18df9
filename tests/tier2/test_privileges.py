"""Least privilege: root-only pins, nothing listening in the root namespace, no way out."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.kernel import bpf
from tests.leaks import assert_no_leaks
from tests.tier2.test_fabric import build, ping

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

REPO = Path(__file__).resolve().parents[2]
PORTS = {4420, 4791}


def root_ns_bound_ports() -> set[int]:
    """Local ports of TCP listeners and bound UDP sockets in this (the root) namespace."""
    ports = set()
    for name in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if name.startswith("udp") or fields[3] == "0A":  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_agents_listen_only_inside_their_namespaces_and_pins_are_root_only(fabric_ready,
                                                                            tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "labkit.ui.cli", "run",
                             str(REPO / "topologies/bottleneck.yaml"), "--policy", "fifo",
                             "--duration", "4", "--out", str(tmp_path / "run")], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen_pins = False
    try:
        while proc.poll() is None:
            assert not (root_ns_bound_ports() & PORTS), "a labkit port is open in the root netns"
            if bpf.PIN_ROOT.exists() and any(bpf.PIN_ROOT.iterdir()):
                for path in [bpf.PIN_ROOT, *bpf.PIN_ROOT.iterdir()]:
                    assert path.stat().st_mode & 0o077 == 0, f"{path} is open to non-root"
                seen_pins = True
            time.sleep(0.2)
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert seen_pins
    assert_no_leaks()


def test_emulated_traffic_has_no_route_out(fabric_ready):
    t, f = build("bottleneck.yaml")
    with f:
        rc, out = ping(f, "g1", "192.0.2.1")  # TEST-NET-1: any address outside the fabric
        assert rc != 0 and "Unreachable" in out, out
        leaf = f.nodes["leaf1"].popen(["ip", "route", "get", "192.0.2.1"],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = leaf.communicate(timeout=10)
        assert leaf.returncode != 0 and b"unreachable" in out
    assert_no_leaks()
