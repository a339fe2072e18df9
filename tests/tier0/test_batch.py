"""Batches without a fabric: the batch record, a failed point that the batch goes past,
Ctrl-C, load_runs over the sample runs and over a synthetic batch (duckdb reads both), run
ids with the host name, and the Slurm executor's job parameters and submission mechanics
through submitit, with stand-ins for sbatch and squeue (no cluster)."""

import json
import os
import signal
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from labkit.model import grid
from labkit.model.manifest import BatchRef
from labkit.model.summary import Summary
from labkit.runs import batch, points, rundir, runner, slurm
from labkit.runs.rundir import RunDataError
from tests.recorded import run_manifest

REPO = Path(__file__).resolve().parents[2]
BOTTLENECK = REPO / "topologies/bottleneck.yaml"
SAMPLE = REPO / "data/sample"
SAMPLE_SUMMARY = Summary.from_json(json.loads((SAMPLE / "bottleneck/summary.json").read_text()))
AXES = {"traffic[0].size_bytes": ["1MiB", "4MiB"], "defaults.link.rate_mbps": [50, 100]}


def write_grid(tmp_path: Path, **doc) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"scenario": str(BOTTLENECK), "name": "tiny", **doc},
                                   sort_keys=False))
    return path


def synthetic_run(job: batch.PointJob) -> str:
    """What labkit.run records, minus the fabric: the sample run's summary under a new id,
    the point's scenario and batch in the manifest."""
    run_id = rundir.new_run_id(job.scenario.name)
    w = rundir.RunWriter(Path(job.out))
    w.write_manifest(run_manifest(run_id, scenario=job.scenario.to_dict(),
                                  seed=job.scenario.seed, policies=job.policies,
                                  duration_s=job.duration, batch=job.batch))
    w.finish({}, replace(SAMPLE_SUMMARY, run_id=run_id))
    return run_id


def fake_run_point(job, on_progress=None):
    """The local executor's run function: point 5 fails in labkit.run itself (a bad
    argument, refused before anything is built), the others are recorded."""
    if job.point == 5:
        return batch.run_point(replace(job, duration=-1.0))
    on_progress(runner.Progress("fifo", "running", 1, 2))
    return batch.PointOutcome("complete", run_id=synthetic_run(job), host=rundir.host_label())


def fake_job(job):
    """A Slurm job's function in the submitit test: seed 2 raises inside the job."""
    if job.scenario.seed == 2:
        raise RuntimeError("this point breaks in its job")
    return batch.PointOutcome("complete", run_id=synthetic_run(job), host=rundir.host_label())


@pytest.fixture(scope="module")
def local_batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch")
    seen, progress = [], []
    done = batch.run_batch(write_grid(tmp, axes=AXES, seeds=[1, 2], duration=3), "local",
                           out=tmp / "b", run_fn=fake_run_point,
                           on_point=lambda p, e: seen.append((p.index, e.status)),
                           on_progress=lambda p, pr: progress.append((p.index, pr.stage)))
    return done, seen, progress


