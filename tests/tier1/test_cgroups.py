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


def a_run(tmp_path, name: str, top, procs: list) -> Registry:
    """A registry with a cgroup of its own under ``top`` and a process in it (in
    ``procs``)."""
    record = Registry(f"test-{name}-{os.getpid()}", tmp_path / f"{name}.jsonl")
    group = cgroups.make(top / record.run_id / "rank0", record.add, first=True)
    procs.append(subprocess.Popen(["sleep", "60"]))
    group.add(procs[-1].pid)
    return record


def test_a_teardown_leaves_the_other_runs_and_the_last_removes_the_top(top, tmp_path):
    others = {p for p in top.iterdir() if p.is_dir()} if top.exists() else set()
    records: list[Registry] = []
    procs: list[subprocess.Popen] = []
    try:
        records.append(a_run(tmp_path, "first", top, procs))  # made the top, if none was
        records.append(a_run(tmp_path, "second", top, procs))
        first, second = records
        cgroups.make(top / second.run_id / "rank1", second.add)  # a second host of its own
        assert [e for e in second.entries if e.get("shared")] == \
            [{"kind": "cgroup", "path": str(top), "shared": True}]

        first.teardown()
        assert procs[0].wait(timeout=5) == -9
        assert procs[1].poll() is None, "the first run's teardown killed the second's"
        assert (top / second.run_id / "rank0").is_dir()

        second.teardown()
        assert procs[1].wait(timeout=5) == -9
        assert not (top / second.run_id).exists()
        assert top.exists() == bool(others)  # only another's cgroups would keep it
    finally:  # what a failed assertion left
        for record in records:
            record.teardown()
        for proc in procs:
            proc.kill()
            proc.wait(timeout=5)
