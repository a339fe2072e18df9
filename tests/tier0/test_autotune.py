"""The pure half of ``algo: auto``: ring order from the fabric, cost models fitted from the
sample sweeps (ring, tree, halving_doubling on topologies/leaf-spine.yaml), the choices
they make and how far those are from the best measured."""

import json
import re
from pathlib import Path

import pytest
import yaml

from labkit.model import autotune, scenario, topo
from labkit.runs import rundir

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "topologies"
# ring-lossy and halving_doubling-deep/-lossless were measured on other fabrics: left out
SWEEPS = {k: v for k, v in rundir.load_sweeps(REPO / "data/sample/sweeps").items()
          if k in autotune.ALGOS}


def load(name):
    return scenario.load(TOPOLOGIES / name)


def small_fabric(routers, hosts, links, ranks):
    """A topology parsed from a scenario dict, and its All-Reduce's ranks."""
    sc = scenario.parse({
        "name": "autotune-test",
        "fabric": {"routers": routers, "hosts": {"gpu": hosts}, "links": links,
                   "bottlenecks": [links[0]]},
        "traffic": [{"kind": "allreduce", "ranks": ranks, "size_bytes": "1MiB",
                     "iterations": 1}],
    })
    return topo.Topology(sc.fabric), sc.ranks


# --- ring order ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["leaf-spine.yaml", "bottleneck.yaml"])
def test_ring_order_keeps_each_leaf_together_on_the_two_leaf_fabrics(name):
    sc = load(name)
    t = topo.Topology(sc.fabric)
    order = autotune.ring_order(t, sc.ranks)
    assert order == ("g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8")  # already grouped
    assert autotune.crossings(t, order) == [("leaf1", "leaf2"), ("leaf2", "leaf1")]


def test_ring_order_groups_interleaved_ranks_and_keeps_their_order_within_a_leaf():
    sc = load("leaf-spine.yaml")
    t = topo.Topology(sc.fabric)
    ranks = ("g5", "g1", "g6", "g2", "g7", "g3", "g8", "g4")
    assert len(autotune.crossings(t, ranks)) == 8  # every hop crosses the spines
    order = autotune.ring_order(t, ranks)
    assert order == ("g5", "g6", "g7", "g8", "g1", "g2", "g3", "g4")
    assert len(autotune.crossings(t, order)) == 2


def test_three_leaves_cross_three_times_each_leaf_sending_and_receiving_one_crossing():
    t, ranks = small_fabric(
        ["spine1", "spine2", "leaf1", "leaf2", "leaf3"],
        {"leaf1": ["a1", "a2"], "leaf2": ["b1", "b2"], "leaf3": ["c1", "c2"]},
        [[leaf, spine] for leaf in ("leaf1", "leaf2", "leaf3") for spine in ("spine1", "spine2")],
        ["a1", "b1", "c1", "a2", "b2", "c2"])
    assert len(autotune.crossings(t, ranks)) == 6
    order = autotune.ring_order(t, ranks)
    assert order == ("a1", "a2", "b1", "b2", "c1", "c2")
    hops = autotune.crossings(t, order)
    assert hops == [("leaf1", "leaf2"), ("leaf2", "leaf3"), ("leaf3", "leaf1")]
    # no two crossings leave one leaf or enter one leaf: whatever spine ECMP hashes each
    # onto, every uplink and every spine's downlink carries at most one ring flow
    assert len({a for a, _ in hops}) == len({b for _, b in hops}) == 3
    leaf1 = {r.dst: r.nexthops for r in t.routes("leaf1")}
    assert len(leaf1[f"10.0.{t.hosts.index('b1') + 1}.0/24"]) == 2  # ECMP across the spines


