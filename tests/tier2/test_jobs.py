"""Training jobs on the bottleneck fabric, each kind of parallelism measured: data (bucketed
All-Reduce), tensor, pipeline, and expert (all-to-all). Each shipped scenario runs with
3 of its 10 iterations at twice its rates (``emulation.rate_factor: 2``, which halves its
compute times too: the same experiment in half the time, and every figure checked here a
median, a fraction or a ratio; the one duration checked is scaled by it)."""

from pathlib import Path

import polars as pl
import pytest

import labkit
from labkit.model import grid
from labkit.model.scenario import Scenario
from labkit.model.summary import Job
from tests.leaks import assert_no_leaks
from tests.spans import assert_spans_fit

REPO = Path(__file__).resolve().parents[2]
ITERATIONS = 3
RATE_FACTOR = 2


def _short(kind: str) -> Scenario:
    """topologies/<kind>-parallel.yaml with :data:`ITERATIONS` iterations, at
    :data:`RATE_FACTOR` times its rates."""
    return grid.scenario_with(REPO / f"topologies/{kind}-parallel.yaml",
                              [f"traffic[kind=job].iterations={ITERATIONS}",
                               f"emulation.rate_factor={RATE_FACTOR}"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {kind: labkit.run(_short(kind), ["isolated", "fifo"],
                             out=tmp_path_factory.mktemp(kind) / "run")
            for kind in ("data", "tensor", "pipeline", "expert")}


@pytest.fixture(scope="module")
def jobs(runs):
    return {kind: {name: p.workload for name, p in run.summary.policies.items()}
            for kind, run in runs.items()}


def test_both_jobs_report_iterations_exposed_communication_and_bubbles(fabric_ready, jobs):
    for kind, policies in jobs.items():
        for job in policies.values():
            assert isinstance(job, Job)
            assert job.parallelism == kind and job.iterations == ITERATIONS
            assert job.p50_ms > job.compute_ms > 0
            assert 0 < job.exposed_comm_fraction < 1
            assert 0 <= job.bubble_fraction <= job.exposed_comm_fraction
            assert job.wrong == 0
    # a pipeline idles while its stages wait for each other; tensor parallelism hardly does
    assert jobs["pipeline"]["isolated"].bubble_fraction > 0.2


def test_every_iteration_records_its_phases_as_spans(fabric_ready, runs):
    """Each rank's spans fit its iterations and add up to their sums; a pipeline's last
    stage first idles in a bubble until its first micro-batch has crossed the 7 stages
    before it (``stage_compute_ms`` each, divided by the rate factor)."""
    for run in runs.values():
        assert_spans_fit(run["collectives"], run["phases"])
    last = (runs["pipeline"]["phases"]
            .filter((pl.col("policy") == "isolated") & (pl.col("op") == 0)
                    & (pl.col("rank") == 7)).sort("start_ns").row(0, named=True))
    stage_ms = dict(_short("pipeline").jobs[0].params)["stage_compute_ms"]  # the file's
    assert last["phase"] == "bubble" and \
        last["end_ns"] - last["start_ns"] > 6 * stage_ms / RATE_FACTOR * 1e6


def test_tensor_parallelism_moves_more_and_suffers_more_from_storage(fabric_ready, jobs):
    tp, pp = jobs["tensor"], jobs["pipeline"]
    tp_bytes = tp["isolated"].bottleneck_bytes_per_iteration
    pp_bytes = pp["isolated"].bottleneck_bytes_per_iteration
    assert tp_bytes > 4 * pp_bytes
    assert tp["fifo"].slowdown_p50 > pp["fifo"].slowdown_p50


def test_data_and_expert_parallelism_cross_the_uplink_and_wait_behind_storage(fabric_ready,
                                                                              jobs):
    """Data parallelism's ring crosses the uplink once each way, and a ring link carries
    2·(N-1)/N of the gradients per All-Reduce; expert parallelism sends half of every
    rank's tokens across, in both all-to-alls of each of its 4 layers. Both wait behind
    the dataset reads under fifo."""
    dp, ep = jobs["data"]["isolated"], jobs["expert"]["isolated"]
    ring = 2 * 7 / 8 * (2 << 20)  # bytes one ring link carries per All-Reduce of 2 MiB
    assert 0.9 * ring <= dp.bottleneck_bytes_per_iteration <= 2.5 * ring
    assert ep.bottleneck_bytes_per_iteration >= 4 * 2 * 4 * (256 << 10) / 2 * 0.9
    for kind in ("data", "expert"):
        assert jobs[kind]["fifo"].slowdown_p50 > 1.2, kind
    assert_no_leaks()
