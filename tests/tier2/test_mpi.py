"""A real MPI job (mpi4py over Open MPI's TCP transport) as a scenario's workload, started
by Open MPI's own mpirun (``launcher: mpirun``), on a real fabric.

Four ranks, two behind each leaf, the leaf1 uplink the bottleneck; storage reads cross
it. docs/examples/allreduce_mpi.py all-reduces 2 MiB after a 50 ms compute, over and
over. mpirun runs in g1; labkit's launch agent starts its daemons in g2-g4's namespaces
and cgroups:

* every rank runs where its host is and reports its steps: each host's cgroup used CPU,
  each rank's output is kept, and the job's packets are the vip lane's at the bottleneck;
* a rank that fails ends the run, naming the rank and its error, and leaves nothing;
* after kill -9, `labkit clean` stops mpirun, its daemons and the ranks (by the hosts'
  cgroups) and removes the session directories.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from labkit.traffic import programs
from tests.conftest import require
from tests.leaks import assert_no_leaks, labkit_objects

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "docs/examples/allreduce_mpi.py"
STEPS = 6


def scenario(tmp: Path, args: str = "") -> Path:
    doc = yaml.safe_load((REPO / "topologies/mpi-allreduce.yaml").read_text())
    doc["fabric"]["hosts"] = {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]},
                              "storage": {"leaf2": ["st1"]}}
    doc["traffic"][0].update(iterations=STEPS, run=f"{{python}} {JOB} --steps {{iterations}} "
                                                    f"--size 2MiB --compute-ms 50 {args}")
    doc["traffic"][1]["clients"] = ["g1", "g2"]
    path = tmp / "mpi.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def mpirun_ready(fabric_ready):
    require(shutil.which(programs.MPIRUN) is not None, "needs Debian's openmpi-bin (make mpi)")


@pytest.fixture(scope="module")
def mpi_run(tmp_path_factory):
    require(shutil.which(programs.MPIRUN) is not None, "needs Debian's openmpi-bin (make mpi)")
    tmp = tmp_path_factory.mktemp("mpi")
    return labkit.run(scenario(tmp), ["isolated", "fifo"], out=tmp / "run")


def test_every_rank_runs_in_its_host_and_reports_its_steps(fabric_ready, mpi_run):
    for policy in ("isolated", "fifo"):
        p = mpi_run.summary.policies[policy].workload
        assert p.source == "lines" and p.iterations == STEPS - p.warmup, policy
        assert [r.exit for r in p.ranks] == [0] * 4
        assert all(r.cpu_s > 0.1 and r.packets > 100 for r in p.ranks), p.ranks  # in its host
        assert set(p.ops) == {"all_reduce"}
    for r in range(4):
        assert (mpi_run.path / f"agents/fifo/program/rank{r}.out").stat().st_size > 0
    alone = mpi_run.summary.policies["isolated"].workload.p50_ms
    assert mpi_run.summary.policies["fifo"].workload.p50_ms > 1.3 * alone  # storage hurt it


def test_the_jobs_packets_are_vip_at_the_bottleneck(fabric_ready, mpi_run):
    last = mpi_run["lanes"].filter(pl.col("policy") == "fifo").sort("t_ns").group_by(
        "port", "lane").last()
    at = {r["lane"]: r["offered_packets"] for r in
          last.filter(pl.col("port") == "spine1-eth0").iter_rows(named=True)}
    assert at["vip"] > 1000, at
    assert at["normal"] <= 20, at  # a listener's SYN-ACK carries no socket's mark


@pytest.mark.untimed
def test_a_failing_rank_ends_the_run_with_its_error(mpirun_ready, tmp_path):
    doc = yaml.safe_load(scenario(tmp_path, "--fail-at 2").read_text())
    doc["policies"] = ["isolated"]
    path = tmp_path / "fail.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(labkit.RunFailed) as info:
        labkit.run(path, out=tmp_path / "run")
    message = str(info.value)
    assert "rank 1 of mpi (on g2) exited with 3" in message, message
    assert "failing at step 2, as asked" in message, message
    assert_no_leaks()  # processes, daemons, cgroups and the session directories


@pytest.mark.untimed
def test_kill_9_then_clean_leaves_no_daemon_rank_or_session(mpirun_ready, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "labkit.ui.cli", "run",
                             str(scenario(tmp_path)), "--policy", "fifo", "--duration", "60",
                             "--out", str(tmp_path / "run")], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while sum("allreduce_mpi.py" in p for p in labkit_objects()["processes"]) < 4:
        assert time.monotonic() < deadline and proc.poll() is None, \
            f"the ranks never started: {proc.poll() is not None and proc.stderr.read()}"
        time.sleep(0.2)
    time.sleep(2)
    proc.kill()
    proc.wait()
    left = labkit_objects()
    assert any("orted" in p or "prted" in p for p in left["processes"]), left["processes"]
    assert any("labkit-mpi-" in w for w in left["work_dirs"])
    clean = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True, env={**os.environ})
    assert clean.returncode == 0, clean.stderr
    assert "labkit-mpi-" in clean.stdout, clean.stdout
    assert_no_leaks()