def test_a_local_batch_runs_every_point_in_order_and_records_it(local_batch):
    done, seen, progress = local_batch
    m = done.manifest
    assert m.kind == "batch" and m.status == "complete" and m.executor == "local"
    assert m.run_id.endswith(f"-{rundir.host_label()}-batch-tiny")
    assert done.path.name == "b" and not (done.path.parent / ".b.incomplete").exists()
    assert seen == [(i, s) for i in range(8) for s in ("running", "complete" if i != 5
                                                        else "failed")]
    assert progress == [(i, "running") for i in range(8) if i != 5]
    assert (done.path / "grid.yaml").read_text() == (done.path.parent / "grid.yaml").read_text()
    assert m.grid.axes == {k: tuple(v) for k, v in AXES.items()} and m.grid.seeds == (1, 2)
    assert m.grid.duration_s == 3.0 and m.grid.sha256
    assert m.scenario.file == str(BOTTLENECK)
    points = done.points
    assert [p.parameters for p in points][:2] == [
        {"traffic[0].size_bytes": "1MiB", "defaults.link.rate_mbps": 50}] * 2
    assert [p.seed for p in points] == [1, 2] * 4
    for p in points:
        assert p.policies == ("isolated", "fifo", "priority") and p.host
        if p.point == 5:
            continue
        assert p.status == "complete" and p.run == f"runs/{p.name}"
        run = labkit.load_run(done.path / p.run)  # an ordinary run directory
        assert run.manifest.run_id == p.run_id
        assert run.manifest.batch == BatchRef(id=m.run_id, point=p.point,
                                              parameters=p.parameters)
        sc = run.manifest.scenario  # the point's own scenario, recorded whole
        assert sc["allreduce"]["size_bytes"] == {"1MiB": 1 << 20, "4MiB": 4 << 20}[
            p.parameters["traffic[0].size_bytes"]]
        assert sc["seed"] == p.seed
    assert json.loads((done.path / "summary.json").read_text()) == {
        "kind": "batch", "points": 8, "complete": 7, "failed": 1, "interrupted": 0,
        "cancelled": 0}


def test_a_failed_point_is_recorded_and_the_batch_goes_on(local_batch):
    done, _, _ = local_batch
    failed = done.points[5]
    assert failed.status == "failed" and failed.run is None
    assert failed.error.startswith("ScenarioError: ") and "duration" in failed.error
    assert not done.complete
    assert [p.status for p in done.points[6:]] == ["complete", "complete"]
    with pytest.raises(RunDataError, match="a batch, not a run: labkit.load_runs"):
        labkit.load_run(done.path)


def test_load_runs_gives_one_frame_over_a_batch(local_batch):
    done, _, _ = local_batch
    frame = labkit.load_runs(done.path)
    assert frame.columns[:7] == ["run_id", "scenario", "batch", "point", "seed",
                                 "traffic[0].size_bytes", "defaults.link.rate_mbps"]
    assert frame.columns[-1] == "path"
    assert frame.schema["traffic[0].size_bytes"] == pl.Utf8
    assert frame.schema["defaults.link.rate_mbps"] == pl.Int64
    assert frame.height == 7 * 3  # complete runs x their policies
    assert frame["point"].unique().sort().to_list() == [0, 1, 2, 3, 4, 6, 7]
    assert set(frame["batch"]) == {done.manifest.run_id}
    first = frame.filter(pl.col("point") == 6)
    assert first["policy"].to_list() == ["isolated", "fifo", "priority"]
    row = first.row(0, named=True)
    assert (row["run_id"], row["scenario"], row["seed"]) == (done.points[6].run_id,
                                                             "bottleneck", 1)
    assert (row["traffic[0].size_bytes"], row["defaults.link.rate_mbps"]) == ("4MiB", 100)
    assert row["path"] == str(done.path / "runs/p006")
    fifo = first.filter(pl.col("policy") == "fifo").row(0, named=True)
    assert fifo["slowdown_p99"] == SAMPLE_SUMMARY.policies["fifo"].workload.slowdown_p99
    # the same frame from the run directories themselves: each run carries its values
    runs = sorted((done.path / "runs").glob("p*"))
    assert labkit.load_runs(runs).drop("path").equals(frame.drop("path"))
    # and the copy the batch wrote when it ended
    assert pl.read_parquet(done.path / "runs.parquet").equals(frame)


def test_load_runs_over_the_sample_runs_has_the_columns_with_nulls():
    old = REPO / "tests/tier0/recorded/bottleneck-20261130"  # its run id names no host
    # a directory of runs (sweeps/ holds no run: left out) and a run
    frame = labkit.load_runs([SAMPLE, old])
    summaries = {d.name: Summary.from_json(json.loads((d / "summary.json").read_text()))
                 for d in [*SAMPLE.iterdir(), old] if (d / "summary.json").exists()}
    assert frame.height == sum(len(s.policies) for s in summaries.values())
    assert frame.columns[:5] == ["run_id", "scenario", "batch", "point", "seed"]
    assert frame["batch"].null_count() == frame["point"].null_count() == frame.height
    assert frame["seed"].null_count() == 0
    # run ids recorded before the host was in them load as they are
    assert "20261130-012933-bottleneck" in frame["run_id"].to_list()
    assert set(frame["scenario"]) == {s.scenario for s in summaries.values()}
    jobs = frame.filter(pl.col("scenario") == "pipeline-parallel")
    assert jobs["busbw_mbps"].is_null().all() and jobs["bubbles"].is_not_null().all()


