"""A real PyTorch job (gloo, CPU) as a scenario's workload, on a real fabric.

Four ranks, two behind each leaf, the leaf1 uplink the bottleneck; storage reads cross it.
docs/examples/allreduce.py all-reduces 2 MiB after a 50 ms compute, over and over:

* alone, its all_reduce takes what labkit's own ring of the same size takes on the same
  fabric (gloo adds its own reduction and threads: within 15 %);
* with no labkit line at all (--silent), its packets are the vip lane's at the bottleneck,
  the sojourn probe times them in that queue, the gates never hold them, and its
  iterations are timed by the start-up hook labkit puts in its interpreter;
* a rank that fails ends the run, naming the rank and its error.

Ctrl-C, and kill -9 followed by `labkit clean`, with PyTorch ranks running: test_two_programs.py.
"""

import time
from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from labkit.analysis import windows
from labkit.kernel import sched
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "docs/examples/allreduce.py"
STEPS = 8


def scenario(tmp: Path, args: str = "", workload: str = "program", name: str = "job") -> Path:
    doc = {
        "name": name, "scale_factor": 4000, "seed": 3,
        "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 1024}},
        "fabric": {"routers": ["leaf1", "leaf2", "spine1"],
                   "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]},
                             "storage": {"leaf2": ["st1"]}},
                   "links": [["leaf1", "spine1"],
                             {"between": ["leaf2", "spine1"], "rate_mbps": 1000},
                             {"between": ["st1", "leaf2"], "rate_mbps": 1000}],
                   "bottlenecks": [["leaf1", "spine1"]]},
        "lanes": {"vip": [{"roce": True}], "low": [{"tcp_port": 4420}]},
        "traffic": [
            {"kind": "program", "ranks": "gpu", "iterations": STEPS, "imports": ["torch"],
             "run": f"{{python}} {JOB} --steps {{iterations}} --size 2MiB --compute-ms 50 "
                    f"{args}"}
            if workload == "program" else
            {"kind": "allreduce", "ranks": "gpu", "size_bytes": "2MiB", "iterations": STEPS,
             "compute_ms": 50},
            {"kind": "storage", "server": "st1", "clients": ["g1", "g2"], "offered_load": 1.2,
             "queues": 2}],
        "control": {"lead_ms": 25},
        "policies": ["isolated"]}
    path = tmp / f"{name}-{workload}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("alone")
    job = labkit.run(scenario(tmp), out=tmp / "job")
    ring = labkit.run(scenario(tmp, workload="allreduce"), out=tmp / "ring")
    return job, ring


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("silent")
    return labkit.run(scenario(tmp, "--silent"), ["state-aware"], out=tmp / "run")


def test_the_jobs_all_reduce_alone_agrees_with_labkits_ring(fabric_ready, alone):
    job, ring = alone
    p = job.summary.policies["isolated"].workload
    assert p.source == "lines" and p.iterations == STEPS - p.warmup
    assert all(r.exit == 0 for r in p.ranks)
    theirs = p.ops["all_reduce"].p50_ms
    ours = ring.summary.policies["isolated"].workload.p50_ms
    assert abs(theirs / ours - 1) < 0.15, (theirs, ours)
    assert (job.path / "agents/isolated/program/rank3.out").stat().st_size > 0


def test_an_unmodified_jobs_packets_are_vip_at_the_bottleneck(fabric_ready, silent):
    p = silent.summary.policies["state-aware"].workload
    assert p.source == "hook" and p.iterations >= STEPS - 2
    last = silent["lanes"].filter(pl.col("policy") == "state-aware").sort("t_ns").group_by(
        "port", "lane").last()
    at = {r["lane"]: r["offered_packets"] for r in
          last.filter(pl.col("port") == "spine1-eth0").iter_rows(named=True)}
    marked = sum(r.packets for r in p.ranks)
    assert at["vip"] > 1000 and marked > at["vip"]
    # what carries no full socket (a listener's SYN-ACK) is not marked: a few packets
    assert at["normal"] <= 20, at
    vip = silent["sojourn"].filter((pl.col("policy") == "state-aware") & (pl.col("lane") == "vip")
                                   & (pl.col("port") == "spine1-eth0"))
    assert vip.height > 50 and (vip["stamp_ns"] == 0).all()  # timed; no labkit stamp


