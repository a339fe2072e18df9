"""The job marker (bpf/jobmark.bpf.c) on real sockets: a process in a cgroup sends UDP
over loopback in a network namespace of its own, with the marker on lo's egress. Its
packets arrive with the job's DSCP (ECN bits kept, header checksum right: the receiving
stack drops a bad one), a socket made before the process joined the cgroup is left
alone, bursts and counters are kept, and packets to a destination across a bottleneck
open the host's phase window once their burst has carried open_bytes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.kernel import cgroups
from labkit.kernel.registry import Registry
from tests.conftest import require

CHILD = r'''
import json, socket, sys, time
from pathlib import Path
from labkit.kernel import bpf, cgroups, netns
from labkit.model.abi import JobPhase
from labkit.kernel.jobmark import JobMark

path, level, cgid = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
PACKET = 1000 + 8 + 20 + 14  # bytes on the wire of one datagram below
subprocess = __import__("subprocess")
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.bind(("127.0.0.1", 0))
rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
rx.settimeout(2)
before = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # made outside the cgroup
before.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x02)
(path / "cgroup.procs").write_text(f"{__import__('os').getpid()}\n")
after = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # made inside it
after.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x02)  # ECT(0)
mark = JobMark("h", cgroups.Cgroup(path, cgid, level), dscp=26, quiet_ms=20, hold_ms=20,
               far=["127.0.0.1"], open_bytes=3 * PACKET)
lo = socket.if_nametoindex("lo")
attachment = bpf.tc_attach(mark.obj.programs.lk_jobmark, lo, True, 3)

def send(sock, n):
    tos = []
    for _ in range(n):
        sock.sendto(b"x" * 1000, rx.getsockname())
        _, anc, _, _ = rx.recvmsg(2048, 64)
        tos.append(anc[0][2][0])
    return tos

def phase():
    p = JobPhase.from_buffer_copy(mark.obj.maps.lk_phase.lookup(0))
    return [p.busy_from_ns, p.busy_until_ns, p.flags, p.cross_start_ns, p.crossed_ns]

out = {"before": send(before, 3), "after": send(after, 2)}
out["handshake"] = phase()  # two packets: below open_bytes, nothing opened
out["after"] += send(after, 3)
out["first"] = phase()
time.sleep(0.05)  # > quiet: the next packets are a new burst
out["after"] += send(after, 2)
out["phase"] = phase()
out["counters"] = list(mark.counters())
rows, lost = mark.bursts()
out["bursts"] = [[b.start_ns, b.end_ns, b.bytes, b.packets] for b in rows]
attachment.detach()
mark.close()
print(json.dumps(out))
'''


@pytest.fixture
def group(bpf_ready, tmp_path):
    require(cgroups.cgroup2_root() is not None, "needs a cgroup v2 hierarchy")
    require(Path("/usr/bin/unshare").exists(), "needs unshare (util-linux)")
    record = Registry(f"test-jobmark-{os.getpid()}", tmp_path / "registry.jsonl")
    yield cgroups.make(cgroups.require_root() / cgroups.TOP / record.run_id / "rank0",
                       record.add)
    record.teardown()


def test_the_jobs_packets_carry_its_dscp_and_nothing_else_does(group):
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", CHILD, str(group.path),
                           str(group.level), str(group.id)], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["before"] == [0x02] * 3  # a socket of another cgroup: untouched
    assert out["after"] == [26 << 2 | 0x02] * 7  # DSCP 26, ECT(0) kept, checksum right
    packets, nbytes = out["counters"]
    assert packets == 7 and nbytes == 7 * (1000 + 8 + 20 + 14)
    assert [b[3] for b in out["bursts"]] == [5, 2]  # a 50 ms gap ended the first burst
    assert out["bursts"][0][1] < out["bursts"][1][0]
    first, second = out["bursts"]
    busy_from, busy_until, flags, cross_start, crossed = out["handshake"]
    assert (busy_from, busy_until, cross_start) == (0, 0, 0)  # two packets opened nothing
    assert flags == 1 and first[0] <= crossed < first[1]  # ... but were seen crossing
    busy_from, busy_until, flags, cross_start, crossed = out["first"]
    # the third packet carried the burst to open_bytes: the window opened there, held 20 ms
    assert first[0] < busy_from == cross_start <= first[1] and crossed == first[1]
    assert busy_until == crossed + 20_000_000
    # a second burst of two packets: seen (crossed), but it opens nothing and the first
    # burst's window has lapsed; cross_start stays the first burst's that counted
    assert out["phase"] == [busy_from, busy_until, 1, cross_start, second[1]]
