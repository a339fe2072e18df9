"""Training jobs on the bottleneck fabric: pipeline against tensor parallelism, measured."""

from pathlib import Path

import pytest

import labkit
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = {}
    for kind in ("tensor", "pipeline"):
        path = tmp_path_factory.mktemp(kind) / "run"
        run = labkit.run(REPO / f"topologies/{kind}-parallel.yaml", ["isolated", "fifo"],
                         out=path)
        out[kind] = run.summary["policies"]
    return out


def test_both_jobs_report_iterations_exposed_communication_and_bubbles(fabric_ready, jobs):
    for kind, policies in jobs.items():
        for p in policies.values():
            job = p["job"]
            assert job["parallelism"] == kind and job["iterations"] == 10
            assert job["p50_ms"] > job["compute_ms"] > 0
            assert 0 < job["exposed_comm_fraction"] < 1
            assert 0 <= job["bubble_fraction"] <= job["exposed_comm_fraction"]
            assert job["wrong"] == 0
    # a pipeline idles while its stages wait for each other; tensor parallelism hardly does
    assert jobs["pipeline"]["isolated"]["job"]["bubble_fraction"] > 0.2


def test_tensor_parallelism_moves_more_and_suffers_more_from_storage(fabric_ready, jobs):
    tp, pp = jobs["tensor"], jobs["pipeline"]
    tp_bytes = tp["isolated"]["job"]["bottleneck_bytes_per_iteration"]
    pp_bytes = pp["isolated"]["job"]["bottleneck_bytes_per_iteration"]
    assert tp_bytes > 4 * pp_bytes
    assert tp["fifo"]["job"]["slowdown_p50"] > pp["fifo"]["job"]["slowdown_p50"]
    assert_no_leaks()