def test_the_gates_never_hold_the_jobs_packets(fabric_ready, silent):
    p = silent.summary.policies["state-aware"]
    held = p.controller.marks_and_drops  # by valve (host), then lane
    for host in ("g1", "g2", "g3", "g4"):
        assert "vip" not in held.get(host, {}), held
    assert p.controller.mean_rate_mbps.vip > 0
    assert p.bottleneck.lanes.vip.drops == 0


def test_the_jobs_phase_reaches_the_storage_host(fabric_ready, silent):
    """With no line of labkit in the job, the hook's announcements and the kernel's view
    of its packets are the phase the state-aware relay carries to the storage host."""
    relayed = silent["controller"].filter((pl.col("policy") == "state-aware")
                                          & pl.col("busy_from_ns").is_not_null())
    ops = windows.op_times(silent["collectives"].filter(pl.col("policy") == "state-aware"))
    assert relayed.height >= ops.height  # at least a window per iteration reached st1


@pytest.mark.untimed
def test_the_ranks_run_ahead_of_storage_as_labkits_own_do(fabric_ready, tmp_path):
    """A program's ranks get the nice value labkit's own ranks take (they stand in for
    GPUs); here each says its own, then fails so the run ends at once and shows it."""
    path = scenario(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["traffic"][0]["run"] = "sh -c 'echo nice $(ps -o ni= -p $$) >&2; exit 3'"
    doc["traffic"][0].pop("imports")
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(labkit.RunFailed) as info:
        labkit.run(path, out=tmp_path / "run")
    assert f"nice {sched.RANK_NICE}" in str(info.value), str(info.value)
    assert_no_leaks()


@pytest.mark.untimed
def test_a_failing_rank_ends_the_run_with_its_error(fabric_ready, tmp_path):
    with pytest.raises(labkit.RunFailed) as info:
        labkit.run(scenario(tmp_path, "--fail-at 2"), out=tmp_path / "run")
    message = str(info.value)
    assert "rank 1 of program (on g2) exited with 1" in message
    assert "failing at step 2, as asked" in message
    assert_no_leaks()  # processes, programs, pins and cgroups


def test_a_programs_straggler_is_its_cpu_quota_and_every_rank_waits(fabric_ready, tmp_path):
    """allreduce.py computing on the CPU (--busy, 50 ms a step), g2's rank held to a
    quarter of a CPU for 3 s: g2's compute takes at least 200 ms, where four busy ranks on
    this machine's CPUs take 50 to 100 ms each (a CPU quota slows what the CPUs' sharing
    has not already: half a CPU was within that noise), so by the job's own clock its steps
    grow by at least a compute phase, and nothing is left behind."""
    path = scenario(tmp_path, "--busy")
    doc = yaml.safe_load(path.read_text())
    doc["traffic"][0]["iterations"] = 24  # a few before the quota, about 12 after it
    doc["events"] = [{"at_s": 4, "host": "g2", "slow": 4, "for_s": 3}]
    path.write_text(yaml.safe_dump(doc))
    run = labkit.run(path, out=tmp_path / "run")
    ev = run["events"].sort("t_ns")
    t0, t1 = ev["t_ns"].to_list()
    its = run["collectives"].group_by("op").agg(pl.col("start_ns").min(),
                                                pl.col("end_ns").max())
    its = its.with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
    slowed = its.filter(pl.col("start_ns").is_between(t0 + 200_000_000, t1 - 300_000_000))
    even = its.filter((pl.col("end_ns") < t0) | (pl.col("start_ns") > t1 + 300_000_000))
    grown = slowed["ms"].median() - even["ms"].median()
    assert slowed.height >= 4 and even.height >= 10, (slowed, even)
    assert 50 <= grown <= 4 * 50 + 50, (grown, slowed["ms"].to_list(), even["ms"].median())
    assert_no_leaks()


@pytest.mark.untimed
def test_a_job_whose_peer_vanishes_ends_the_run_as_stuck(fabric_ready, tmp_path):
    """g4's NIC goes down for good 7 s in: gloo would wait for it for 30 minutes; labkit
    sees rank 0 fall silent past the entry's stall_s and ends the run, naming it."""
    path = scenario(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["traffic"][0].update(iterations=200, stall_s=4)
    doc["events"] = [{"at_s": 7, "link": ["g4", "leaf2"], "down": True}]
    path.write_text(yaml.safe_dump(doc))
    t0 = time.monotonic()
    with pytest.raises(labkit.RunFailed) as info:
        labkit.run(path, out=tmp_path / "run")
    assert "is stuck: rank 0 reported nothing for" in str(info.value), info.value
    assert time.monotonic() - t0 < 90  # not gloo's 30 minutes
    assert_no_leaks()