def test_load_runs_mixes_runs_with_and_without_grid_parameters(local_batch):
    done, _, _ = local_batch
    frame = labkit.load_runs([SAMPLE / "bottleneck", done.path])
    sample = frame.filter(pl.col("batch").is_null())
    assert sample.height == 3 and frame.height == 3 + 21
    assert sample["traffic[0].size_bytes"].is_null().all()
    assert sample["defaults.link.rate_mbps"].is_null().all()
    assert frame.filter(pl.col("batch").is_not_null())["defaults.link.rate_mbps"].null_count() == 0


def test_load_runs_refuses_what_is_not_a_run(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "manifest.json").write_text(json.dumps({"kind": "sweep", "status": "complete"}))
    (sweep / "summary.json").write_text(json.dumps({"kind": "sweep", "rows": 1}))
    with pytest.raises(RunDataError, match="a sweep, not a run"):
        labkit.load_runs(sweep)
    assert labkit.load_runs(tmp_path).height == 0  # found in a directory: left out
    with pytest.raises(RunDataError, match="not a run, a batch or a directory of runs"):
        labkit.load_runs(tmp_path / "nothing")
    empty = labkit.load_runs([])
    assert empty.height == 0 and empty.columns[0] == "run_id" and "slowdown_p99" in empty.columns


def test_load_runs_names_a_summary_that_does_not_fit(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(
        run_manifest("r", status="complete").to_json()))
    (run / "summary.json").write_text(json.dumps({**SAMPLE_SUMMARY.to_json(),
                                                          "policies": {"fifo": {}}}))
    with pytest.raises(RunDataError, match=r"r/summary.json: summary.policies.fifo: expected "
                                           "one workload of allreduce, job, program"):
        labkit.load_runs(run)


