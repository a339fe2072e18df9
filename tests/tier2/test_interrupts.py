"""Interrupted runs: Ctrl-C tears down and marks the run; `labkit clean` after kill -9."""

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.kernel import registry
from tests.leaks import assert_no_leaks, labkit_objects

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.ui.cli"]


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
    _wait_for_traffic(proc)
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


@pytest.mark.untimed
def test_clean_after_kill_9_then_the_next_run_succeeds(fabric_ready, tmp_path):
    """Two trials, one of each policy, each killing a run at a random moment; the second
    trial's run starts on what the first clean left, and a last run after the second clean
    completes."""
    for trial in range(2):
        proc = start_run(tmp_path / f"run{trial}", POLICIES[trial % 2])
        deadline = time.monotonic() + 30
        while not labkit_objects()["pins"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, f"trial {trial}: the run ended before it was killed"
        time.sleep(random.uniform(0, 4))  # in the build, the warm-up or the traffic
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


def _wait_for_traffic(proc: subprocess.Popen) -> None:
    """Until the run's traffic agents have run for a second (or the run has ended)."""
    _wait_for(lambda: proc.poll() is not None
              or any("labkit.traffic." in p for p in labkit_objects()["processes"]), 60)
    time.sleep(1)


def _wait_for(what, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not what() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert what(), "the run never got that far"


def _ended_interrupted(proc: subprocess.Popen, tmp_path: Path) -> str:
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "torn down" in stderr
    manifest = json.loads((tmp_path / ".run.incomplete" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert_no_leaks()
    return stderr


@pytest.mark.untimed
def test_sigint_during_the_build_waits_for_it_then_tears_down(fabric_ready, tmp_path):
    before = set(labkit_objects()["registries"])
    proc = start_run(tmp_path / "run", POLICIES[1])
    _wait_for(lambda: set(labkit_objects()["registries"]) - before, 30)  # being built
    proc.send_signal(signal.SIGINT)
    _ended_interrupted(proc, tmp_path)


@pytest.mark.untimed
def test_sigint_twice_and_during_the_teardown(fabric_ready, tmp_path):
    proc = start_run(tmp_path / "run", POLICIES[1])
    _wait_for(lambda: any("labkit.traffic." in p for p in labkit_objects()["processes"]), 60)
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:  # the first stops the run,
        proc.send_signal(signal.SIGINT)  # the others land in its teardown
        time.sleep(0.01)
    stderr = _ended_interrupted(proc, tmp_path)
    assert "it finishes first" in stderr or "still tearing down" in stderr


@pytest.mark.untimed
def test_a_closed_terminal_tears_the_run_down(fabric_ready, tmp_path):
    """SIGHUP: `labkit run` with a pseudo-terminal as its controlling terminal (setsid
    --ctty), whose other end then closes, as when an SSH session drops."""
    primary, secondary = os.openpty()
    proc = subprocess.Popen(["setsid", "--ctty", *LABKIT, "run",
                             str(REPO / "topologies/bottleneck.yaml"), "--policy", "fifo",
                             "--out", str(tmp_path / "run")], cwd=REPO,
                            stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    _wait_for_traffic(proc)
    assert proc.poll() is None
    os.close(primary)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    manifest = json.loads((tmp_path / ".run.incomplete" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert_no_leaks()


@pytest.mark.untimed
def test_a_close_that_raises_stops_nothing_else(fabric_ready, tmp_path, monkeypatch):
    import labkit
    from labkit.kernel.lanes import Classifier

    original = Classifier.close

    def broken(self):  # as a close that fails on its way out (a truncated report, say)
        original(self)
        raise RuntimeError("a close that fails")

    monkeypatch.setattr(Classifier, "close", broken)
    with pytest.raises(RuntimeError, match="a close that fails"):
        labkit.run(REPO / "topologies/bottleneck.yaml", ["priority"], duration=1,
                   out=tmp_path / "run")
    monkeypatch.undo()
    assert_no_leaks()


@pytest.mark.untimed
def test_clean_racing_a_starting_run_leaves_it_alone(fabric_ready, tmp_path):
    """`labkit clean` over and over while a run starts, runs and ends: each clean either
    finds nothing or is refused (the run holds the machine), and the run is not torn down
    under it. A run that found clean holding the lock says so and is started again."""
    cleans = []
    for attempt in range(5):
        run = subprocess.Popen([*LABKIT, "run", str(REPO / "topologies/bottleneck.yaml"),
                                "--policy", "fifo", "--duration", "2", "--out",
                                str(tmp_path / f"r{attempt}")], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while run.poll() is None:
            cleans.append(subprocess.run([*LABKIT, "clean"], capture_output=True, text=True,
                                         cwd=REPO))
        _, stderr = run.communicate()
        if run.returncode == 0:
            break
        assert run.returncode == 1 and "`labkit clean` (pid" in stderr, stderr
    assert run.returncode == 0, "clean held the lock at every start"
    assert len(cleans) > 5
    for c in cleans:
        assert (c.returncode == 0 and "nothing to clean" in c.stdout) or \
            (c.returncode == 1 and "is in progress" in c.stderr), c.stdout + c.stderr
    assert_no_leaks()


@pytest.mark.untimed
def test_a_namespace_a_users_process_holds_is_emptied_and_the_run_kept(fabric_ready, tmp_path):
    """Processes the user started in g1's and leaf1's namespaces (``nsenter``, as from
    `labkit shell`) still run at teardown: labkit removes its own ports from those
    namespaces (the veth between them too, which neither namespace's end would take with
    it) and leaves the processes alone; the run is recorded complete, its notes naming
    them."""
    proc = subprocess.Popen([*LABKIT, "run", str(REPO / "topologies/bottleneck.yaml"),
                             "--policy", "fifo", "--duration", "4", "--out",
                             str(tmp_path / "run")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline, shells = time.monotonic() + 60, {}
    while len(shells) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
        for path in registry.REGISTRY_DIR.glob("*.jsonl"):
            with contextlib.suppress(OSError, ValueError):
                shells = {e["node"]: e["pid"] for e in registry.read_entries(path)
                          if e["kind"] == "netns" and e["node"] in ("g1", "leaf1")}
        time.sleep(0.1)
    mine = {node: subprocess.Popen(["nsenter", f"--net=/proc/{pid}/ns/net", "sleep", "120"],
                                   start_new_session=True)  # the user's, not labkit's
            for node, pid in shells.items()}
    try:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
        manifest = json.loads((tmp_path / "run/manifest.json").read_text())
        assert manifest["status"] == "complete", manifest
        notes = manifest["notes"]
        assert len(notes) == 2, notes
        for node, p in mine.items():
            (note,) = [n for n in notes if n.startswith(f"{node}'s namespace")]
            assert f"still held by pid {p.pid} (sleep 120)" in note and "ports were removed" in note
            assert f"pid {p.pid}" in out  # told on the terminal too
            assert p.poll() is None  # labkit left it running
            links = subprocess.run(["nsenter", f"--net=/proc/{p.pid}/ns/net", "ip", "-o",
                                    "link"], capture_output=True, text=True, check=True).stdout
            assert [line.split(":")[1].strip() for line in links.splitlines()] == ["lo"]
        assert_no_leaks()
    finally:
        for p in mine.values():
            p.kill()
            p.wait()
