"""nccl-tests' Reduce, Gather, Scatter and SendRecv swept for real (issue 50) on a small
two-leaf fabric: at each size every chunk that matters is right (#wrong 0) and the bus
bandwidth is positive and within the slowest link; through the command line, with the op's
own algorithm when --algo is left out, nccl-tests' columns read back as nccl-tests'."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import labkit
from labkit.analysis import nccltests
from labkit.model import scenario
from labkit.model.traffic import schedules
from tests.leaks import assert_no_leaks
from tests.tier0.test_sweep_format import parse_nccl_tests

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.ui.cli"]
DOC = {"name": "sweep-ops",
       "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 1024}},
       "fabric": {"routers": ["leaf1", "leaf2", "spine1"],
                  "hosts": {"gpu": {"leaf1": ["g1", "g2"], "leaf2": ["g3", "g4"]}},
                  "links": [["leaf1", "spine1"], ["leaf2", "spine1"]],
                  "bottlenecks": [["leaf1", "spine1"]]},
       "traffic": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "1MiB",
                    "iterations": 2}]}
SIZES = [64 << 10, 256 << 10]
NEW = [(op, algo) for op in ("reduce", "gather", "scatter", "sendrecv")
       for algo in schedules.ALGOS[op]]


@pytest.mark.parametrize("op, algo", NEW)
def test_each_new_op_sweeps_right_within_the_link(fabric_ready, tmp_path, op, algo):
    done = labkit.sweep(scenario.parse(DOC), op, algo, SIZES, iters=2, out=tmp_path / op)
    assert [r.size for r in done.rows] == SIZES
    for row in done.rows:
        assert row.wrong == 0, row
        assert row.algo == algo, row
        assert 0 < row.busbw_mbps <= row.link_mbps * 1.02, row
    assert_no_leaks()


def test_sweep_command_runs_scatter_by_its_own_algorithm(fabric_ready, tmp_path):
    path = tmp_path / "sweep-ops.yaml"
    path.write_text(yaml.safe_dump(DOC))
    proc = subprocess.run([*LABKIT, "sweep", str(path), "--op", "scatter", "-b", "64K", "-e",
                           "256K", "-f", "4", "-n", "2", "--out", str(tmp_path / "sweep")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# labkit sweep: scatter (direct) over 4 ranks" in proc.stdout
    parsed = parse_nccl_tests(proc.stdout)
    assert [r["size"] for r in parsed["rows"]] == SIZES
    assert [r["count"] for r in parsed["rows"]] == [nccltests.param_count("scatter", s, 4)
                                                    for s in SIZES]
    assert all((r["redop"], r["root"]) == ("none", 0) for r in parsed["rows"])
    assert all(r["busbw"] > 0 for r in parsed["rows"])
    assert parsed["wrong"] == (0, "OK")
    assert_no_leaks()
