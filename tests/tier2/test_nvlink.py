"""Servers with an NVLink tier, for real: traffic between two GPUs of one server takes
their NVLink (and keeps its NIC addresses), traffic between servers takes the NICs, and a
tensor-parallel job inside one server runs several times faster than across two."""

import select
import subprocess
from pathlib import Path

from pyroute2 import IPRoute

from labkit.kernel import tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import Registry
from labkit.model import grid, scenario
from labkit.model.topo import Topology
from labkit.runs import runner
from tests.leaks import assert_no_leaks

NVLINK = Path(__file__).resolve().parents[2] / "topologies" / "nvlink.yaml"


def sent_bytes(fabric, node, ifname) -> int:
    def read():
        with IPRoute() as ipr, tc.StatsReader() as reader:
            (index,) = ipr.link_lookup(ifname=ifname)
            return sum(c.bytes for c in reader.read(index))
    return fabric.ns[node].run(read)


def test_inside_a_server_packets_take_nvlink_and_keep_their_nic_address(fabric_ready):
    topo = Topology(scenario.load(NVLINK).fabric)
    with Fabric(topo, Registry("test-nvlink")) as fabric:
        before = {i: sent_bytes(fabric, "g1", f"g1-eth{i}") for i in (0, 1)}
        ping = fabric.nodes["g1"].popen(["ping", "-c", "20", "-i", "0.01", "-s", "8000",
                                         topo.host_ip("g3")], stdout=subprocess.PIPE)
        out = ping.communicate(timeout=30)[0].decode()
        assert ping.returncode == 0, out
        nic, nvlink = (sent_bytes(fabric, "g1", f"g1-eth{i}") - before[i] for i in (0, 1))
        assert nvlink > 20 * 8000 and nic < 1000
        # g3 saw g1's NIC address, whichever way the packets came
        assert f"from {topo.host_ip('g3')}" in out
        # the pings go once it captures ("listening on ..."): a loaded machine took more
        # than their 0.6 s to start tcpdump, which then waited for a packet that had passed
        # (stderr unbuffered: a line read leaves nothing behind that select cannot see)
        tcpdump = fabric.nodes["g3"].popen(
            ["tcpdump", "-c", "1", "-n", "--immediate-mode", "-i", "g3-eth1", "icmp"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        said = b""
        while b"listening on" not in said:
            assert select.select([tcpdump.stderr], [], [], 30)[0], f"tcpdump said {said}"
            line = tcpdump.stderr.readline()
            assert line, f"tcpdump ended: {said}"
            said += line
        fabric.nodes["g1"].popen(["ping", "-c", "3", "-i", "0.3", topo.host_ip("g3")],
                                 stdout=subprocess.DEVNULL).wait(timeout=10)
        assert f"{topo.host_ip('g1')} > {topo.host_ip('g3')}" in tcpdump.communicate(
            timeout=10)[0].decode()
        before = sent_bytes(fabric, "g1", "g1-eth0")
        fabric.nodes["g1"].popen(["ping", "-c", "5", "-i", "0.01", "-s", "8000",
                                  topo.host_ip("g5")], stdout=subprocess.DEVNULL).wait(timeout=10)
        assert sent_bytes(fabric, "g1", "g1-eth0") - before > 5 * 8000  # between servers
    assert_no_leaks()


def test_tensor_parallelism_inside_a_server_beats_across_servers(fabric_ready, tmp_path):
    inside = runner.run(NVLINK, out=tmp_path / "inside").summary
    across = runner.run(grid.scenario_with(NVLINK, ["traffic[kind=job].ranks=[g1,g2,g5,g6]"]),
                        out=tmp_path / "across").summary
    job_inside = inside.policies["isolated"].workload
    job_across = across.policies["isolated"].workload
    t_inside, t_across = job_inside.p50_ms, job_across.p50_ms
    assert t_across > 3 * t_inside, (t_inside, t_across)
    assert job_across.bottleneck_bytes_per_iteration > 0
    assert job_inside.bottleneck_bytes_per_iteration == 0
    assert_no_leaks()