def test_ring_order_puts_leaves_under_one_spine_next_to_each_other():
    # two pods: leaf1 and leaf2 under spine1, leaf3 and leaf4 under spine2, spines joined
    t, ranks = small_fabric(
        ["spine1", "spine2", "leaf1", "leaf2", "leaf3", "leaf4"],
        {"leaf1": ["a1", "a2"], "leaf2": ["b1", "b2"], "leaf3": ["c1", "c2"],
         "leaf4": ["d1", "d2"]},
        [["leaf1", "spine1"], ["leaf2", "spine1"], ["leaf3", "spine2"], ["leaf4", "spine2"],
         ["spine1", "spine2"]],
        ["a1", "c1", "b1", "d1", "a2", "c2", "b2", "d2"])
    hops = t.router_hops()

    def ring_hops(order):
        return sum(hops[a][b] for a, b in autotune.crossings(t, order))

    order = autotune.ring_order(t, ranks)
    # scenario order of the leaves (1, 3, 2, 4) crosses between the pods four times
    assert ring_hops(("a1", "a2", "c1", "c2", "b1", "b2", "d1", "d2")) == 12
    assert ring_hops(order) == 10  # between the pods twice, the least a ring can
    # of the cheapest orders, the one closest to the scenario's: leaf1, leaf3, leaf4, leaf2
    assert order == ("a1", "a2", "c1", "c2", "d1", "d2", "b1", "b2")
    assert order[0] == ranks[0]


def test_many_leaves_fall_back_to_nearest_next_leaf():
    leaves = [f"leaf{i}" for i in range(1, autotune.EXACT_ORDER_MAX_GROUPS + 3)]
    t, ranks = small_fabric(["spine1", *leaves], {leaf: [f"h{i}"] for i, leaf in
                                                  enumerate(leaves, 1)},
                            [[leaf, "spine1"] for leaf in leaves],
                            [f"h{i}" for i in range(len(leaves), 0, -1)])
    order = autotune.ring_order(t, ranks)
    assert order == tuple(ranks)  # all leaves 2 hops apart: the given order stands
    assert len(autotune.crossings(t, order)) == len(leaves)


def test_ring_order_refuses_unknown_and_repeated_hosts():
    t = topo.Topology(load("leaf-spine.yaml").fabric)
    with pytest.raises(ValueError, match="'g9' is not a host"):
        autotune.ring_order(t, ["g1", "g9"])
    with pytest.raises(ValueError, match="twice"):
        autotune.ring_order(t, ["g1", "g1"])


# --- fabric key ---------------------------------------------------------------------------


def test_fabric_key_follows_the_fabric_not_its_traffic():
    sc = load("leaf-spine.yaml")
    key = autotune.fabric_key(sc.fabric)
    assert len(key) == 12 and key == autotune.fabric_key(load("leaf-spine.yaml").fabric)
    assert key != autotune.fabric_key(load("bottleneck.yaml").fabric)
    doc = load_doc("leaf-spine.yaml")
    doc["traffic"][0]["size_bytes"] = "8MiB"
    doc["traffic"][1]["offered_load"] = 0.5
    assert autotune.fabric_key(scenario.parse(doc).fabric) == key
    doc["defaults"]["link"]["buffer_kb"] = 4096
    deep = autotune.fabric_key(scenario.parse(doc).fabric)
    doc["fabric"]["lossless"] = True
    lossless = autotune.fabric_key(scenario.parse(doc).fabric)
    doc = load_doc("leaf-spine.yaml")
    doc["defaults"]["link"]["rate_mbps"] = 200
    assert len({key, deep, lossless, autotune.fabric_key(scenario.parse(doc).fabric)}) == 4


def load_doc(name):
    return scenario.read_yaml(TOPOLOGIES / name)[1]


# --- the model ----------------------------------------------------------------------------


def leaf_spine_key():
    return autotune.fabric_key(load("leaf-spine.yaml").fabric)


