"""Unmodified jobs, timed by labkit from outside their code, checked against the job's
own clock (issue 46).

docs/examples/own_clock.py imports nothing of labkit and prints no line of labkit's; it
times each op and iteration itself and says so on stderr, in its own words. It runs on a
fabric none of the shipped scenarios has: six GPU hosts over three leaves, each leaf's
hosts offering three times its uplink (150 Mbit/s each, 100 up), dataset reads and an
iperf3 stream crossing leaf1's uplink, the bottleneck.

* a PyTorch gloo job under isolated, fifo and state-aware, and an mpi4py job under fifo
  and state-aware (the queue and the gates, where timing from outside could go wrong):
  labkit's op p50 and p99 and its iteration p50 are within 10 % of the job's own (the
  start-up hook for PyTorch, the PMPI shim for MPI);
* a DDP job: its buckets are timed and its iterations cut by its forward passes;
* a job that is neither (plain TCP sockets to a parameter server): within 10 % of its
  own clock from its traffic, or reported as not measurable, with no slowdown.
"""

import re
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

import labkit
from labkit.traffic import programs
from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "docs/examples/own_clock.py"
STEPS = 6
TOLERANCE = 0.10
POLICIES = ["isolated", "fifo", "state-aware"]


def scenario(tmp: Path, backend: str, *, ddp: bool = False, timing: str = "auto",
             policies: list[str] = POLICIES) -> Path:
    program = {"kind": "program", "name": "job", "ranks": "gpu", "iterations": STEPS,
               "timing": timing,
               "run": f"{{python}} {JOB} --backend {backend} --steps {{iterations}} "
                      f"--size 512KiB --compute-ms 100" + (" --ddp" if ddp else "")}
    if backend == "gloo":
        program["imports"] = ["torch"]
    if backend == "mpi":  # Open MPI's ring, as topologies/mpi-allreduce.yaml says why
        program.update(launcher="mpirun", imports=["mpi4py"],
                       env={"OMPI_MCA_coll_tuned_use_dynamic_rules": 1,
                            "OMPI_MCA_coll_tuned_allreduce_algorithm": 4})
    doc = {
        "name": f"unmodified-{backend}", "scale_factor": 4000, "seed": 2,
        "defaults": {"link": {"rate_mbps": 150, "mtu": 9000, "buffer_kb": 1024}},
        "fabric": {
            "routers": ["leaf1", "leaf2", "leaf3", "spine1"],
            "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"],
                              "leaf3": ["g5", "g6"]},
                      "storage": {"leaf3": ["st1"]}},
            "links": [{"between": ["leaf1", "spine1"], "rate_mbps": 100},
                      {"between": ["leaf2", "spine1"], "rate_mbps": 100},
                      {"between": ["leaf3", "spine1"], "rate_mbps": 1000},
                      {"between": ["st1", "leaf3"], "rate_mbps": 1000}],
            "bottlenecks": [["leaf1", "spine1"]]},
        "lanes": {"vip": [{"roce": True}, {"dscp": 26}], "low": [{"tcp_port": 4420}]},
        "traffic": [
            program,
            {"kind": "storage", "pattern": "read", "server": "st1", "clients": ["g1", "g2"],
             "offered_load": 1.2, "queues": 2},
            {"kind": "command", "name": "iperf", "host": "st1",
             "run": "iperf3 -c {g1} -t 3600 -i 1 --forceflush",
             "serve": {"host": "g1", "run": "iperf3 -s -i 1 --forceflush"}}],
        "policies": policies}
    path = tmp / f"{backend}{'-ddp' if ddp else ''}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def own_clock(run, policy: str, warmup: int) -> tuple[list[float], list[float]]:
    """The job's own op and iteration times (ms), every rank's, past the warm-up."""
    ops, iterations = [], []
    for err in (run.path / "agents" / policy / "program").glob("rank*.err"):
        for line in err.read_text().splitlines():
            if (m := re.fullmatch(r"own (op|iteration) (\d+) ([\d.]+) ms", line)) \
                    and int(m[2]) >= warmup:
                (ops if m[1] == "op" else iterations).append(float(m[3]))
    return ops, iterations


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] \
        if q < 1 else max(values)


def close(labkit_ms: float | None, own_ms: float) -> bool:
    return labkit_ms is not None and abs(labkit_ms / own_ms - 1) <= TOLERANCE


def assert_agrees_with_its_clock(run) -> None:
    for policy, summary in run.summary.policies.items():
        job = summary.workload
        assert job.source == "hook", (policy, job.source)
        own_ops, own_its = own_clock(run, policy, job.warmup)
        assert len(own_ops) >= 6 * (STEPS - job.warmup), policy
        op = job.ops["all_reduce"]
        said = {"op p50": (op.p50_ms, quantile(own_ops, 0.5)),
                "op p99": (op.p99_ms, quantile(own_ops, 0.99)),
                "iteration p50": (job.p50_ms, quantile(own_its, 0.5))}
        wrong = {k: v for k, v in said.items() if not close(*v)}
        assert not wrong, f"{policy}: labkit against the job's own clock, ms: {wrong}"


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gloo")
    return labkit.run(scenario(tmp, "gloo"), out=tmp / "run")


def test_an_unmodified_gloo_jobs_times_agree_with_its_own_clock(fabric_ready, gloo_run):
    assert_agrees_with_its_clock(gloo_run)
    fifo = gloo_run.summary.policies["fifo"]
    # the report names one bottleneck port for every policy, and the job's bytes across it
    assert {p.bottleneck.port for p in gloo_run.summary.policies.values()} == {
        fifo.bottleneck.port}
    assert fifo.workload.bottleneck_bytes_per_iteration > 100_000
    assert fifo.workload.slowdown_p50 > 2  # fifo costs it: the figure says so


def test_an_unmodified_mpi_jobs_times_agree_with_its_own_clock(fabric_ready, tmp_path):
    require(shutil.which(programs.MPIRUN) is not None, "needs Debian's openmpi-bin (make mpi)")
    run = labkit.run(scenario(tmp_path, "mpi", policies=["fifo", "state-aware"]),
                     out=tmp_path / "run")
    assert_agrees_with_its_clock(run)


def test_a_ddp_jobs_buckets_are_timed_and_its_iterations_cut_by_forward_passes(
        fabric_ready, tmp_path):
    run = labkit.run(scenario(tmp_path, "gloo", ddp=True), ["isolated"], out=tmp_path / "run")
    job = run.summary.policies["isolated"].workload
    assert job.source == "hook" and job.ops["all_reduce"].bytes > 256 << 10
    _, own_its = own_clock(run, "isolated", job.warmup)
    assert close(job.p50_ms, quantile(own_its, 0.5)), (job.p50_ms, quantile(own_its, 0.5))
    assert job.iterations >= STEPS - 2  # the last step, which no forward ends, is left out


def test_a_job_that_is_neither_is_measured_right_or_said_to_be_unmeasurable(
        fabric_ready, tmp_path):
    run = labkit.run(scenario(tmp_path, "sockets"), ["isolated", "fifo"], out=tmp_path / "run")
    for policy, summary in run.summary.policies.items():
        job = summary.workload
        assert job.source == "traffic"
        if job.unmeasured:
            assert job.p50_ms is None and job.slowdown_p50 is None and not job.ops
            assert any("not measurable" in n for n in summary.fidelity.notes), policy
            continue
        _, own_its = own_clock(run, policy, job.warmup)
        assert close(job.p50_ms, quantile(own_its, 0.5)), (policy, job.p50_ms)
