"""The storage agent's pieces on local sockets: protocol, issuing, configuration."""

import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.model import scenario, topo
from labkit.model.traffic import configs, nvme, wire
from labkit.traffic import storage
from labkit.traffic.agents import storage_configs

REPO = Path(__file__).resolve().parents[2]


def _pair(pattern: str, arrival: str, io_bytes: int = 8192, queue_depth: int = 2):
    """A target and a host connected by a socket pair, running until ``stop``."""
    a, b = socket.socketpair()
    stop = threading.Event()
    entry = configs.Client(name="e", pattern=pattern, port=4420, pacing_bytes_per_s=0,
                           queues=1, io_bytes=io_bytes, queue_depth=queue_depth,
                           arrival={"process": arrival}, ios_per_s=0.0, seed="1",
                           server_ip="10.0.0.1", sport_base=50000,
                           templates=nvme.templates(io_bytes))
    received = storage.Counter()
    target = storage.Stream(a, received if pattern == "write" else None)
    client = storage.Stream(b, received if pattern == "read" else None)
    ios: list = []
    issuer = storage.Issuer(client, entry, ios)
    for body in (lambda: storage.serve(target, nvme.templates(wire.BLOCK), stop),
                 lambda: storage.host(client, entry, issuer, stop)):
        threading.Thread(target=lambda f=body: _quietly(f), daemon=True).start()
    return issuer, ios, received, stop, (a, b)


def _quietly(f):
    try:
        f()
    except (OSError, ConnectionError):
        pass


def _close(stop, socks):
    stop.set()
    for s in socks:
        s.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize("pattern", ["read", "write"])
def test_constant_io_keeps_the_queue_full_and_moves_the_commanded_bytes(pattern):
    issuer, ios, received, stop, socks = _pair(pattern, "constant")
    deadline = time.monotonic() + 5
    while len(ios) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    _close(stop, socks)
    assert len(ios) >= 50
    assert received.samples[-1][1] >= len(ios) * 8192  # every I/O's blocks arrived
    assert all(e == "e" and size == 8192 and ns > 0 for e, _, ns, size in ios)


def test_arrivals_wait_for_a_free_slot_and_count_their_queueing():
    issuer, ios, _, stop, socks = _pair("read", "poisson", queue_depth=1)
    for _ in range(20):
        issuer.arrive()
    deadline = time.monotonic() + 5
    while len(ios) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    _close(stop, socks)
    assert len(ios) == 20
    latencies = [ns for _, _, ns, _ in ios]
    assert latencies[-1] > latencies[0]  # the last arrival queued behind the others


def test_a_closed_window_issues_nothing():
    issuer, ios, _, stop, socks = _pair("write", "on_off")
    time.sleep(0.2)
    assert ios == []
    issuer.set_open(True)
    time.sleep(0.2)
    issuer.set_open(False)
    time.sleep(0.1)
    done = len(ios)
    time.sleep(0.2)
    _close(stop, socks)
    assert done > 0 and len(ios) == done


def test_configs_split_load_and_source_ports_per_entry():
    sc = scenario.load(REPO / "topologies/storage-mix.yaml")
    per_host = storage_configs(sc, topo.Topology(sc.fabric))
    flows = per_host["st1"].serve.flows
    ranges = sorted((f.sport_lo, f.sport_hi) for f in flows)
    assert all(hi < lo2 for (_, hi), (lo2, _) in zip(ranges, ranges[1:], strict=False))
    dataset = next(f for f in flows if f.name == "dataset")
    assert dataset.pacing_bytes_per_s * 4 == pytest.approx(0.5 * 100e6 / 8, rel=1e-6)
    g5 = {e.name: e for e in per_host["g5"].clients}
    assert set(g5) == {"checkpoint", "metadata"}
    assert g5["metadata"].pacing_bytes_per_s == 0  # Poisson arrivals set its rate
    assert g5["metadata"].ios_per_s * 4 == pytest.approx(0.02 * 100e6 / 8 / 4096)
    assert g5["checkpoint"].seed != per_host["g6"].clients[0].seed
    ports = [e.sport_base for cfg in per_host.values() for e in cfg.clients]
    assert len(ports) == len(set(ports))


def test_every_agent_config_survives_its_file(tmp_path):
    """What the launcher writes, the agent reads back equal (templates as bytes again)."""
    from labkit.traffic import agents

    sc = scenario.load(REPO / "topologies/checkpoint-burst.yaml")
    t = topo.Topology(sc.fabric)
    for host, cfg in storage_configs(sc, t).items():
        configs.write(cfg, tmp_path / f"{host}.json")
        assert configs.read_storage(tmp_path / f"{host}.json") == cfg
    ranks = configs.Collective(
        rank=1, n=2, ip="10.0.1.2", workload=agents.collective("all_reduce", "ring", 4096),
        iterations=3, compute_ms=1.0, duration_s=None, payload_bytes=1024,
        peers={0: "10.0.1.1", 1: "10.0.1.2"}, sport_base=50000,
        templates={"only": b"\x0a\x00"}, ack_template=b"\x11", nak_template=b"\x11\x60",
        cnp_template=b"\x81", phase_map_fd=7, dcqcn_line_mbps=100.0, netns_fd=9)
    engine = configs.Engine(ranks=[ranks, replace(ranks, rank=0, netns_fd=None)], out="x")
    configs.write(engine, tmp_path / "engine.json")
    assert configs.read_engine(tmp_path / "engine.json") == engine