def test_fits_the_sample_sweeps_and_chooses_the_ring_at_every_size():
    model = autotune.Model.fit(SWEEPS, leaf_spine_key())
    assert model.algos == ("ring", "tree", "halving_doubling")
    assert model.sizes == (65536, 262144, 1048576, 4194304)
    ring = model.fits["ring"]
    assert ring.rms_rel_error < 0.02  # the ring is close to alpha + size / beta
    assert 0 < ring.alpha_s < 0.0136  # below its 64 KiB time
    for row in SWEEPS["ring"]:
        assert model.predict("ring", row["size"]) == pytest.approx(row["time_us"] / 1e6,
                                                                   rel=0.02)
    for size in model.sizes:
        choice = model.choose(size)
        assert choice.algo == "ring" and not choice.extrapolated
        assert [a for a, _ in choice.alternatives] != [] and all(
            t > choice.predicted for _, t in choice.alternatives)
    reason = model.choose(4 << 20).reason
    assert re.match(r"ring: \d+ ms predicted at 4 MiB against tree ", reason)
    assert reason.endswith("(fitted from sweeps of this fabric, 64 KiB to 4 MiB)")
    assert "extrapolated beyond" in model.choose(16 << 20).reason
    assert model.choose(16 << 20).extrapolated
    assert [r["relative"] for r in autotune.regret(model, SWEEPS)] == [1.0] * 4


def test_recovers_alpha_and_beta_and_the_crossover_of_synthetic_sweeps():
    # tree: low latency, low bandwidth; ring: high latency, high bandwidth. They cross at
    # (0.020 - 0.002) / (1/1e6 - 1/1e7) = 20 000 bytes
    true = {"tree": (0.002, 1e6), "ring": (0.020, 1e7)}
    sizes = [1 << k for k in range(10, 23)]
    sweeps = {a: [row(s, alpha + s / beta) for s in sizes] for a, (alpha, beta) in true.items()}
    model = autotune.Model.fit(sweeps, "synthetic")
    for a, (alpha, beta) in true.items():
        assert model.fits[a].alpha_s == pytest.approx(alpha, rel=1e-9)
        assert model.fits[a].beta_bytes_per_s == pytest.approx(beta, rel=1e-9)
    assert model.choose(16 << 10).algo == "tree" and model.choose(32 << 10).algo == "ring"
    assert [r["relative"] for r in autotune.regret(model, sweeps)] == [1.0] * len(sizes)
    assert [r["relative"] for r in autotune.leave_one_out(sweeps, "synthetic")] == pytest.approx(
        [1.0] * len(sizes))


def test_fit_keeps_alpha_and_beta_physical_and_skips_wrong_rows():
    # times that fall with size: no bandwidth term (beta infinite), alpha their level
    falling = {"ring": [row(1 << 10, 0.010), row(1 << 20, 0.009)]}
    fit = autotune.Model.fit(falling, "k").fits["ring"]
    assert fit.beta_bytes_per_s == float("inf") and fit.alpha_s > 0
    # steeper than proportional: alpha would be negative, it is 0
    steep = {"ring": [row(1 << 10, 0.0001), row(1 << 20, 1.0)]}
    assert autotune.Model.fit(steep, "k").fits["ring"].alpha_s == 0.0
    bad = {"ring": [row(1 << 10, 0.01), row(1 << 20, 0.1), {**row(1 << 22, 9.0), "wrong": 3}]}
    assert autotune.Model.fit(bad, "k").fits["ring"].sizes == (1 << 10, 1 << 20)


def test_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="'halving_doubling-deep' is not an All-Reduce"):
        autotune.Model.fit(rundir.load_sweeps(REPO / "data/sample/sweeps"), "k")
    with pytest.raises(ValueError, match="two sizes"):
        autotune.Model.fit({"ring": [row(1 << 10, 0.01)]}, "k")
    with pytest.raises(ValueError, match="no sweeps"):
        autotune.Model.fit({}, "k")


def test_json_round_trip_keeps_the_fabric_and_the_sizes():
    key = leaf_spine_key()
    model = autotune.Model.fit(SWEEPS, key)
    text = model.to_json()
    doc = json.loads(text)
    assert doc["fabric_key"] == key and doc["sizes"] == [65536, 262144, 1048576, 4194304]
    assert doc["algos"]["ring"]["sizes"] == doc["sizes"]
    again = autotune.Model.from_json(text, fabric_key=key)
    assert again == model
    assert again.choose(3 << 20) == model.choose(3 << 20)
    other = autotune.fabric_key(load("bottleneck.yaml").fabric)
    with pytest.raises(ValueError, match=f"fitted on fabric {key}, not {other}"):
        autotune.Model.from_json(text, fabric_key=other)
    flat = autotune.Model.fit({"ring": [row(1 << 10, 0.010), row(1 << 20, 0.009)]}, "k")
    assert autotune.Model.from_json(flat.to_json()) == flat  # an infinite beta too
    with pytest.raises(ValueError, match="not a saved autotune model"):
        autotune.Model.from_json("{}")


