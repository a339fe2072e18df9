from pathlib import Path

from labkit.model import scenario, topo

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def load(name):
    return topo.Topology(scenario.load(TOPOLOGIES / name).fabric)


def test_addressing_and_port_names():
    t = load("bottleneck.yaml")
    assert t.host_ip("g1") == "10.0.1.2"
    assert t.host_ip("st1") == "10.0.9.2"
    g1 = t.ports["g1"][0]
    assert (g1.ifname, g1.peer, g1.peer_ip) == ("g1-eth0", "leaf1", "10.0.1.1")
    uplink = t.port_towards("leaf1", "spine1")
    assert uplink.ifname == "leaf1-eth4" and uplink.ip == "10.1.1.1"
    every_ip = [p.ip for ports in t.ports.values() for p in ports]
    assert len(every_ip) == len(set(every_ip))


def test_routes_follow_shortest_paths():
    t = load("bottleneck.yaml")
    assert t.routes("g5")[0].dst == "default"
    leaf1 = {r.dst: r.nexthops for r in t.routes("leaf1")}
    assert leaf1["10.0.5.0/24"] == ("10.1.1.2",)  # via spine1
    assert "10.0.1.0/24" not in leaf1  # directly connected
    assert t.path("g8", "g1") == ["g8", "leaf2", "spine1", "leaf1", "g1"]


def test_leaf_spine_has_ecmp_across_both_spines():
    t = load("leaf-spine.yaml")
    leaf1 = {r.dst: r.nexthops for r in t.routes("leaf1")}
    g5_subnet = f"10.0.{t.hosts.index('g5') + 1}.0/24"
    assert len(leaf1[g5_subnet]) == 2
    assert {t.port_towards("leaf1", s).peer_ip for s in ("spine1", "spine2")} == set(
        leaf1[g5_subnet])


def test_bottleneck_ports_cover_both_directions():
    t = load("bottleneck.yaml")
    assert {(p.node, p.peer) for p in t.bottleneck_ports()} == {("leaf1", "spine1"),
                                                                ("spine1", "leaf1")}


def test_servers_join_their_gpus_by_nvlink_and_route_inside_over_it():
    t = load("nvlink.yaml")
    assert [(s.switch, s.gpus) for s in t.fabric.servers] == [
        ("nvs1", ("g1", "g2", "g3", "g4")), ("nvs2", ("g5", "g6", "g7", "g8"))]
    nic, nvlink = t.ports["g2"]
    assert (nic.ifname, nic.peer, nvlink.ifname, nvlink.peer) == (
        "g2-eth0", "leaf1", "g2-eth1", "nvs1")
    assert nvlink.ip == "10.2.2.2" and nvlink.link.rate_mbps == 1000
    routes = {r.dst: r for r in t.routes("g2")}
    assert routes["10.0.3.2/32"].nexthops == ("10.2.2.1",)  # g3 through the switch
    assert routes["10.0.3.2/32"].src == t.host_ip("g2")  # as seen from its NIC address
    assert "10.0.5.2/32" not in routes and routes["default"].nexthops == ("10.0.2.1",)
    assert {r.dst: r.nexthops for r in t.routes("nvs1")}["10.0.4.2/32"] == ("10.2.4.2",)
    assert t.path("g1", "g4") == ["g1", "nvs1", "g4"]
    assert t.path("g1", "g5")[1] == "leaf1"
    assert t.switch_ports() and all(p.node.startswith("nvs") for p in t.switch_ports())
