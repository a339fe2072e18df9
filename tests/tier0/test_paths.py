"""Where labkit reads and writes, in one object (labkit.model.paths): built from the
environment, handed in by a test or a user, read where it is used; reading a recorded
run loads none of the kernel layer."""

import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from labkit.model import paths
from labkit.model.paths import Paths

REPO = Path(__file__).resolve().parents[2]


def test_reading_a_recorded_run_loads_neither_the_bpf_loader_nor_the_kernel_libraries():
    code = ("import json, sys, labkit; run = labkit.load_run(sys.argv[1]); "
            "print(json.dumps([run.manifest.status, sorted(sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "data/sample/bottleneck")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    status, modules = json.loads(proc.stdout)
    assert status == "complete"
    loaded = {m for m in modules if m == "labkit.kernel.bpf" or m.startswith("labkit.kernel.")
              or m.split(".")[0] in ("pyroute2", "mininet")}
    assert not loaded, sorted(loaded)


def test_the_environment_sets_each_path_and_the_rest_are_under_the_checkout(tmp_path):
    env = {"LABKIT_RUNS_DIR": str(tmp_path / "r"), "LABKIT_STATE_DIR": str(tmp_path / "s"),
           "LABKIT_MODELS_DIR": ""}  # empty: not set
    p = Paths.from_env(env, repo=tmp_path / "repo")
    assert p.runs == tmp_path / "r" and p.state == tmp_path / "s"
    assert p.models == tmp_path / "repo/data/models"
    assert p.samples == tmp_path / "repo/data/sample"
    assert (p.work, p.registry, p.lock) == (tmp_path / "s/work", tmp_path / "s/registry",
                                            tmp_path / "s/run.lock")
    assert Paths.from_env({}) == Paths()  # the defaults: this checkout and /run/labkit
    assert Paths.from_env(p.environ({}), repo=p.repo) == p  # what a child process sees


def test_paths_handed_in_are_in_force_until_given_back(tmp_path):
    before = paths.current()
    sandbox = before.under(tmp_path)
    assert sandbox.runs == tmp_path / "runs" and sandbox.lock == tmp_path / "state/run.lock"
    assert (sandbox.repo, sandbox.samples) == (before.repo, before.samples)  # read-only
    with paths.use(sandbox) as given:
        assert given is sandbox and paths.current() is sandbox
        with paths.use(replace(sandbox, models=tmp_path / "m")):
            assert paths.current().models == tmp_path / "m"
        assert paths.current() is sandbox
    assert paths.current() is before


class NewYear:
    @classmethod
    def now(cls):
        return datetime(2026, 1, 1, 12)


def test_a_run_id_and_the_models_follow_the_paths_handed_in(labkit_paths, monkeypatch):
    from labkit.model import autotune
    from labkit.runs import rundir, store

    monkeypatch.setattr(rundir, "datetime", NewYear)
    run_id = rundir.new_run_id("x")
    (labkit_paths.runs / run_id).mkdir(parents=True)
    assert rundir.new_run_id("x") == f"{run_id}-2"  # taken in the runs' directory handed in
    assert [r["run_id"] for r in rundir.list_runs()] == [run_id]
    fits = {"ring": [{"size": 1 << 16, "time_us": 5e3, "wrong": 0},
                     {"size": 1 << 22, "time_us": 9e4, "wrong": 0}]}
    kept = store.save_model(autotune.Model.fit(fits, "k"), run_id)
    assert kept.parent == labkit_paths.models / "k" and store.newest_model("k")[1] == kept


def test_the_old_module_globals_give_the_paths_in_force_with_a_warning(labkit_paths):
    from labkit.runs import rundir, store

    with pytest.warns(DeprecationWarning, match="RUNS_DIR is now labkit.model.paths"):
        assert rundir.RUNS_DIR == labkit_paths.runs
    with pytest.warns(DeprecationWarning, match="MODELS_DIR is now labkit.model.paths"):
        assert store.MODELS_DIR == labkit_paths.models
    with pytest.raises(AttributeError):
        rundir.NO_SUCH_DIR  # noqa: B018


def test_a_sample_is_found_by_name_with_the_sweeps_and_tunings():
    import labkit

    assert labkit.sample("bottleneck") == REPO / "data/sample/bottleneck"
    assert labkit.sample("sweeps/ring") == REPO / "data/sample/sweeps/ring"
    assert labkit.sample("tune") == REPO / "data/sample/tune"
    assert labkit.sample() == REPO / "data/sample"
    assert labkit.scenario_file("bottleneck") == REPO / "topologies/bottleneck.yaml"
    with pytest.raises(labkit.SampleNotFound, match="'nope' is not a sample .*bottleneck, "):
        labkit.sample("nope")
    with pytest.raises(labkit.SampleNotFound, match="'nope' is not a scenario file .*bottleneck"):
        labkit.scenario_file("nope")


def test_a_notebook_copied_elsewhere_finds_the_checkout_it_runs_in(tmp_path, monkeypatch):
    """labkit installed without its data (a wheel): the samples of the checkout the
    notebook runs in; none anywhere: what to do, in the message."""
    checkout = tmp_path / "clone"
    (checkout / "data/sample/bottleneck").mkdir(parents=True)
    (checkout / "data/sample/samples.yaml").write_text("samples: []\n")
    (checkout / "topologies").mkdir()
    (checkout / "topologies/bottleneck.yaml").write_text("name: bottleneck\n")
    (checkout / "notebooks").mkdir()
    nowhere = tmp_path / "site-packages"
    with paths.use(Paths(repo=nowhere, samples=nowhere / "data/sample")):
        monkeypatch.chdir(checkout / "notebooks")
        assert paths.sample("bottleneck") == checkout / "data/sample/bottleneck"
        assert paths.scenario_file("bottleneck") == checkout / "topologies/bottleneck.yaml"
        monkeypatch.chdir(tmp_path)
        with pytest.raises(paths.SampleNotFound) as missing:
            paths.sample("bottleneck")
    said = str(missing.value)
    assert str(nowhere / "data/sample") in said and "clone of the repository" in said
    assert "LABKIT_SAMPLE_DIR" in said
