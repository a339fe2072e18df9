"""Collectives on real fabrics: the nccl-tests-style sweep, and recovery from loss."""

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from labkit.analysis import nccltests
from labkit.model import scenario
from labkit.model.summary import AllReduce
from labkit.model.topo import Topology
from tests.leaks import assert_no_leaks
from tests.tier0.test_sweep_format import parse_nccl_tests

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.ui.cli"]


def test_ring_all_reduce_sweep_on_leaf_spine(fabric_ready, tmp_path):
    """`labkit sweep` from 64 KiB to 1 MiB, read back by a parser of nccl-tests' output. The
    ring's bus bandwidth here is within a few percent of the link from 64 KiB on (a sweep
    on to 8 MiB gave 0.93-0.99 of it at every size), so larger sizes would only add time."""
    proc = subprocess.run([*LABKIT, "sweep", str(REPO / "topologies/leaf-spine.yaml"), "--op",
                           "all_reduce", "--algo", "ring", "-b", "64K", "-e", "1M", "-f", "2",
                           "-n", "3", "--out", str(tmp_path / "sweep")], cwd=REPO,
                          capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "busbw" in proc.stdout and "Mbit/s" in proc.stdout
    out = tmp_path / "sweep"
    rows = json.loads((out / "sweep.json").read_text())
    parsed = parse_nccl_tests(proc.stdout)  # a parser of nccl-tests' output reads it as is
    assert [r["size"] for r in parsed["rows"]] == [r["size"] for r in rows]
    assert parsed["wrong"] == (0, "OK")
    assert parsed["avg_busbw"] == pytest.approx(
        sum(r["busbw_mbps"] for r in rows) / len(rows), rel=1e-4)
    assert [r["size"] for r in rows] == [65536 << k for k in range(5)]
    link = rows[0]["link_mbps"]
    assert rows[-1]["busbw_mbps"] >= 0.8 * link
    assert all(r["busbw_mbps"] <= link for r in rows)
    assert all(r["wrong"] == 0 for r in rows)
    assert (out / "sweep.csv").read_text().startswith("size,count,type,redop,root,time_us")
    manifest = json.loads((out / "manifest.json").read_text())  # recorded like a run
    assert manifest["kind"] == "sweep" and manifest["status"] == "complete"
    assert manifest["scenario_sha256"] and manifest["packages"]["polars"]
    table = pl.read_parquet(out / "sweep.parquet")
    assert table.columns[0] == "run_id" and set(table["run_id"]) == {manifest["run_id"]}
    assert_no_leaks()


@pytest.mark.parametrize("op, algo, least", [("all_gather", "ring", 0.5),
                                             ("reduce_scatter", "ring", 0.5),
                                             ("broadcast", "tree", 0.25)])
def test_every_collective_sweeps_right_and_within_the_link(fabric_ready, tmp_path, op, algo,
                                                          least):
    """All-Gather, Reduce-Scatter and Broadcast on the leaf-spine fabric: every chunk adds
    up (#wrong 0) and the bus bandwidth is the link's at most; at 1 MiB the rings reach
    half of it, the tree a quarter (each inner rank sends every chunk to two children, so
    half the link at most, and 1 MiB is four 256 KiB chunks down a tree three deep).

    The tree's four crossings between the leaves fill both uplinks when ECMP spreads them
    two and two; three on one uplink overflow it (16 Mbit/s at 1 MiB, hundreds of packets
    resent). Each size's source ports are drawn from the scenario's seed in turn and the
    routers' hash is seeded (``ecmp_seed``), so these sizes take the same paths every run,
    and at 1 MiB (the third draw) they spread."""
    sizes = [64 << 10, 256 << 10, 1 << 20]
    done = labkit.sweep(REPO / "topologies/leaf-spine.yaml", op, algo, sizes, iters=2,
                        out=tmp_path / op)
    assert [r.size for r in done.rows] == sizes
    for row in done.rows:
        assert row.wrong == 0 and 0 < row.busbw_mbps <= row.link_mbps * 1.02, row
    assert done.rows[-1].busbw_mbps >= least * done.rows[-1].link_mbps, done.rows[-1]
    assert_no_leaks()


@pytest.mark.parametrize("topology, algo", [("leaf-spine", "tree"),
                                             ("leaf-spine", "halving_doubling"),
                                             ("nvlink", "hierarchical")])
def test_labkit_run_runs_every_all_reduce_algorithm(fabric_ready, tmp_path, topology, algo):
    """A scenario's All-Reduce with each algorithm besides the ring, run as `labkit run`
    runs it: every op done, every chunk right; across the leaf-spine's links its bus
    bandwidth is their rate at most (NVLink inside a server is faster than a NIC)."""
    from labkit.model import grid

    sc = grid.scenario_with(REPO / f"topologies/{topology}.yaml", [
        f"traffic=[{{kind: allreduce, algo: {algo}, ranks: gpu, size_bytes: 1MiB, "
        "iterations: 3, compute_ms: 10}]"])
    run = labkit.run(sc, ["isolated"], out=tmp_path / "run")
    reduce = run.summary.policies["isolated"].workload
    assert isinstance(reduce, AllReduce) and reduce.ops == 3 and reduce.wrong == 0
    link = nccltests.link_rate(Topology(sc.fabric), sc.ranks)
    assert reduce.busbw_mbps > 0
    assert topology == "nvlink" or reduce.busbw_mbps <= link * 1.02
    assert_no_leaks()


def test_loss_makes_go_back_n_retransmit_and_data_stays_right(fabric_ready, tmp_path):
    doc = {
        "name": "lossy",
        "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 1024}},
        "fabric": {"routers": ["r1"], "hosts": {"gpu": {"r1": ["g1", "g2", "g3", "g4"]}},
                   "links": [{"between": ["g2", "r1"], "loss_percent": 1}],
                   "bottlenecks": [["r1", "g2"]]},
        "traffic": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "1MiB",
                     "iterations": 10}],
        "policies": ["isolated"],
    }
    path = tmp_path / "lossy.yaml"
    path.write_text(yaml.safe_dump(doc))
    run = labkit.run(path, out=tmp_path / "run")
    summary = run.summary.policies["isolated"]
    assert summary.lossy_links["r1-g2"] > 0  # the dropper dropped (drops per lossy link)
    assert summary.workload.ops == 10 and summary.workload.wrong == 0
    transport = run["transport"]
    assert transport["retransmits"].sum() > 0 and transport["naks"].sum() > 0
    assert transport.filter(pl.col("host").is_in(["g1", "g2"]))["retransmits"].min() > 0
    assert_no_leaks()


