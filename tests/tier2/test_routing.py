"""A routed fabric (issue 49, ``fabric.routing: bgp``): FRR's BGP and BFD in every router
move the routes off a failed spine link and back after it heals, and the packets follow.
Checked by the kernel's own counters of leaf1's two uplinks (HTB's bytes, read by the
queue poller; labkit's route figures come from the routes alone), by the ring's op times and by
iperf3's 16 flows, which ECMP spreads over both spines and which all live through it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import polars as pl
import pytest

import labkit
from labkit.kernel import frr
from labkit.model import scenario
from labkit.model.topo import Topology
from tests.conftest import require
from tests.leaks import assert_no_leaks, labkit_objects
from tests.tier2.test_dctcp import REPO
from tests.tier2.test_events import sent_mbps

DOC = {
    "name": "routing",
    "defaults": {"link": {"rate_mbps": 100, "mtu": 1500, "buffer_kb": 256}},
    "fabric": {"routers": ["spine1", "spine2", "leaf1", "leaf2"],
               "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]},
                         "storage": {"leaf1": ["s1"], "leaf2": ["s2"]}},
               "links": [["leaf1", "spine1"], ["leaf1", "spine2"], ["leaf2", "spine1"],
                         ["leaf2", "spine2"]],
               "bottlenecks": [["leaf1", "spine1"], ["leaf1", "spine2"]],
               "routing": "bgp"},
    "traffic": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "512KiB",
                 "iterations": 1000, "compute_ms": 5},
                # 16 TCP flows from s1 to s2 (in the normal lane): ECMP hashes some onto
                # each spine
                {"kind": "command", "name": "flows", "host": "s1",
                 "run": "iperf3 -c {s2} -P 16 -t 7 -i 1 --forceflush",
                 "serve": {"host": "s2", "run": "iperf3 -s -i 1 --forceflush"}}],
    "events": [{"at_s": 2.0, "link": ["leaf1", "spine1"], "down": True, "for_s": 1.5}],
}
SPINE1, SPINE2 = "10.1.1.2", "10.1.2.2"  # leaf1's next hops: the spines' ends of its links
REMOTE = {"10.0.3.0/24", "10.0.4.0/24", "10.0.6.0/24"}  # leaf2's hosts: g3, g4, s2
SPINES = ("spine1", "spine2")


def test_a_failed_spine_link_is_routed_around_and_back(fabric_ready, tmp_path):
    require(not frr.problem(), frr.problem() or "")
    sc = scenario.parse(DOC, "test_routing.py")
    run = labkit.run(sc, ["priority"], duration=9, out=tmp_path / "run")
    (r,) = run.summary.policies["priority"].reroutes or ()
    assert r.link == "leaf1-spine1" and r.routers >= 2, r
    # BFD (50 ms x 3) saw it, then BGP told the others; it healed: a new session, routes back
    assert r.moved_ms is not None and 100 <= r.moved_ms <= r.converged_ms <= 600, r
    # back within 3 s, as docs/testing.md says: BFD up again, then BGP's connect retry
    # (1 s: frr.py) may need a second try before the session and its routes return
    assert r.restored_ms is not None and r.restored_ms <= 3000, r
    t0, t1 = run["events"].sort("t_ns")["t_ns"].to_list()
    leaf1 = run["routes"].filter((pl.col("router") == "leaf1") & pl.col("dst").is_in(REMOTE))
    first = leaf1.filter(pl.col("change") == "start")
    assert set(first["via"]) == {f"{SPINE1} {SPINE2}"} and set(first["dst"]) == REMOTE
    during = leaf1.filter(pl.col("t_ns").is_between(t0, t1))
    assert set(during["via"]) == {SPINE2} and set(during["dst"]) == REMOTE, during
    last = leaf1.sort("t_ns").group_by("dst").last()
    assert set(last["via"]) == {f"{SPINE1} {SPINE2}"}, last  # both spines again

    # the packets followed the routes, by HTB's own counters of leaf1's two uplinks
    ports = {p.peer: p.ifname for p in Topology(sc.fabric).ports["leaf1"]
             if p.peer.startswith("spine")}
    queue = run["queue"]
    before = [sent_mbps(queue, ports[s], t0 - 600_000_000, t0 - 50_000_000) for s in SPINES]
    moved = t0 + int(r.converged_ms * 1e6) + 100_000_000
    during = [sent_mbps(queue, ports[s], moved, t1 - 50_000_000) for s in SPINES]
    back = t1 + int(r.restored_ms * 1e6) + 200_000_000
    after = [sent_mbps(queue, ports[s], back, back + 800_000_000) for s in SPINES]
    assert min(before) > 5 and min(after) > 5, (before, after)  # both spines carried flows
    assert during[0] < 1 and during[1] > 30, during  # all of them on spine2
    (flows,) = [c for c in run.summary.policies["priority"].commands or ()
                if c.role == "run"]
    assert flows.exit == 0 and not flows.stopped_by_labkit, flows  # TCP rode it out

    # and the ring (vip, ahead of the flows) kept going on the other spine while the link
    # was down
    ops = run["collectives"].group_by("op").agg(pl.col("end_ns").max())
    assert ops.filter(pl.col("end_ns").is_between(moved, t1)).height >= 3
    assert_no_leaks()


@pytest.mark.parametrize("how", ["kill -9, then labkit clean", "Ctrl-C"])
@pytest.mark.untimed
def test_a_stopped_run_leaves_no_routing_daemon(how, fabric_ready, tmp_path):
    """A run stopped while its routers run FRR: Ctrl-C tears it down; a run killed leaves
    the daemons and their files, and `labkit clean` stops them by their record and removes
    the files."""
    require(not frr.problem(), frr.problem() or "")
    path = tmp_path / "routing.yaml"
    path.write_text(json.dumps({**DOC, "events": [], "traffic": DOC["traffic"][:1]}))
    proc = subprocess.Popen([sys.executable, "-m", "labkit.ui.cli", "run", str(path),
                             "--policy", "fifo", "--duration", "30", "--out",
                             str(tmp_path / "run")], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any("labkit.traffic." in p for p in labkit_objects()["processes"]):
        assert time.monotonic() < deadline and proc.poll() is None, \
            f"the traffic never started: {proc.poll() is not None and proc.stderr.read()}"
        time.sleep(0.2)  # the traffic starts once BGP has converged
    daemons = [p for p in labkit_objects()["processes"] if "/labkit-frr-" in p]
    assert len(daemons) >= 3 * len(DOC["fabric"]["routers"]), daemons
    if how == "Ctrl-C":
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) != 0
    else:
        proc.kill()
        proc.wait()
        clean = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "clean"], cwd=REPO,
                               capture_output=True, text=True)
        assert clean.returncode == 0, clean.stderr
        assert "labkit-frr-" in clean.stdout, clean.stdout  # its files, removed
    assert_no_leaks()
