"""A captured run, dissected by tshark: InfiniBand for the collectives, NVMe/TCP for storage."""

import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP
from scapy.utils import PcapReader

import labkit
from tests.conftest import require
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
DATA_OPCODES = {"6", "7", "8", "10"}


def tshark(pcap: Path, display_filter: str, *fields: str) -> list[list[str]]:
    argv = ["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields"]
    for f in fields:
        argv += ["-e", f]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("pcap") / "run"
    run = labkit.run(REPO / "topologies/bottleneck.yaml", ["fifo"], duration=3,
                     pcap=["spine1-leaf1"], out=out)
    return run.path / "fifo" / "spine1-leaf1.pcap"


def test_collectives_decode_as_infiniband_with_consistent_psns(fabric_ready, capture):
    require(subprocess.run(["which", "tshark"], capture_output=True).returncode == 0,
            "needs tshark")
    frames = tshark(capture, "udp.port == 4791 && !icmp", "frame.protocols",
                    "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn")
    assert len(frames) > 1000
    decoded = [f for f in frames if ":infiniband" in f[0]]
    assert len(decoded) >= 0.99 * len(frames)
    psns, last = defaultdict(set), {}
    for _, opcode, qp, psn in decoded:
        if opcode in DATA_OPCODES:
            psns[qp].add(int(psn))
            last[qp] = int(psn)  # where the sender stood when the capture ended
    # go-back-N fills every gap a drop upstream made below where the sender stood; the
    # run's end may cut a resend short, leaving the gaps above it
    for qp, seen in psns.items():
        missing = set(range(min(seen), last[qp] + 1)) - seen
        assert len(missing) <= 0.01 * len(seen), (qp, sorted(missing)[:10])
    assert tshark(capture, "infiniband.bth.opcode == 6", "infiniband.reth.dmalen")[0] != ["0"]


def test_collective_packets_carry_a_valid_icrc(fabric_ready, capture):
    checked = 0
    with PcapReader(str(capture)) as packets:
        for pkt in packets:
            if BTH not in pkt or pkt[BTH].opcode not in (6, 7, 8, 10, 17):
                continue
            ip = IP(bytes(pkt[IP]))
            ip[BTH].icrc = None
            assert bytes(ip)[-4:] == bytes(pkt[IP])[-4:], pkt.summary()
            checked += 1
            if checked == 300:
                break
    assert checked == 300


def test_storage_decodes_as_nvme_tcp(fabric_ready, capture):
    types = {row[0] for row in tshark(capture, "nvme-tcp", "nvme-tcp.type")}
    pdus = {t for row in types for t in row.split(",")}
    assert {"0", "1", "4", "5", "7"} <= pdus  # ICReq, ICResp, CapsuleCmd, CapsuleResp, C2HData
    assert tshark(capture, "_ws.malformed", "frame.number") == []
    assert_no_leaks()
