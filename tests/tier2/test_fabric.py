"""Real fabrics in Mininet: addressing, routing (with ECMP), queues, teardown."""

import socket
import subprocess
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from labkit.kernel import tc
from labkit.kernel.fabric import HASH_SEED, Fabric, ecmp_seed
from labkit.kernel.registry import Registry
from labkit.model import scenario, topo
from tests.leaks import assert_no_leaks

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def build(name, layout="fifo", run_id="test-fabric"):
    t = topo.Topology(scenario.load(TOPOLOGIES / name).fabric)
    return t, Fabric(t, Registry(run_id), router_layout=layout)


def ping(fabric, src, dst_ip):
    proc = fabric.nodes[src].popen(["ping", "-c", "1", "-W", "2", dst_ip],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=10)
    return proc.returncode, out.decode()


def test_bottleneck_fabric_routes_every_host_pair(fabric_ready):
    t, f = build("bottleneck.yaml", layout="lanes")
    with f:
        for src, dst in (("g1", "g8"), ("g8", "g1"), ("g4", "st1"), ("st1", "g2"), ("g1", "g5")):
            rc, out = ping(f, src, t.host_ip(dst))
            assert rc == 0, f"{src} -> {dst}: {out}"
        # lanes on the router ports, one FIFO class on host ports
        uplink = t.port_towards("spine1", "leaf1")

        def classes(ifname):
            with IPRoute() as ipr, tc.StatsReader() as reader:
                (idx,) = ipr.link_lookup(ifname=ifname)
                fast = reader.read(idx)
                reference = [m for m in ipr.get_classes(index=idx) if m["handle"] != tc.PARENT]
            # the hand-written parser agrees with pyroute2's decoder
            assert [(s.classid, s.bytes, s.packets) for s in fast] == [
                (m["handle"], m.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")["bytes"],
                 m.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")["packets"])
                for m in reference]
            return sorted(s.classid for s in fast)

        assert f.ns["spine1"].run(classes, uplink.ifname) == sorted(tc.LANE_CLASS.values())
        assert f.ns["g1"].run(classes, "g1-eth0") == [tc.FIFO_CLASS]
    assert_no_leaks()


def test_leaf_spine_installs_multipath_routes(fabric_ready):
    t, f = build("leaf-spine.yaml")
    with f:
        def nexthops(subnet):
            with IPRoute() as ipr:
                for r in ipr.get_routes(family=socket.AF_INET):
                    if r.get_attr("RTA_DST") == subnet and r["dst_len"] == 24:
                        return [h.get_attr("RTA_GATEWAY") for h in r.get_attr("RTA_MULTIPATH")]
            return []

        hops = f.ns["leaf1"].run(nexthops, t.host_ip("g5").rsplit(".", 1)[0] + ".0")
        assert sorted(hops) == sorted(t.port_towards("leaf1", s).peer_ip
                                      for s in ("spine1", "spine2"))
        rc, out = ping(f, "g1", t.host_ip("g6"))
        assert rc == 0, out
    assert_no_leaks()


def test_routers_hash_flows_with_a_seed_of_their_own_across_both_spines(fabric_ready):
    """Every router's ECMP hash seed is the one its name gives (the kernel's default draws
    the hash's key at boot, so flows shared uplinks differently on each machine), and 16
    UDP flows from g1 to g5 leave leaf1 by both spines."""
    t, f = build("leaf-spine.yaml")
    with f:
        for name in ("spine1", "spine2", "leaf1", "leaf2", "leaf3"):
            seed = f.nodes[name].cmd(f"cat /proc/sys/{HASH_SEED.replace('.', '/')}").strip()
            assert seed == str(ecmp_seed(name)) != "0", (name, seed)
        spine = {t.port_towards("leaf1", s).peer_ip: s for s in ("spine1", "spine2")}
        chosen = set()
        for sport in range(49152, 49168):
            route = f.nodes["leaf1"].cmd(
                f"ip -color=never -o route get {t.host_ip('g5')} from {t.host_ip('g1')} iif "
                f"{t.port_towards('leaf1', 'g1').ifname} ipproto udp sport {sport} dport 4791")
            chosen |= {s for ip, s in spine.items() if f" via {ip} " in route}
        assert chosen == {"spine1", "spine2"}
    assert_no_leaks()


def test_a_failed_build_tears_down_what_it_made(fabric_ready, monkeypatch):
    t, f = build("bottleneck.yaml")
    calls = []

    def fail_on_third(name):
        calls.append(name)
        if len(calls) == 3:
            raise RuntimeError("injected failure")
        return original(name)

    original = f._configure
    monkeypatch.setattr(f, "_configure", fail_on_third)
    with pytest.raises(RuntimeError, match="injected"):
        f.start()
    assert_no_leaks()


def test_a_policy_whose_fabric_fails_says_why_and_leaves_nothing(fabric_ready, monkeypatch,
                                                                  tmp_path):
    """The features' BPF objects, loaded beside the fabric's build, are closed before the
    registry tears it down: the run fails with the build's own error, not with a teardown
    that found their programs still held."""
    import labkit
    from labkit.runs.runner import RunFailed

    calls = []

    def fail_on_third(self, name):
        calls.append(name)
        if len(calls) == 3:
            raise RuntimeError("injected failure")
        return original(self, name)

    original = Fabric._configure
    monkeypatch.setattr(Fabric, "_configure", fail_on_third)
    with pytest.raises(RunFailed, match="injected failure"):
        labkit.run(scenario.load(TOPOLOGIES / "bottleneck.yaml"), ["priority"],
                   out=tmp_path / "run")
    assert_no_leaks()
