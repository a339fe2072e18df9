"""The run lock: one experiment at a time, re-entrant on the thread that holds it."""

import subprocess
import sys
import threading

import pytest

from labkit.kernel.registry import CLEANING, RunLock, RunLockedError


@pytest.fixture(autouse=True)
def lock_here(tmp_path, monkeypatch):
    monkeypatch.setattr(RunLock, "path", tmp_path / "run.lock")


def test_a_calibration_holds_it_and_names_its_trial_while_it_runs():
    with RunLock("calibrate-x"):
        assert RunLock.holder().run_id == "calibrate-x"
        with RunLock("trial-1"):
            assert RunLock.holder().run_id == "trial-1"
        assert RunLock.holder().run_id == "calibrate-x"
    assert RunLock.holder() is None


def test_another_thread_or_process_is_refused_by_name():
    refused = []

    def other():
        try:
            with RunLock("someone"):
                pass
        except RunLockedError as exc:
            refused.append(str(exc))

    with RunLock("mine"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from labkit.kernel.registry import RunLock; RunLock.path = Path(sys.argv[1]); "
             "RunLock('theirs').__enter__()", str(RunLock.path)],
            capture_output=True, text=True)
    assert refused and "run mine (pid" in refused[0] and "in progress" in refused[0]
    assert proc.returncode == 1 and "run mine (pid" in proc.stderr
    with RunLock("free-again"):
        pass


def test_clean_is_named_as_clean():
    with RunLock(CLEANING):
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from labkit.kernel.registry import RunLock; RunLock.path = Path(sys.argv[1]); "
             "RunLock('a-run').__enter__()", str(RunLock.path)],
            capture_output=True, text=True)
    assert "`labkit clean` (pid" in proc.stderr


def test_a_run_chooses_its_id_under_the_lock_and_the_lock_names_it(labkit_paths):
    from labkit.runs import runner

    with runner._claimed("lab") as run_id:
        assert run_id.endswith("-lab") and RunLock.holder().run_id == run_id
        proc = subprocess.run(  # a second run of it, from another process
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from labkit.kernel import registry; from labkit.runs import runner; "
             "registry.RunLock.path = Path(sys.argv[1]); "
             "runner._claimed('lab').__enter__()", str(RunLock.path)],
            capture_output=True, text=True, env=labkit_paths.environ())
    assert proc.returncode == 1 and f"run {run_id} (pid" in proc.stderr


def test_a_killed_runs_scratch_directory_is_a_leftover_until_clean(tmp_path, monkeypatch):
    from labkit.kernel import registry

    monkeypatch.setattr(registry, "WORK_DIR", tmp_path / "work")
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    with RunLock("mine"), registry.work_dir("mine") as mine:
        assert mine.is_dir() and registry.leftover_work_dirs() == []  # it is running
    assert not mine.exists()
    (tmp_path / "work" / "killed").mkdir()  # what a kill -9 leaves
    assert registry.leftover_work_dirs() == [tmp_path / "work" / "killed"]
    assert "(killed)" in registry.leftovers_line()
