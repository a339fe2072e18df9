"""labkit batch end to end (issue 17): a 2 x 2 x 2 grid (message size x policy x seed) of
half-second runs of a tiny scenario, run here one after another by `labkit batch`, then its
1 x 2 x 1 corner (the two policies) as exclusive jobs on a real single-node Slurm (Debian's
slurm-wlm and munge, configured for this host by tests/slurm_local.py, its daemons started
here and stopped after, by the PIDs it started); labkit.load_runs reads the 10 runs as one
frame.

Needs root, Mininet and the built BPF objects (`fabric_ready`), and for the Slurm part the
programs of Debian's slurm-wlm and munge (`make setup` installs them); about a minute.
"""

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from labkit.model.manifest import BatchManifest, BatchRef
from labkit.runs import rundir
from tests.conftest import require
from tests.leaks import assert_no_leaks
from tests.slurm_local import LocalSlurm, missing

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.ui.cli"]
KEY = "traffic[kind=allreduce].size_bytes"
SIZES = {"256KiB": 256 << 10, "512KiB": 512 << 10}
TINY = {  # two GPU hosts and a storage host on one router; the queue forms towards g1
    "name": "tiny",
    "scale_factor": 4000,
    "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 512}},
    "fabric": {"routers": ["r1"],
               "hosts": {"gpu": {"r1": ["g1", "g2"]}, "storage": {"r1": ["st1"]}},
               "links": [], "bottlenecks": [["r1", "g1"]]},
    "traffic": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "256KiB",
                 "iterations": 200},
                {"kind": "storage", "pattern": "read", "server": "st1", "clients": ["g1"],
                 "offered_load": 0.5}],
    "policies": ["fifo"],
}
GRID = {"scenario": "tiny.yaml", "name": "tiny-grid",
        "axes": {KEY: list(SIZES)}, "policies": ["fifo", "priority"], "seeds": [1, 2],
        "duration": 0.5, "slurm": {"time_min": 10}}
CORNER = {**GRID, "axes": {KEY: ["256KiB"]}, "seeds": [1]}  # for Slurm: one job a policy


@pytest.fixture(scope="module")
def grid_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("batch")
    (d / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    (d / "grid.yaml").write_text(yaml.safe_dump(GRID, sort_keys=False))
    (d / "corner.yaml").write_text(yaml.safe_dump(CORNER, sort_keys=False))
    return d / "grid.yaml"


def _check(done: labkit.Batch, executor: str, grid: dict) -> None:
    m = done.manifest
    sizes, policies, seeds = grid["axes"][KEY], grid["policies"], grid["seeds"]
    assert m.status == "complete" and m.executor == executor
    assert [p.status for p in done.points] == \
        ["complete"] * (len(sizes) * len(policies) * len(seeds)), \
        [(p.name, p.error) for p in done.points]
    # size x policy x seed, the seed fastest
    assert [(p.parameters[KEY], list(p.policies), p.seed) for p in done.points] == [
        (size, [policy], seed) for size in sizes for policy in policies for seed in seeds]
    for p in done.points:
        run = labkit.load_run(done.path / p.run)  # an ordinary, complete run
        assert run.manifest.status == "complete" and run.manifest.run_id == p.run_id
        assert f"-{rundir.host_label()}-tiny" in p.run_id  # the host is in the id
        assert run.manifest.batch == BatchRef(id=m.run_id, point=p.point,
                                              parameters=p.parameters)
        assert run.manifest.seed == p.seed and run.manifest.duration_s == GRID["duration"]
        assert run.manifest.scenario["allreduce"]["size_bytes"] == SIZES[p.parameters[KEY]]
        (policy,) = p.policies
        ar = run.summary.policies[policy].workload
        assert ar.ops > 0 and ar.wrong == 0
    assert_no_leaks()


def test_labkit_batch_runs_a_2x2x2_grid_here(fabric_ready, grid_file):
    out = grid_file.parent / "local"
    proc = subprocess.run([*LABKIT, "batch", str(grid_file), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "p007 complete" in proc.stdout and f"batch recorded in {out}" in proc.stdout
    _check(labkit.Batch(out, rundir.read_manifest(out, BatchManifest)), "local", GRID)


@pytest.fixture(scope="module")
def slurm():
    require(not missing(), f"needs Debian's slurm-wlm and munge ({', '.join(missing())} "
                           "not found; make setup installs them)")
    cluster = LocalSlurm()
    with cluster:
        yield cluster
    # stopped by the PIDs this test started, and nothing else
    assert not cluster.procs
    assert not any(os.path.exists(f"/proc/{pid}") and
                   b"slurm" in Path(f"/proc/{pid}/cmdline").read_bytes()
                   for pid in cluster.started)


def test_the_grid_runs_as_exclusive_jobs_on_a_single_node_slurm(fabric_ready, grid_file,
                                                               slurm, monkeypatch):
    r = slurm.run(["srun", "hostname"])
    assert r.returncode == 0 and r.stdout.strip() == slurm.node, r.stderr
    for k, v in slurm.env.items():
        monkeypatch.setenv(k, v)
    seen = []
    done = labkit.run_batch(grid_file.with_name("corner.yaml"), "slurm",
                            out=grid_file.parent / "slurm", poll_s=2,
                            on_point=lambda p, e: seen.append((p.name, e.status, e.host)))
    _check(done, "slurm", CORNER)
    job_ids = [p.job_id for p in done.points]
    assert len(set(job_ids)) == 2 and all(j.isdigit() for j in job_ids)
    assert any(status == "running" and host == slurm.node for _, status, host in seen)
    states = slurm.final_states(job_ids)
    for job_id in job_ids:
        script = (done.path / "slurm" / f"{job_id}_submission.sh").read_text().splitlines()
        for line in ("#SBATCH --exclusive", "#SBATCH --nodes=1", "#SBATCH --time=10",
                     "#SBATCH --mem=0", "#SBATCH --job-name=labkit-tiny-grid"):
            assert line in script
        # each job held the whole node: every CPU of it
        assert f"{job_id} COMPLETED {os.cpu_count()}" in states, states
    for p in done.points:
        assert p.host == rundir.host_label()  # the job's own answer, from the node


def test_load_runs_reads_both_batches_as_one_frame(grid_file):
    batches = [grid_file.parent / "local", grid_file.parent / "slurm"]
    require(all((b / "manifest.json").exists() for b in batches),
            "needs both batches of the tests above")
    frame = labkit.load_runs(batches)
    assert frame.height == 10 and frame["run_id"].n_unique() == 10  # one policy per run
    assert frame["batch"].n_unique() == 2
    assert frame.schema[KEY] == pl.Utf8 and set(frame[KEY]) == set(SIZES)
    combos = frame.select("batch", KEY, "policy", "seed").unique()
    assert combos.height == 10
    assert frame["ops"].min() > 0 and frame["p99_ms"].null_count() == 0
    # each batch also wrote it when it ended
    assert pl.concat([pl.read_parquet(b / "runs.parquet") for b in batches]).equals(frame)
