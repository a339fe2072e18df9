"""Storage mixes on a real fabric: checkpoints burst together, metadata arrives at
random, dataset reads stream at their offered load."""

from pathlib import Path

import polars as pl
import pytest

import labkit
from labkit.model import scenario
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "topologies/storage-mix.yaml"
MS = 1_000_000


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mix") / "run"
    return labkit.run(SCENARIO, ["fifo"], duration=6, out=out)


def _entry(run, name: str) -> pl.DataFrame:
    return run.tables["ios"].filter(pl.col("entry") == name).sort("t_ns")


def test_checkpoints_from_every_gpu_host_start_only_inside_the_shared_window(fabric_ready, run):
    spec = next(e for e in scenario.load(SCENARIO).storage if e.name == "checkpoint")
    on, period = spec.arrival.on_ms * MS, (spec.arrival.on_ms + spec.arrival.off_ms) * MS
    ios = _entry(run, "checkpoint")
    assert set(ios["host"]) == set(spec.clients)
    first = ios["t_ns"].min()  # ~ the shared start: every window opens at start + k * period
    phase = (ios["t_ns"] - first + 20 * MS) % period  # 20 ms of slack before a window
    assert phase.max() <= on + 40 * MS
    assert (ios["t_ns"].max() - first) > 4 * period  # several bursts, not one


def test_metadata_arrives_as_a_poisson_process_at_its_offered_rate(fabric_ready, run):
    spec = next(e for e in scenario.load(SCENARIO).storage if e.name == "metadata")
    ios = _entry(run, "metadata")
    span_s = (ios["t_ns"].max() - ios["t_ns"].min()) / 1e9
    expected = spec.offered_load * 100e6 / 8 / spec.io_bytes  # I/Os per second, all clients
    assert ios.height / span_s == pytest.approx(expected, rel=0.25)
    for _, per_host in ios.group_by("host"):
        gaps = per_host["t_ns"].diff().drop_nulls()
        assert 0.7 < gaps.std() / gaps.mean() < 1.3  # exponential gaps: CV ~ 1


def test_every_entry_moves_data_and_no_connection_failed(fabric_ready, run):
    fifo = run.summary.policies["fifo"]
    entries = fifo.storage.entries  # by entry name
    assert set(entries) == {"dataset", "checkpoint", "metadata"}
    assert 0 < entries["dataset"].goodput_mbps <= 0.5 * 100 * 1.05
    assert entries["checkpoint"].goodput_mbps > 0
    assert entries["metadata"].io_p50_ms > 0
    assert not [n for n in fifo.fidelity.notes if "storage" in n]
    assert fifo.workload.wrong == 0
    assert_no_leaks()