def test_duckdb_reads_the_frame_and_the_tables(local_batch, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    done, _, _ = local_batch
    rows = duckdb.sql(
        "SELECT \"defaults.link.rate_mbps\" AS rate, policy, count(*) AS n "
        f"FROM '{done.path}/runs.parquet' GROUP BY ALL ORDER BY ALL").fetchall()
    # four points at 50 Mbit/s, one of which (p005) failed
    assert rows == [(50, p, 3) for p in ("fifo", "isolated", "priority")] + \
        [(100, p, 4) for p in ("fifo", "isolated", "priority")]
    labkit.load_runs(SAMPLE).write_parquet(tmp_path / "sample.parquet")
    [(n,)] = duckdb.sql(f"SELECT count(*) FROM '{tmp_path}/sample.parquet' "
                        "WHERE batch IS NULL").fetchall()
    assert n == labkit.load_runs(SAMPLE).height
    per_policy = dict(duckdb.sql(f"SELECT policy, count(*) FROM '{SAMPLE}/*/collectives.parquet' "
                                 "GROUP BY ALL").fetchall())
    assert per_policy["fifo"] > 0


def test_ctrl_c_stops_the_batch_and_keeps_its_record(tmp_path):
    def stop_at_two(job, on_progress=None):
        if job.point == 2:
            raise KeyboardInterrupt
        return batch.PointOutcome("complete", run_id=synthetic_run(job), host="h")

    with pytest.raises(KeyboardInterrupt):
        batch.run_batch(write_grid(tmp_path, seeds=[1, 2, 3, 4]), "local", out=tmp_path / "b",
                        run_fn=stop_at_two)
    kept = tmp_path / ".b.incomplete"
    m = json.loads((kept / "manifest.json").read_text())
    assert m["status"] == "interrupted" and not (tmp_path / "b").exists()
    assert [p["status"] for p in m["points"]] == ["complete", "complete", "interrupted",
                                                  "pending"]
    assert labkit.load_runs(kept).height == 2 * 3  # what finished reads as usual


def test_a_batch_refuses_before_it_creates_anything(tmp_path, monkeypatch):
    path = write_grid(tmp_path)
    with pytest.raises(labkit.ScenarioError, match="executor: unknown executor 'ssh'"):
        batch.run_batch(path, "ssh", out=tmp_path / "b")
    monkeypatch.setattr(runner, "not_ready", lambda: "running a scenario needs root")
    with pytest.raises(runner.NotReady, match="needs root"):
        batch.run_batch(path, "local", out=tmp_path / "b")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(runner.NotReady, match="sbatch, squeue, srun not on PATH"):
        batch.run_batch(path, "slurm", out=tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]


def test_a_job_stops_its_run_on_slurm_s_signal(monkeypatch):
    def run_until_signalled(job, on_progress=None):
        os.kill(os.getpid(), signal.SIGTERM)  # scancel, or the time limit
        time.sleep(5)
        raise AssertionError("the signal did not stop the run")

    monkeypatch.setattr(points, "run_point", run_until_signalled)
    before = signal.getsignal(signal.SIGTERM)
    result = slurm.job_main(None)
    assert result.status == "interrupted" and "SIGTERM" in result.error
    assert signal.getsignal(signal.SIGTERM) is before


def test_run_ids_carry_the_host_name(monkeypatch):
    monkeypatch.setattr(rundir.socket, "gethostname", lambda: "gpu_node7.cluster.example")
    run_id = rundir.new_run_id("bottleneck")
    assert run_id[15:] == "-gpu-node7-bottleneck" and run_id[:8].isdigit()
    assert rundir.host_label("..") == "host"
    assert len(rundir.host_label("x" * 80)) == 32


def test_a_run_id_taken_in_the_same_second_gets_a_suffix(labkit_paths, monkeypatch):
    runs = labkit_paths.runs
    first = rundir.new_run_id("calibrate-x16")
    (runs / first).mkdir(parents=True)  # a finished run
    monkeypatch.setattr(rundir, "datetime", FrozenClock)
    FrozenClock.at = first[:16]
    assert rundir.new_run_id("calibrate-x16") == first + "-2"
    (runs / f".{first}-2.incomplete").mkdir()  # a run still being written
    assert rundir.new_run_id("calibrate-x16") == first + "-3"


class FrozenClock:
    """``datetime.now()`` at the second a run id was made (``at``: its first 16 chars)."""

    at = ""

    @classmethod
    def now(cls):
        return datetime.strptime(cls.at, "%Y%m%d-%H%M%S-")


def test_slurm_jobs_ask_for_a_whole_node(tmp_path):
    g = grid.load(write_grid(tmp_path, slurm={"partition": "lab", "time_min": 20,
                                              "setup": ["module load labkit"]}))
    params = slurm.slurm_parameters(g)
    assert params == {"name": "labkit-tiny", "timeout_min": 20, "nodes": 1,
                      "tasks_per_node": 1, "slurm_exclusive": True, "slurm_mem": "0",
                      "slurm_use_srun": False, "slurm_partition": "lab",
                      "slurm_setup": ["module load labkit"]}
    assert slurm.slurm_parameters(grid.load(write_grid(tmp_path)))["timeout_min"] == 60


STAND_INS = {
    # sbatch: keep the script, run it in the background as Slurm would (its job id and
    # output files), print what sbatch prints
    "sbatch": """
import os, re, subprocess, sys
from pathlib import Path
state = Path(os.environ["FAKE_SLURM"])
script = Path(sys.argv[-1]).read_text()
n = len(list(state.glob("*.sh"))) + 1
(state / f"{n}.sh").write_text(script)
out, err = (re.search(f"#SBATCH --{k}=(\\\\S+)", script).group(1).replace("%j", str(n))
            for k in ("output", "error"))
env = {**os.environ, "SLURM_JOB_ID": str(n), "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
       "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_LOCALID": "0",
       "SLURM_JOB_NODELIST": "node7"}
if os.environ.get("FAKE_SLURM_RUNS", "yes") == "yes":
    subprocess.Popen(["bash", "-c", f"bash {state}/{n}.sh >{out} 2>{err}; touch {state}/{n}.done"],
                     env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(f"Submitted batch job {n}")
""",
    "squeue": """
import os
from pathlib import Path
state = Path(os.environ["FAKE_SLURM"])
for script in sorted(state.glob("*.sh")):
    n = script.stem
    print(f"{n}|{'COMPLETED' if (state / f'{n}.done').exists() else 'RUNNING'}|node7")
""",
    "srun": "raise SystemExit(1)",
    "scancel": """
import os, sys
from pathlib import Path
with open(Path(os.environ["FAKE_SLURM"]) / "scancel.log", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
""",
}


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> Path:
    """Stand-ins for Slurm's programs on PATH; their state directory."""
    pytest.importorskip("submitit")
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(f"#!{sys.executable}\n{body}")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(state))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(  # the job imports this module
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return state


def test_the_slurm_executor_submits_one_exclusive_job_per_point(tmp_path, fake_slurm):
    """submitit's own Slurm path: it writes each job's sbatch script and pickles the
    point; the stand-in sbatch runs the script as a node would, so the job unpickles the
    point, runs it and leaves its result for the batch to collect."""
    state = fake_slurm
    seen = []
    done = batch.run_batch(
        write_grid(tmp_path, seeds=[1, 2, 3], policies=[["isolated", "fifo"]],
                   slurm={"time_min": 15, "partition": "lab"}),
        "slurm", out=tmp_path / "b", run_fn=fake_job, poll_s=0.2, gone_grace_s=20,
        on_point=lambda p, e: seen.append((p.index, e.status)))
    scripts = [(state / f"{n}.sh").read_text() for n in (1, 2, 3)]
    for script in scripts:
        for line in ("#SBATCH --exclusive", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
                     "#SBATCH --time=15", "#SBATCH --mem=0", "#SBATCH --partition=lab",
                     "#SBATCH --job-name=labkit-tiny"):
            assert line in script.splitlines(), (line, script)
        assert "srun" not in script  # the job's batch step holds the whole node
        assert "-m submitit.core._submit" in script
    points = done.points
    assert [p.job_id for p in points] == ["1", "2", "3"]
    assert [p.status for p in points] == ["complete", "failed", "complete"], points
    assert "this point breaks in its job" in points[1].error
    assert (1, "submitted") in seen and (0, "complete") in seen
    assert all(p.log.startswith("slurm/") for p in points)
    frame = labkit.load_runs(done.path)
    # two runs, each of the three policies in the sample summary they copy
    assert frame.height == 2 * 3 and sorted(set(frame["seed"])) == [1, 3]


def test_ctrl_c_cancels_the_jobs_that_have_not_ended(tmp_path, fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_RUNS", "no")  # submitted, never run

    def stop_after_submitting(point, entry):
        if entry.status == "submitted" and point.index == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        batch.run_batch(write_grid(tmp_path, seeds=[1, 2]), "slurm", out=tmp_path / "b",
                        run_fn=fake_job, on_point=stop_after_submitting)
    m = json.loads((tmp_path / ".b.incomplete/manifest.json").read_text())
    assert m["status"] == "interrupted"
    assert [(p["status"], p["job_id"]) for p in m["points"]] == [("cancelled", "1"),
                                                                 ("cancelled", "2")]
    assert (fake_slurm / "scancel.log").read_text().split() == ["1", "2"]


def test_an_executor_that_fails_leaves_its_reason(tmp_path, fake_slurm):
    with pytest.raises(ValueError, match="doesn't know any executor named nowhere"):
        batch.run_batch(write_grid(tmp_path), "slurm", out=tmp_path / "b", cluster="nowhere")
    m = json.loads((tmp_path / ".b.incomplete/manifest.json").read_text())
    assert m["status"] == "incomplete" and "nowhere" in m["error"]
