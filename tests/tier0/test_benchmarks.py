"""Every benchmark's set-up, built as `make bench` builds it but without root or the
kernel: the scenarios and fabrics of benchmarks/ at every rate and size they ask for,
parsed, resolved as labkit.run resolves them and laid out as topologies. A change to the
scenario's limits or shape that would stop a benchmark fails tier 0 (the telemetry and
sender benchmarks were once refused, their links past 10 Gbit/s, and nothing noticed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import capacity, classifier, delayline, path, sender, telemetry
from labkit.kernel import lanes
from labkit.model import scenario, topo
from labkit.runs.resolve import resolve_run

RATE_LIMIT = scenario.LIMITS["rate_mbps"].hi
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
BUILT_HERE = {"capacity", "classifier", "delayline", "sender", "telemetry"}
NO_FABRIC = {"timing"}  # one rank, its collectives on loopback: no scenario to build


def test_every_benchmark_is_built_here():
    """A new benchmark joins BUILT_HERE with a test of its set-up (or NO_FABRIC)."""
    names = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__", "__main__", "path"}
    assert names == BUILT_HERE | NO_FABRIC


def _link(t: topo.Topology, a: str, b: str):
    return next(link for link in t.fabric.links if {link.a, link.b} == {a, b})


def test_the_two_host_path_at_the_rates_the_benchmarks_ask_for():
    assert _link(sender.path(), "h1", "r1").rate_mbps == 40000
    assert _link(topo.Topology(telemetry.path().fabric), "r1", "h2").rate_mbps == 20000
    paths = delayline.paths()
    assert [_link(t, "r1", "h2").delay_ms for t in paths.values()] == [0.0, 0.001, 5.0]
    assert {_link(t, "h1", "r1").rate_mbps for t in paths.values()} == {delayline.RATE_MBPS}


@pytest.mark.parametrize("rate", [100, RATE_LIMIT, 4 * RATE_LIMIT])
def test_a_path_past_what_a_scenario_may_write_is_scaled_to_it(rate):
    """Written at most at the limit, then scaled as emulation.rate_factor scales it."""
    sc = path.two_hosts(rate, 1500, 512)
    assert {link.rate_mbps for link in sc.fabric.links} == {rate}
    topo.Topology(sc.fabric)


@pytest.mark.parametrize("ranks", capacity.RANKS)
@pytest.mark.parametrize("gso", capacity.GSO)
def test_capacity_rings_resolve_as_a_run_would(ranks, gso):
    request = resolve_run(capacity.fabric_of(ranks, gso), duration=capacity.SECONDS)
    assert list(request.topology.roles.values()).count("gpu") == ranks


def test_capacity_side_by_side_rings_resolve():
    for engines in ("rank", "leaf"):
        resolve_run(capacity.fabric_of(capacity.SIDE_BY_SIDE, 8, engines),
                    duration=capacity.SECONDS)


def test_telemetry_runs_resolve_as_a_run_would():
    for on in (True, False):
        resolve_run(telemetry.BOTTLENECK, telemetry.EFFECT_POLICIES, telemetry=on)
    resolve_run(telemetry.BOTTLENECK, telemetry.LOST_POLICIES, duration=telemetry.LOST_SECONDS)


def test_the_classifier_benchmark_rules_fit_the_classifier():
    lanes.build_config(classifier.RULES, "lanes")
