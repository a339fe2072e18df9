"""Each job's counters at the watched ports, without the kernel: the queue poller reads a
port's job counters with its lane counters (every lanes_every-th sample and the last) and
names them by job, and reads nothing of them in a run of one job; the Probes feature knows
the jobs by DSCP only when a scenario has several; the job_lanes table is written like
every table and is empty in a run recorded before it. The kernel side:
tests/tier1/test_job_counters.py."""

from dataclasses import replace
from pathlib import Path

import polars as pl

from labkit.kernel.capture import LANES_EVERY, QueuePoller, WatchedPort
from labkit.model import scenario
from labkit.model.abi import LANES
from labkit.model.tables import TABLES, JobLaneRow
from labkit.runs import rundir
from labkit.runs.features import Probes
from labkit.runs.result import PolicyResult

REPO = Path(__file__).resolve().parents[2]
JOBS = {26: "tp", 10: "dp"}


class NoClasses:
    def read(self, ifindex: int) -> list:
        return []


def port(reads: list[str]) -> WatchedPort:
    """A port whose readers note each read and count up with it."""

    def lanes() -> dict:
        reads.append("offered")
        return {lane: (len(reads), 0) for lane in LANES}

    def queued() -> tuple[dict, dict]:
        reads.append("queued")
        return ({lane: (len(reads), 0) for lane in LANES},
                {lane: (0, 0) for lane in LANES})

    def jobs() -> dict[int, tuple[int, int, int, int]]:
        reads.append("jobs")
        return {26: (len(reads), 100, 1, 10), 10: (2, 20, 0, 0)}

    return WatchedPort(None, "r1-eth1", 3, offered=lanes, queued=queued,  # type: ignore[arg-type]
                       jobs=jobs)


def sample(poller: QueuePoller, p: WatchedPort, times: int) -> None:
    for _ in range(times):
        poller._sample(NoClasses(), p)  # type: ignore[arg-type]
    poller._sample(NoClasses(), p, last=True)  # type: ignore[arg-type]


def test_the_poller_reads_each_jobs_counters_with_the_lanes_and_names_them():
    reads: list[str] = []
    p = port(reads)
    poller = QueuePoller([p], job_names=JOBS)
    sample(poller, p, LANES_EVERY + 1)  # samples 0 and LANES_EVERY, then the last
    assert reads == ["jobs", "queued", "offered"] * 3  # the jobs' first: never more than lanes'
    assert [(r.port, r.job) for r in poller.job_rows] == [("r1-eth1", "tp"), ("r1-eth1", "dp")] * 3
    assert poller.job_rows[0] == JobLaneRow(poller.job_rows[0].t_ns, "r1-eth1", "tp", 1, 100, 1,
                                            10)
    assert poller.job_rows[1][3:] == (2, 20, 0, 0)
    assert [r.t_ns for r in poller.job_rows[::2]] == [r.t_ns for r in poller.lane_rows[::3]]


def test_a_run_of_one_job_reads_no_job_counters():
    reads: list[str] = []
    p = port(reads)
    poller = QueuePoller([p])
    sample(poller, p, LANES_EVERY + 1)
    assert "jobs" not in reads and poller.job_rows == []
    assert len(poller.lane_rows) == 3 * len(LANES)


def test_the_probes_know_the_jobs_by_dscp_only_when_there_are_several():
    assert Probes.job_names(scenario.load(REPO / "topologies/bottleneck.yaml")) == {}
    assert Probes.job_names(scenario.load(REPO / "topologies/pytorch-ddp.yaml")) == {}
    sc = scenario.load(REPO / "topologies/bottleneck.yaml")
    two = replace(sc, jobs=(replace(sc.jobs[0], name="tp", dscp=26),
                            replace(sc.jobs[0], name="dp", dscp=10)))
    assert Probes.job_names(two) == JOBS


def test_job_lanes_is_a_table_written_with_the_others_and_empty_in_older_runs(tmp_path):
    assert TABLES["job_lanes"] is JobLaneRow
    assert list(rundir.SCHEMAS["job_lanes"]) == ["policy", *JobLaneRow._fields]
    result = PolicyResult("fair", "lanes")
    result.job_lanes = [JobLaneRow(5, "r1-eth1", "tp", 10, 15000, 1, 1500)]
    frame = rundir.tables_from([result])["job_lanes"]
    assert frame.rows() == [("fair", 5, "r1-eth1", "tp", 10, 15000, 1, 1500)]
    older = rundir.load_run(REPO / "tests/tier0/recorded/bottleneck-20261130")
    assert older["job_lanes"].is_empty()
    assert older["job_lanes"].schema == pl.Schema(rundir.SCHEMAS["job_lanes"])
