"""Two unmodified PyTorch jobs sharing the fabric (issue 48, topologies/two-ddp.yaml):
each measured from outside its code and its packets counted apart at the bottleneck by
the DSCP its job marker gives it (bounded by what its hosts' markers counted leaving
them); Ctrl-C, and kill -9 then `labkit clean`, with both running leave nothing behind."""

from __future__ import annotations

import copy
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import labkit
from labkit.model import scenario
from labkit.model.paths import scenario_file
from tests.leaks import assert_no_leaks, labkit_objects, wait_for_ranks

REPO = Path(__file__).resolve().parents[2]
TWO_DDP = scenario_file("two-ddp")


# each job's iterations: about 9 s of each under job-priority, where deep (vip) iterates
# in about 450 ms and wide in about 900 ms, so that both run all along
ITERATIONS = {"wide": 10, "deep": 20}


def _short(iterations: dict[str, int], policies: list[str]) -> scenario.Scenario:
    """two-ddp.yaml with fewer iterations (parsed as its file: its paths hold)."""
    _, doc = scenario.read_yaml(TWO_DDP)
    doc = copy.deepcopy(doc)
    for job in doc["traffic"][:2]:
        job["iterations"] = iterations[job["name"]]
    doc["policies"] = policies
    return scenario.parse(doc, str(TWO_DDP))


def test_two_programs_are_each_measured_counted_apart_and_ranked(fabric_ready, tmp_path):
    """Under job-priority, learned from what each job's ranks report as they run: deep
    (300 ms of compute per 1 MiB) is the more intense and goes alone into vip, and stays
    within 1.10x of alone by its own clock; wide pays, and both are measured."""
    run = labkit.run(_short(ITERATIONS, ["isolated", "job-priority"]), out=tmp_path / "run")
    ranked = run.summary.policies["job-priority"].jobs
    assert ranked and set(ranked.each) == {"wide", "deep"}
    for name, job in ranked.each.items():
        alone = run.summary.policies["isolated"].jobs.each[name]
        assert job.iterations >= 4 and alone.iterations >= 5, (name, job)
        assert job.slowdown_p50 is not None and job.slowdown_p50 > 0.8, (name, job)
        assert job.bottleneck and job.bottleneck.bytes > 0
        # the job marker's count at its hosts' NICs (every packet the job sent) bounds
        # what the bottleneck port took of the job (one direction of it)
        assert job.bottleneck.bytes <= job.workload.traffic.bytes * 1.01, (name, job)
    assert sum(j.bottleneck.share for j in ranked.each.values()) == pytest.approx(1.0)
    assert ranked.each["wide"].bottleneck.share > ranked.each["deep"].bottleneck.share
    ranks = run["job_ranks"]
    last = ranks.filter(pl.col("t_ns") == ranks["t_ns"].max())
    assert dict(zip(last["job"], last["lane"], strict=True)) == {"deep": "vip", "wide": "normal"}
    # the median, over a short run (a dozen iterations: its p99 is its slowest one's);
    # (two-ddp.yaml's 30 iterations give a p99: docs/jobs.md)
    deep, wide = ranked.each["deep"], ranked.each["wide"]
    assert deep.slowdown_p50 is not None and deep.slowdown_p50 <= 1.10, deep
    assert wide.slowdown_p50 is not None and wide.slowdown_p50 > deep.slowdown_p50 + 0.15, wide
    assert_no_leaks()


def _start(path: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "labkit.ui.cli", "run", str(path),
                             "--policy", "fifo", "--duration", "60", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def _both_running(proc: subprocess.Popen) -> None:
    wait_for_ranks(proc, "ddp.py", 8)


@pytest.mark.untimed
def test_ctrl_c_with_two_programs_leaves_nothing(fabric_ready, tmp_path):
    proc = _start(TWO_DDP, tmp_path / "run")
    _both_running(proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130, proc.stderr.read()
    assert_no_leaks()


@pytest.mark.untimed
def test_kill_9_then_clean_with_two_programs_leaves_nothing(fabric_ready, tmp_path):
    proc = _start(TWO_DDP, tmp_path / "run")
    _both_running(proc)
    proc.kill()
    proc.wait()
    left = labkit_objects()
    assert sum("ddp.py" in p for p in left["processes"]) == 8  # they outlived it,
    assert left["cgroups"]  # and so did their cgroups
    clean = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    assert "in cgroup" in clean.stdout and "removed cgroup" in clean.stdout, clean.stdout
    assert_no_leaks()
