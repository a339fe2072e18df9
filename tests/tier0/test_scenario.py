import ast
import copy
from pathlib import Path

import pytest
import yaml

from labkit.model import scenario
from labkit.model.scenario import ScenarioError
from labkit.traffic import commands

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@pytest.fixture
def doc():
    return yaml.safe_load((TOPOLOGIES / "bottleneck.yaml").read_text())


@pytest.mark.parametrize("path", sorted(TOPOLOGIES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_topologies_load(path):
    sc = scenario.load(path)
    assert sc.fabric.hosts and sc.fabric.bottlenecks
    assert len(sc.sha256) == 64


def test_bottleneck_resolves_defaults_and_overrides():
    sc = scenario.load(TOPOLOGIES / "bottleneck.yaml")
    assert sc.emulation.gso_packets == 1  # every packet on its own unless asked
    links = {frozenset((link.a, link.b)): link for link in sc.fabric.links}
    assert links[frozenset(("leaf1", "spine1"))].rate_mbps == 100
    assert links[frozenset(("leaf2", "spine1"))].rate_mbps == 1000
    assert links[frozenset(("st1", "leaf2"))].rate_mbps == 1000
    assert links[frozenset(("g1", "leaf1"))].mtu == 9000
    assert sc.allreduce.size_bytes == 2 * 1024 * 1024
    assert sc.allreduce.ranks == tuple(f"g{i}" for i in range(1, 9))
    assert sc.policies == ("isolated", "fifo", "priority")
    vip = [r for r in sc.lanes if r.lane == "vip"]
    assert vip[0].roce and vip[0].dport == 4791 and vip[0].proto == "udp"
    assert vip[1].dscp == 26


def _error(doc) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        scenario.parse(doc, "lab.yaml")
    return info.value


@pytest.mark.parametrize("mutate, key, reason", [
    (lambda d: d.update(colour="blue"), "colour", "unknown key"),
    (lambda d: d["defaults"]["link"].update(rate_mbps=0), "defaults.link.rate_mbps",
     "between 1 and 10000"),
    (lambda d: d["defaults"]["link"].update(rate_mbps="fast"), "defaults.link.rate_mbps",
     "must be a number"),
    (lambda d: d["fabric"]["links"][1].update(rate_mbps=-5), "fabric.links[1].rate_mbps",
     "between 1"),
    (lambda d: d["fabric"]["hosts"]["storage"].update(leaf1=["g2"]),
     "fabric.hosts.storage.leaf1[0]", "placed twice"),
    (lambda d: d.update(policies=["fifo", "magic"]), "policies[1]", "unknown policy"),
    (lambda d: d["fabric"].update(bottlenecks=[["leaf1", "leaf2"]]), "fabric.bottlenecks[0]",
     "no link between"),
    (lambda d: d["fabric"].update(bottlenecks=[["leaf1", "spine9"]]), "fabric.bottlenecks[0][1]",
     "neither a router nor a host"),
    (lambda d: d["lanes"].update(urgent=[{"dscp": 1}]), "lanes.urgent", "unknown key"),
    (lambda d: d["lanes"]["vip"].append({"dscp": 64}), "lanes.vip[2].dscp", "between 0 and 63"),
    (lambda d: d["lanes"]["low"].append({}), "lanes.low[1]", "empty rule"),
    (lambda d: d["lanes"]["low"].append({"tcp_port": 1, "udp_dport": 2}), "lanes.low[1].udp_dport",
     "both tcp and udp"),
    (lambda d: d["traffic"][0].update(size_bytes="lots"), "traffic[0].size_bytes", "size like"),
    (lambda d: d["traffic"][0].update(iterations=0), "traffic[0].iterations", "between"),
    (lambda d: d["traffic"][0].update(algo="magic"), "traffic[0].algo", "unknown algorithm"),
    (lambda d: d["traffic"][1].update(clients=["g1", "g99"]), "traffic[1].clients[1]",
     "not a host"),
    (lambda d: d["traffic"][1].update(offered_load=0), "traffic[1].offered_load", "> 0"),
    (lambda d: d["traffic"][1].update(mix="backup"), "traffic[1].mix", "unknown mix"),
    (lambda d: d["traffic"][1].update(io_bytes=1000), "traffic[1].io_bytes", "multiple of 512"),
    (lambda d: d["traffic"][1].update(arrival="bursty"), "traffic[1].arrival.process",
     "unknown arrival process"),
    (lambda d: d["traffic"][1].update(arrival={"process": "poisson", "on_ms": 5}),
     "traffic[1].arrival.on_ms", "only an on_off"),
    (lambda d: d["traffic"][1].update(arrival={"process": "on_off", "on_ms": 0}),
     "traffic[1].arrival.on_ms", "> 0"),
    (lambda d: d["traffic"].append(dict(d["traffic"][1])), "traffic[2].name",
     "already named 'dataset'"),
    (lambda d: d["fabric"]["routers"].append("Leaf 3"), "fabric.routers[3]", "not a node name"),
    (lambda d: d["fabric"]["links"].append({"between": ["g1", "leaf2"]}), "fabric.links[3].between",
     "attached to 'leaf1'"),
    (lambda d: d["fabric"].update(links=[["leaf1", "spine1"]]), "fabric.links", "not connected"),
    (lambda d: d.update(control={"idle_share": 1.5}), "control.idle_share", "at most 1"),
    (lambda d: d.update(control={"busy_share": 0.5, "idle_share": 0.4}), "control.busy_share",
     "below idle_share"),
    (lambda d: d.update(control={"lead": 5}), "control.lead", "unknown key"),
    (lambda d: d.update(emulation={"gso_packets": 0}), "emulation.gso_packets", "between 1"),
    (lambda d: d.update(emulation={"gso": 8}), "emulation.gso", "unknown key"),
    (lambda d: d.update(name="my.run"), "name", "cannot name runs"),
])
def test_bad_input_names_file_key_and_reason(doc, mutate, key, reason):
    bad = copy.deepcopy(doc)
    mutate(bad)
    exc = _error(bad)
    assert exc.file == "lab.yaml"
    assert exc.key == key
    assert reason in exc.reason
    assert str(exc).startswith(f"lab.yaml: {key}: ")
    assert "\n" not in str(exc)


def _hosts_on(router: str, n: int):
    """A mutation: ``n`` more storage hosts on ``router`` (a new one beside spine1 if need
    be)."""
    def mutate(d):
        if router not in d["fabric"]["routers"]:
            d["fabric"]["routers"].append(router)
            d["fabric"]["links"].append([router, "spine1"])
        d["fabric"]["hosts"]["storage"].setdefault(router, []).extend(f"s{i}" for i in range(n))
    return mutate


def _routers_between(n: int):
    """A mutation: ``n`` more routers, each linked to leaf2 and spine1 (2n more links)."""
    def mutate(d):
        d["fabric"]["routers"].extend(f"x{i}" for i in range(n))
        d["fabric"]["links"].extend([f"x{i}", end] for i in range(n) for end in ("leaf2",
                                                                                 "spine1"))
    return mutate


# issue 31: each was accepted, and failed later in the kernel or an agent
@pytest.mark.parametrize("mutate, key, reason", [
    (lambda d: d["fabric"]["hosts"]["gpu"]["leaf1"].__setitem__(0, "g1\n"),
     "fabric.hosts.gpu.leaf1[0]", "not a node name"),
    (_hosts_on("leaf2", 300), "fabric.hosts", "the address plan has room for 255"),
    (_routers_between(127), "fabric.links",
     "256 links between routers; the address plan has room for 255"),
    (_hosts_on("leafaaaa1", 100), "fabric.routers[3]",
     "leafaaaa1 has 101 links, and its port leafaaaa1-eth100 is 16 characters"),
    (lambda d: d["defaults"]["link"].update(rate_mbps=float("inf")), "defaults.link.rate_mbps",
     "got inf"),
    (lambda d: d["defaults"]["link"].update(rate_mbps=1e-9), "defaults.link.rate_mbps",
     "between 1 and 10000"),
    (lambda d: d["traffic"][0].update(compute_ms=float("inf")), "traffic[0].compute_ms",
     "between 0 and 60000, got inf"),
    (lambda d: d.update(control={"interval_ms": 1e-6}), "control.interval_ms", "between 1"),
    (lambda d: d["traffic"][1].update(offered_load=1e12), "traffic[1].offered_load",
     "> 0 and at most 100"),
    (lambda d: d["traffic"][0].update(size_bytes="1024G"), "traffic[0].size_bytes",
     "the hot path's largest message"),
    (lambda d: d.update(control={"horizon_ms": 1e12}), "control.horizon_ms", "64 bits"),
    (lambda d: d.update(scale_factor=float("nan")), "scale_factor", "got nan"),
    (lambda d: d["fabric"]["bottlenecks"].append(["spine1", "leaf1"]), "fabric.bottlenecks[1]",
     "listed twice"),
    (lambda d: d["traffic"].append({"kind": "command", "name": "x", "host": "st1",
                                    "run": ["iperf3", "-c\0"]}), "traffic[2].run[1]", "NUL"),
])
def test_what_would_fail_in_the_kernel_is_refused_first(doc, mutate, key, reason):
    mutate(doc)
    exc = _error(doc)
    assert (exc.key, "\n" in str(exc)) == (key, False)
    assert reason in exc.reason, exc.reason


def test_storage_mixes_take_their_defaults_and_overrides(doc):
    doc = copy.deepcopy(doc)
    doc["traffic"][1:] = [
        {"kind": "storage", "server": "st1", "clients": ["g1"]},
        {"kind": "storage", "mix": "checkpoint", "server": "st1", "clients": "gpu",
         "arrival": {"process": "on_off", "on_ms": 200, "off_ms": 800}},
        {"kind": "storage", "mix": "metadata", "name": "meta-1", "server": "st1",
         "clients": ["g5"], "io_bytes": "8K"},
    ]
    dataset, checkpoint, meta = scenario.parse(doc, "lab.yaml").storage
    assert (dataset.name, dataset.pattern, dataset.arrival.process) == ("dataset", "read",
                                                                          "constant")
    assert (checkpoint.pattern, checkpoint.clients[-1], checkpoint.arrival) == (
        "write", "g8", scenario.Arrival("on_off", 200.0, 800.0, 0.0))
    assert (meta.name, meta.io_bytes, meta.queue_depth, meta.arrival.process) == (
        "meta-1", 8192, 1, "poisson")


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read the file"):
        scenario.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: <top>: not valid YAML: line \d+"):
        scenario.load(bad)


@pytest.mark.parametrize("text, expected", [("4MiB", 4 << 20), ("64K", 64 << 10), (65536, 65536),
                                            ("1.5M", 3 << 19), ("2GiB", 2 << 30)])
def test_sizes(doc, text, expected):
    doc["traffic"][0]["size_bytes"] = text
    assert scenario.parse(doc).allreduce.size_bytes == expected


def test_command_entries_expand_host_references(doc):
    doc["traffic"].append({"kind": "command", "name": "bulk", "host": "st1",
                           "run": "iperf3 -c {g1} -t 60 -P 4",
                           "serve": {"host": "g1", "run": ["iperf3", "-s"]}})
    (cmd,) = scenario.parse(doc).commands
    assert (cmd.host, cmd.serve_host, cmd.serve) == ("st1", "g1", ("iperf3", "-s"))
    assert commands.expand_hosts(cmd.run, {"g1": "10.0.0.1"}.get) == [
        "iperf3", "-c", "10.0.0.1", "-t", "60", "-P", "4"]


@pytest.mark.parametrize("entry, key, reason", [
    ({"run": "iperf3 -c {g9}"}, "traffic[2].run", "{g9} is not a host of this fabric"),
    ({"run": "iperf3 -c '{g1}"}, "traffic[2].run", "cannot split the command line"),
    ({"run": ""}, "traffic[2].run", "must name a program"),
    ({"host": "leaf1"}, "traffic[2].host", "'leaf1' is not a host of this fabric"),
    ({"name": "Bulk Load"}, "traffic[2].name", "must be a label"),
    ({"host": "gpu"}, "traffic[2].host", "must name one host, got 8"),
    ({"serve": {"host": "g1"}}, "traffic[2].serve.run", "is required"),
    ({"cwd": "/tmp"}, "traffic[2].cwd", "unknown key"),
])
def test_bad_command_entries_name_key_and_reason(doc, entry, key, reason):
    doc["traffic"].append({"kind": "command", "name": "bulk", "host": "st1",
                           "run": "iperf3 -c {g1}", **entry})
    err = _error(doc)
    assert err.key == key and reason in err.reason, (err.key, err.reason)


def test_command_names_are_unique(doc):
    entry = {"kind": "command", "name": "bulk", "host": "st1", "run": "iperf3 -c {g1}"}
    doc["traffic"] += [entry, dict(entry)]
    assert _error(doc).key == "traffic[3].name"


def test_removed_control_keys_say_why(doc):
    doc["control"] = {"enforce": "shape"}
    err = _error(doc)
    assert err.key == "control.enforce" and "no longer a setting" in err.reason
    assert "in the kernel" in err.reason


def test_a_program_that_is_not_installed_is_caught_before_a_run(doc):
    doc["traffic"].append({"kind": "command", "name": "bulk", "host": "st1",
                           "run": "iperf3 -c {g1}",
                           "serve": {"host": "g1", "run": "no-such-program-here -s"}})
    sc = scenario.parse(doc, "lab.yaml")  # the file is fine; this machine lacks the program
    with pytest.raises(ScenarioError) as info:
        commands.check_installed(sc)
    assert info.value.key == "traffic[2].serve.run"
    assert "'no-such-program-here' is not installed" in info.value.reason


def test_a_key_written_twice_is_refused_with_both_lines(tmp_path):
    """YAML lets the last one win; a pasted second `policies:` must not pass silently."""
    text = (TOPOLOGIES / "bottleneck.yaml").read_text()
    path = tmp_path / "lab.yaml"
    path.write_text(text + "policies: [fifo]\n")
    first = next(i for i, line in enumerate(text.splitlines(), 1)
                 if line.startswith("policies:"))
    with pytest.raises(ScenarioError) as info:
        scenario.load(path)
    assert info.value.key == "policies"
    assert info.value.reason == (f"written twice, at line {first} and line "
                                 f"{len(text.splitlines()) + 1}: keep one")


def test_a_classifier_program_is_named_relative_to_the_scenario(tmp_path):
    doc = yaml.safe_load((TOPOLOGIES / "bottleneck.yaml").read_text())
    (tmp_path / "mine.bpf.c").write_text("/* a classifier */\n")
    doc["lanes"] = {"program": "mine.bpf.c", "vip": [{"roce": True}]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    sc = scenario.load(tmp_path / "s.yaml")
    assert sc.classifier == str((tmp_path / "mine.bpf.c").resolve())
    assert [r.lane for r in sc.lanes] == ["vip"]
    for program, words in (("mine.c", "must name a .bpf.c source or a .bpf.o object"),
                           ("gone.bpf.o", "does not exist")):
        doc["lanes"]["program"] = program
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
        with pytest.raises(scenario.ScenarioError) as caught:
            scenario.load(tmp_path / "s.yaml")
        assert caught.value.key == "lanes.program" and words in caught.value.reason


@pytest.mark.parametrize("change, key, reason", [
    ({"gpus_per_host": 3}, "fabric.hosts.gpu.leaf1", "4 GPU hosts do not make servers of 3"),
    ({"gpus_per_host": 9}, "fabric.gpus_per_host", "must be"),
    ({"nvlink": {"rate_mbps": 900}}, "fabric.nvlink", "needs fabric.gpus_per_host of 2"),
    ({"gpus_per_host": 2, "nvlink": {"speed": 1}}, "fabric.nvlink", "unknown key"),
])
def test_servers_are_checked(doc, change, key, reason):
    doc["fabric"].update(change)
    with pytest.raises(ScenarioError) as err:
        scenario.parse(doc, "lab.yaml")
    assert err.value.key.startswith(key) and reason in err.value.reason


def test_an_nvlink_is_ten_times_the_link_unless_told():
    d = yaml.safe_load((TOPOLOGIES / "bottleneck.yaml").read_text())
    d["fabric"]["gpus_per_host"] = 2
    fabric = scenario.parse(d).fabric
    assert len(fabric.servers) == 4 and {link.rate_mbps for link in fabric.nvlinks} == {1000}
    assert fabric.gpus_per_host == 2


def test_hierarchical_needs_whole_servers_in_order():
    d = yaml.safe_load((TOPOLOGIES / "nvlink.yaml").read_text())
    d["traffic"] = [{"kind": "allreduce", "algo": "hierarchical", "ranks": "gpu",
                     "size_bytes": "1MiB", "iterations": 1}]
    assert scenario.parse(d).allreduce.algo == "hierarchical"
    d["traffic"][0]["ranks"] = ["g1", "g5", "g2", "g6", "g3", "g7", "g4", "g8"]
    with pytest.raises(ScenarioError, match="a whole server at a time"):
        scenario.parse(d, "lab.yaml")
    del d["fabric"]["gpus_per_host"], d["fabric"]["nvlink"]
    with pytest.raises(ScenarioError, match="hierarchical needs servers"):
        scenario.parse(d, "lab.yaml")


def test_the_parser_re_exports_every_type():
    """The types live in labkit.model.scenario_spec; `from labkit.model.scenario import X`
    gives the very same object for every one of them (users' notebooks import from there)."""
    from labkit.model import scenario_spec

    tree = ast.parse(Path(scenario_spec.__file__).read_text())
    imported = {a.asname or a.name for node in tree.body
                if isinstance(node, ast.Import | ast.ImportFrom) for a in node.names}
    own = [n for n in vars(scenario_spec) if not n.startswith("_") and n not in imported]
    assert {"Scenario", "LaneRule", "Policy", "policy", "POLICIES", "HOST_REF"} <= set(own)
    assert [n for n in own if getattr(scenario, n, None) is not getattr(scenario_spec, n)] == []