def test_leave_one_size_out_chooses_within_5_percent_of_the_best_measured():
    """Fit on all sizes but one, choose at the held-out one: 64 KiB and 4 MiB are
    extrapolations. The ring was fastest at every size of these sweeps, by 1.3x to 2.9x."""
    rows = autotune.leave_one_out(SWEEPS, leaf_spine_key())
    print("\nsize chosen best relative extrapolated")
    for r in rows:
        print(r["size"], r["chosen"], r["best"], f"{r['relative']:.3f}", r["extrapolated"])
    assert [r["size"] for r in rows] == [65536, 262144, 1048576, 4194304]
    assert [r["extrapolated"] for r in rows] == [True, False, False, True]
    assert all(r["relative"] <= 1.05 for r in rows), rows


def row(size, seconds):
    return {"size": size, "time_us": seconds * 1e6, "wrong": 0}


# --- algo: auto in runs and sweeps (labkit.runs.resolve), without the kernel ---------------


def test_auto_without_a_model_says_to_tune_first(labkit_paths):
    from labkit.model.scenario import ScenarioError
    from labkit.runs import resolve

    doc = yaml.safe_load((REPO / "topologies/leaf-spine.yaml").read_text())
    doc["traffic"][0]["algo"] = "auto"
    sc = scenario.parse(doc, "ls.yaml")
    with pytest.raises(ScenarioError, match="run `labkit tune` on this scenario first"):
        resolve.resolve_auto(sc, "ls.yaml")
    with pytest.raises(ScenarioError, match="not all_gather"):
        resolve.check_sweep(sc, "all_gather", "auto", [65536], 1)


def test_auto_runs_what_the_newest_model_of_the_fabric_chooses(labkit_paths):
    from labkit.runs import resolve

    doc = yaml.safe_load((REPO / "topologies/leaf-spine.yaml").read_text())
    doc["traffic"][0].update(algo="auto", ranks=["g5", "g1", "g6", "g2"])
    sc = scenario.parse(doc, "ls.yaml")
    key = resolve.model_key(sc)
    model = autotune.Model.fit(SWEEPS, key)
    old = rundir.save_model(model, "20260101-000000-x-tune")
    new = rundir.save_model(model, "20260102-000000-x-tune")
    assert old != new and old.exists()  # a tuning never replaces another
    assert rundir.newest_model(key)[1] == new
    resolved, auto = resolve.resolve_auto(sc, "ls.yaml")
    assert resolved.allreduce.algo == auto.algo == model.choose(2 << 20).algo
    assert resolved.allreduce.ranks == ("g5", "g6", "g1", "g2")  # each leaf's ranks together
    assert auto.reason.startswith(auto.algo) and auto.model == str(new)
    resolve.check_sweep(sc, "all_reduce", "auto", [65536, 4 << 20], 1)  # a model: fine


def test_auto_chooses_only_what_the_ranks_can_run(labkit_paths):
    from labkit.runs import resolve

    doc = yaml.safe_load((REPO / "topologies/leaf-spine.yaml").read_text())
    doc["traffic"][0].update(algo="auto", ranks=["g1", "g2", "g3", "g5", "g6", "g7"])
    sc = scenario.parse(doc, "ls.yaml")
    fits = {a: [{"size": s, "time_us": t, "wrong": 0} for s, t in ((1 << 16, 1e3), (1 << 22, 1e4))]
            for a in ("halving_doubling",)}
    fits["ring"] = [{"size": 1 << 16, "time_us": 5e3, "wrong": 0},
                    {"size": 1 << 22, "time_us": 9e4, "wrong": 0}]
    rundir.save_model(autotune.Model.fit(fits, resolve.model_key(sc)), "20260101-000000-x")
    resolved, auto = resolve.resolve_auto(sc, "ls.yaml")  # 6 ranks: no halving-doubling
    assert resolved.allreduce.algo == "ring" and auto.algo == "ring"
