"""A ring and one slow link (issue 49): one GPU host's link of an 8-rank ring at half rate
makes every rank's All-Reduce take as long as the alpha-beta model says the slowest link
allows: 2(n-1) steps of alpha plus a chunk over the slowest link's rate, alpha measured
from the ring with every link at full rate."""

from __future__ import annotations

import polars as pl
import pytest

import labkit
from labkit.model import scenario
from tests.leaks import assert_no_leaks

SIZE = 2 << 20
RANKS = 8
DOC = {
    "name": "slow-link",
    "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 1024}},
    "fabric": {"routers": ["leaf1", "leaf2", "spine1"],
               "hosts": {"gpu": {"leaf1": ["g1", "g2", "g3", "g4"],
                                 "leaf2": ["g5", "g6", "g7", "g8"]}},
               "links": [["leaf1", "spine1"], {"between": ["leaf2", "spine1"],
                                               "rate_mbps": 1000}],
               "bottlenecks": [["leaf1", "spine1"]]},
    "traffic": [{"kind": "allreduce", "algo": "ring", "ranks": "gpu", "size_bytes": SIZE,
                 "iterations": 6, "compute_ms": 20}],
}


def rank_op_ms(doc: dict, out) -> float:
    """Each rank's mean op time (its own start to its own end), averaged over ranks."""
    run = labkit.run(scenario.parse(doc, "test_slow_link.py"), ["isolated"], out=out)
    c = run["collectives"].filter(pl.col("op") >= 2)  # past the first ops' start-up
    return float(c.select(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).mean()).item())


def test_one_half_rate_link_makes_the_ring_as_slow_as_alpha_beta_says(fabric_ready,
                                                                      tmp_path):
    steps, chunk_bits = 2 * (RANKS - 1), SIZE / RANKS * 8
    even = rank_op_ms(DOC, tmp_path / "even")
    alpha_ms = max(even / steps - chunk_bits / 100e3, 0.0)  # per step, at 100 Mbit/s
    slow_doc = {**DOC, "fabric": {**DOC["fabric"], "links": [
        *DOC["fabric"]["links"], {"between": ["g3", "leaf1"], "rate_mbps": 50}]}}
    slow = rank_op_ms(slow_doc, tmp_path / "slow")
    predicted = steps * (alpha_ms + chunk_bits / 50e3)
    assert slow == pytest.approx(predicted, rel=0.15), (even, slow, predicted)
    assert slow / even == pytest.approx(2.0, rel=0.15)
    assert_no_leaks()
