"""A routed fabric without the kernel (issue 49, ``fabric.routing: bgp``): the FRR plan
made from the router graph, the scenario's key, and what a run's summary reads of its
routes (labkit.analysis.reroutes) from tables made by hand."""

from __future__ import annotations

import copy
from pathlib import Path

import polars as pl
import pytest

from labkit.analysis.reroutes import reroutes
from labkit.kernel import frr
from labkit.model import paths, scenario
from labkit.model.paths import scenario_file
from labkit.model.topo import Topology
from labkit.runs import rundir

MS = 1_000_000


def _faults(**fabric) -> scenario.Scenario:
    _, doc = scenario.read_yaml(scenario_file("faults"))
    doc = copy.deepcopy(doc)
    doc["fabric"].update(fabric)
    return scenario.parse(doc, "faults.yaml")


def test_faults_yaml_is_routed_by_bgp_and_static_stays_the_default():
    assert _faults().fabric.routing == "bgp"
    assert scenario.load(scenario_file("bottleneck")).fabric.routing == "static"


def test_an_unknown_routing_is_refused_naming_the_key():
    with pytest.raises(scenario.ScenarioError, match=r"fabric\.routing: must be static .* or "
                                                     r"bgp .*got 'ospf'"):
        _faults(routing="ospf")


def test_every_router_is_an_as_of_its_own_and_peers_with_its_neighbours_under_bfd():
    topo = Topology(_faults().fabric)
    plan = frr.plan(topo)
    assert sorted(p.asn for p in plan.values()) == [65000, 65001, 65002, 65003]
    assert len({p.router_id for p in plan.values()}) == 4
    leaf1 = plan["leaf1"].configs["bgpd"].splitlines()
    spines = [p.peer_ip for p in topo.ports["leaf1"] if p.peer.startswith("spine")]
    for ip, spine in zip(spines, ("spine1", "spine2"), strict=True):
        assert f" neighbor {ip} remote-as {plan[spine].asn}" in leaf1
        assert f" neighbor {ip} bfd profile fabric" in leaf1
    assert sum(line.startswith(" neighbor ") and line.endswith(" bfd") for line in leaf1) == 2
    # its hosts' /24s, nothing else; ECMP over the spines' different AS paths
    assert "  redistribute connected route-map HOSTS" in leaf1
    assert "ip prefix-list HOSTS seq 5 permit 10.0.0.0/16 ge 24 le 24" in leaf1
    assert " bgp bestpath as-path multipath-relax" in leaf1
    bfd = plan["leaf1"].configs["bfdd"]
    assert f"transmit-interval {frr.BFD_MS}" in bfd and "detect-multiplier 3" in bfd
    assert "no zebra nexthop kernel enable" in plan["leaf1"].configs["zebra"]


def test_a_daemon_runs_in_the_foreground_with_everything_in_its_routers_directory(tmp_path):
    argv = frr.argv("bgpd", tmp_path, "labkit-frr-x-leaf1")
    assert "-d" not in argv and argv[0] == str(frr.FRR_DIR / "bgpd")
    assert argv[argv.index("-N") + 1] == "labkit-frr-x-leaf1"  # its own pathspace
    paths = [a.removeprefix("file:") for a in argv[1:] if "/" in a]
    assert len(paths) == 4 and all(tmp_path in (Path(p), Path(p).parent) for p in paths), paths


def _events(*rows: tuple[int, str]) -> pl.DataFrame:
    return pl.DataFrame([{"t_ns": t * MS, "event": 0, "link": "leaf1-spine1",
                          "change": "down", "value": 100.0, "state": s} for t, s in rows])


def _routes(*rows: tuple[int, str, str, str]) -> pl.DataFrame:
    return pl.DataFrame([{"t_ns": t * MS, "router": r, "dst": d, "via": v,
                          "change": "start" if t == 0 else "new"} for t, r, d, v in rows])


BOTH, ONE = "10.1.1.2 10.1.2.2", "10.1.2.2"


