"""`labkit tune` and `algo: auto` for real, on a small two-leaf fabric: every algorithm is
swept, the model is kept for the fabric, and an auto sweep runs at each size what the
model chose there, in ring order."""

from dataclasses import replace

import polars as pl
import pytest

from labkit.model import autotune, paths, scenario
from labkit.runs import resolve, rundir, runner
from tests.leaks import assert_no_leaks

DOC = {"name": "tune-test",
       "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 1024}},
       "fabric": {"routers": ["leaf1", "leaf2", "spine1"],
                  "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]}},
                  "links": [["leaf1", "spine1"], ["leaf2", "spine1"]],
                  "bottlenecks": [["leaf1", "spine1"]]},
       "traffic": [{"kind": "allreduce", "algo": "auto", "ranks": ["g1", "g3", "g2", "g4"],
                    "size_bytes": "1MiB", "iterations": 2}]}
SIZES = [64 << 10, 1 << 20]


@pytest.fixture
def models_here(tmp_path):
    """The tuned models kept in the test's directory, the rest where it is."""
    with paths.use(replace(paths.current(), models=tmp_path / "models")):
        yield


def test_tune_then_auto(fabric_ready, tmp_path, models_here):
    sc = scenario.parse(DOC)
    tuning = runner.tune(sc, SIZES, iters=2, out=tmp_path / "tune")
    assert set(tuning.sweeps) == {"ring", "tree", "halving_doubling"}
    assert tuning.model_path.parent.name == resolve.model_key(sc)
    manifest = rundir.read_documents(tuning.path, ("manifest.json",))["manifest.json"]
    assert manifest["kind"] == "tune" and manifest["ranks"] == ["g1", "g2", "g3", "g4"]
    rows = pl.read_parquet(tuning.path / "tune.parquet")
    assert rows.group_by("algo").len().sort("algo")["len"].to_list() == [2, 2, 2]
    assert rows["wrong"].sum() == 0
    for row in autotune.regret(tuning.model, tuning.sweeps):  # the sizes it was fitted on
        assert row["relative"] <= 1.05, row

    done = runner.sweep(sc, "all_reduce", "auto", SIZES, 2, out=tmp_path / "auto")
    manifest = rundir.read_documents(done.path, ("manifest.json",))["manifest.json"]
    assert manifest["auto"]["ranks"] == ["g1", "g2", "g3", "g4"]
    for row in done.rows:
        choice = tuning.model.choose(row.size)
        assert row.algo == choice.algo and row.wrong == 0
        assert manifest["auto"]["choices"][str(row.size)]["reason"] == choice.reason
    assert done.table.filter(pl.col("algo") == "").height == 0
    assert_no_leaks()
