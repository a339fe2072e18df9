"""Tier 1: runs' cgroups under labkit's top cgroup, torn down one run at a time. A run's
teardown ends the processes in its own cgroups and never another run's: the top cgroup
is every run's parent, removed by whichever run leaves it empty (`labkit clean` of two
killed runs met this: the first run's teardown took the second's programs with it)."""

import os
import subprocess

import pytest

from labkit.kernel import cgroups
from labkit.kernel.registry import Registry
from tests.conftest import require


@pytest.fixture
def top(bpf_ready):
    require(cgroups.problem() is None, f"needs a writable cgroup v2: {cgroups.problem()}")
    return cgroups.require_root() / cgroups.TOP


def a_run(tmp_path, name: str, top) -> tuple[Registry, subprocess.Popen]:
    """A registry with a cgroup of its own under ``top`` and a process in it."""
    record = Registry(f"test-{name}-{os.getpid()}", tmp_path / f"{name}.json")
    group = cgroups.make(top / record.run_id / "rank0", record.add, first=True)
    proc = subprocess.Popen(["sleep", "60"])
    group.add(proc.pid)
    return record, proc


def test_a_teardown_leaves_the_other_runs_and_the_last_removes_the_top(top, tmp_path):
    others = {p for p in top.iterdir() if p.is_dir()} if top.exists() else set()
    first, first_proc = a_run(tmp_path, "first", top)  # made the top, if none was there
    second, second_proc = a_run(tmp_path, "second", top)
    cgroups.make(top / second.run_id / "rank1", second.add)  # a second host of its own
    try:
        assert [e for e in second.entries if e.get("shared")] == \
            [{"kind": "cgroup", "path": str(top), "shared": True}]

        first.teardown()
        assert first_proc.wait(timeout=5) == -9
        assert second_proc.poll() is None, "the first run's teardown killed the second's"
        assert (top / second.run_id / "rank0").is_dir()

        second.teardown()
        assert second_proc.wait(timeout=5) == -9
        assert not (top / second.run_id).exists()
        assert top.exists() == bool(others)  # only another's cgroups would keep it
    finally:  # what a failed assertion left
        for record, proc in ((first, first_proc), (second, second_proc)):
            record.teardown()
            proc.wait()