def test_gso_runs_carry_whole_packets_that_every_probe_still_samples(fabric_ready, tmp_path):
    """emulation.gso_packets: 8 — the ring's packets travel in runs of 8, arrive whole (no
    wrong value, nothing resent), are counted one by one at the bottleneck, and the queue
    and latency probes still sample them (a probe sees a run's first packet only)."""
    doc = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
    doc["emulation"] = {"gso_packets": 8}
    doc["policies"] = ["priority"]
    sc = scenario.parse(doc, str(REPO / "topologies/bottleneck.yaml"))
    run = labkit.run(sc, out=tmp_path / "gso", duration=2)  # 40 ops, 300 vip samples
    assert run["collectives"].height > 0 and run["collectives"]["wrong"].sum() == 0
    assert run["transport"]["retransmits"].sum() == 0
    sent = run["transport"]["packets_sent"].sum()
    vip = run.summary.policies["priority"].bottleneck.lanes.vip
    # one hop of the ring of 8 crosses the uplink each way: an eighth of what the ranks sent
    # (4 KiB packets, each counted), and the acknowledgements of the other way's hop
    assert 0.12 * sent < vip.packets < 0.14 * sent
    stamped = run["sojourn"].filter((pl.col("lane") == "vip") & (pl.col("stamp_ns") > 0))
    assert stamped.height > 50 and run["latency"].filter(pl.col("lane") == "vip").height > 50
    assert_no_leaks()


def test_an_engine_per_leaf_sends_each_rank_from_its_own_nic(fabric_ready, tmp_path):
    """With ``emulation.engines: leaf`` (the default) one process drives the ranks behind
    each leaf, yet each rank's packets leave from its own host: on g2's NIC every RoCE
    packet is g2's or for g2, and every rank sent and received its share."""
    from scapy.layers.inet import IP, UDP
    from scapy.utils import PcapReader

    # 2 s: about 9,000 RoCE packets in g2's capture (the check: 1,000), read by scapy
    run = labkit.run(REPO / "topologies/bottleneck.yaml", ["isolated"], duration=2,
                     pcap=["g2-leaf1"], out=tmp_path / "run")
    engines = sorted((run.path / "agents" / "isolated").glob("collective-*.json"))
    engines = [e for e in engines if not e.name.endswith(".result.json")]
    ranks = [[r["rank"] for r in json.loads(e.read_text())["ranks"]] for e in engines]
    assert sorted(ranks) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # g1-g4 on leaf1, g5-g8 on leaf2
    g2 = Topology(labkit.load_scenario(REPO / "topologies/bottleneck.yaml").fabric).host_ip("g2")
    seen = 0
    with PcapReader(str(run.path / "isolated" / "g2-leaf1.pcap")) as packets:
        for pkt in packets:
            if IP in pkt and UDP in pkt and pkt[UDP].dport == 4791:
                assert g2 in (pkt[IP].src, pkt[IP].dst), pkt.summary()
                seen += 1
    assert seen > 1000
    transport = run["transport"]
    assert transport.height == 8
    assert transport["packets_sent"].min() > 0 and transport["bytes_received"].min() > 0
    assert (run["collectives"]["wrong"] == 0).all()
    assert_no_leaks()