def test_a_reroute_is_timed_from_the_link_going_down_and_coming_back():
    events = _events((1000, "start"), (3000, "end"))
    routes = _routes((0, "leaf1", "10.0.3.0/24", BOTH), (1190, "leaf2", "10.0.1.0/24", "x"),
                     (1260, "leaf1", "10.0.3.0/24", ONE), (4200, "leaf1", "10.0.3.0/24", BOTH),
                     (4400, "leaf2", "10.0.1.0/24", "x y"))
    (r,) = reroutes(events, routes, start=500 * MS)
    assert (r.event, r.link, r.at_s, r.routers) == (0, "leaf1-spine1", 0.5, 2)
    assert (r.moved_ms, r.converged_ms, r.restored_ms) == (190, 260, 1400)


def test_a_link_that_moved_nothing_or_never_came_back_says_so():
    events = _events((1000, "start"))
    (r,) = reroutes(events, _routes((0, "leaf1", "10.0.3.0/24", BOTH)), start=0)
    assert (r.routers, r.moved_ms, r.converged_ms, r.restored_ms) == (0, None, None, None)
    no_routes = pl.DataFrame(schema=rundir.SCHEMAS["routes"]).drop("policy")
    assert reroutes(events, no_routes, start=0) == ()  # a static fabric records none


def test_a_flapping_link_gets_a_reroute_for_each_time_it_went_down():
    events = _events((1000, "start"), (1300, "end"), (2000, "start"), (2300, "end"))
    routes = _routes((0, "leaf1", "10.0.3.0/24", BOTH), (1200, "leaf1", "10.0.3.0/24", ONE),
                     (1800, "leaf1", "10.0.3.0/24", BOTH), (2150, "leaf1", "10.0.3.0/24", ONE))
    first, second = reroutes(events, routes, start=0)
    assert (first.moved_ms, first.restored_ms) == (200, 500)
    assert (second.moved_ms, second.restored_ms) == (150, None)  # not back before the end


def test_the_reroutes_figure_draws_each_uplink_and_where_the_routes_moved():
    """data/sample/faults: the ports the queue poller watched, named by their hops; while
    leaf2's link to spine2 was down, leaf1's traffic to leaf2 left by spine1 alone."""
    from labkit.analysis import frames
    from labkit.analysis.ports import sent_series
    from labkit.ui import figures, plots

    run = rundir.load_run(paths.REPO_ROOT / "data/sample/faults")
    assert "reroutes" in [name for name, _ in figures.figure_set(run)]
    fig = plots.reroutes(run)
    lines = {t.name for t in fig.data if t.mode == "lines"}
    assert lines == {"leaf1→spine1", "leaf1→spine2", "spine1→leaf1", "spine2→leaf1"}
    (r,) = run.summary.policies["isolated"].reroutes or ()
    texts = [a.text for a in fig.layout.annotations]
    assert f"routes moved: {r.converged_ms:.0f} ms" in texts
    assert f"back: {r.restored_ms:.0f} ms" in texts
    ev = run["events"].filter(pl.col("change") == "down").sort("t_ns")
    t0, t1 = ev["t_ns"].to_list()
    moved = t0 + int((r.converged_ms or 0) * MS) + 300 * MS
    hops = {v: k for k, v in frames.port_hops(run.manifest.scenario).items()}
    during = {hop: sent_series(run["queue"], "isolated", hops[hop], moved, t1)["mbps"].mean()
              for hop in ("leaf1→spine1", "leaf1→spine2")}
    # on spine2's link only the routers' own BGP and BFD to spine2 (tens of kbit/s)
    assert during["leaf1→spine2"] < 0.1 and during["leaf1→spine1"] > 10, during


def test_a_recorded_runs_ports_are_named_as_the_topology_names_them():
    """frames.port_hops reads a recorded scenario's links as labkit.model.topo numbers a
    node's ports (it keeps no Topology of its own): the two must agree."""
    from labkit.analysis import frames

    sc = _faults()
    topo = Topology(sc.fabric)
    expected = {p.ifname: f"{p.node}→{p.peer}" for ports in topo.ports.values() for p in ports}
    assert frames.port_hops(sc.to_dict()) == expected
