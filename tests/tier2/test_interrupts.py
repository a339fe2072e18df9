"""Interrupted runs: Ctrl-C tears down and marks the run; `labkit clean` after kill -9."""

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.leaks import assert_no_leaks, labkit_objects

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.cli"]


# a controlled policy too: its gates, their socket iterator and the controller's threads
# must go with everything else
POLICIES = ("fifo", "priority+state-aware")


def start_run(out: Path, policy: str) -> subprocess.Popen:
    return subprocess.Popen([*LABKIT, "run", str(REPO / "topologies/bottleneck.yaml"),
                             "--policy", policy, "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("policy", POLICIES)
def test_sigint_stops_within_5s_and_marks_the_run(fabric_ready, tmp_path, policy):
    out = tmp_path / "run"
    proc = start_run(out, policy)
    time.sleep(6)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - t0 <= 5
    assert proc.returncode == 130, stderr
    assert "torn down" in stderr
    manifest = json.loads((tmp_path / ".run.incomplete" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert not out.exists()
    assert_no_leaks()


@pytest.mark.parametrize("trial", range(5))
def test_clean_after_kill_9_then_the_next_run_succeeds(fabric_ready, tmp_path, trial):
    proc = start_run(tmp_path / "run", POLICIES[trial % 2])
    deadline = time.monotonic() + 30
    while not labkit_objects()["pins"] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(random.uniform(0, 6))  # somewhere between set-up and the end of the traffic
    proc.kill()
    proc.communicate()
    clean = subprocess.run([*LABKIT, "clean"], capture_output=True, text=True, cwd=REPO)
    assert clean.returncode == 0, clean.stderr
    assert_no_leaks()
    again = subprocess.run([*LABKIT, "clean"], capture_output=True, text=True, cwd=REPO)
    assert "nothing to clean" in again.stdout
    after = subprocess.run([*LABKIT, "run", str(REPO / "topologies/bottleneck.yaml"),
                            "--policy", "isolated", "--duration", "2", "--out",
                            str(tmp_path / "next")], capture_output=True, text=True, cwd=REPO,
                           timeout=120)
    assert after.returncode == 0, after.stderr
    assert_no_leaks()
