"""Test tiers (see docs/testing.md).

* tier0 — runs anywhere: no root, no kernel objects.
* tier1 — needs root and built BPF objects: programs loaded and fed packets.
* tier2 — needs root and Mininet: real fabrics, real traffic.

A tier 1/2 test that cannot run is skipped on a developer machine but *fails*
under ``CI=true``: CI never passes by skipping the kernel. Under ``CI=true`` any
other skip (a missing program, an ``importorskip``) fails too: the fresh-machine
path must bring up everything the suite needs.
"""

import os
import shutil
import socket
from pathlib import Path

import pytest

from labkit.kernel import bpf

CI = os.environ.get("CI") == "true"
# every fork (os.fork, pty.fork; not subprocess's fork-exec) made from this process while
# it has more than one thread: the test that made it fails (no_fork_with_threads). labkit
# starts its children by exec; a child forked from a threaded process can inherit a lock
# some other thread held. (Python 3.12+ only warns, and an "error" warning filter is
# swallowed there: this catches it on every version.)
FORKS_WITH_THREADS: list[str] = []


def _before_fork() -> None:
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:
        FORKS_WITH_THREADS.append(f"a fork with {threads} threads running")


os.register_at_fork(before=_before_fork)


def free_port() -> int:
    """A TCP port on localhost that nothing listens on (for a test's own server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if CI:
        pytest.fail(f"{reason} (CI=true: kernel tests must run, not skip)")
    pytest.skip(reason)


@pytest.fixture
def labkit_paths(tmp_path):
    """labkit's paths (:mod:`labkit.model.paths`) with everything labkit writes (runs,
    models, figures, state) under ``tmp_path``, handed in for the test's length."""
    from labkit.model import paths

    with paths.use(paths.current().under(tmp_path)) as given:
        yield given


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which runs every test: {reason}"


def pytest_terminal_summary(terminalreporter):
    """Name what labkit left before the suite began (shown under -q too)."""
    from tests.leaks import before_the_suite

    if left := before_the_suite():
        terminalreporter.write_sep("-", "labkit objects from before this suite (not counted "
                                   "as its leaks; `sudo labkit clean` removes them)")
        for line in left:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items):
    for item in items:
        for tier in ("tier1", "tier2"):
            if tier in Path(str(item.fspath)).parts:
                item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(autouse=True)
def no_fork_with_threads():
    FORKS_WITH_THREADS.clear()
    yield
    assert not FORKS_WITH_THREADS, f"forked from a threaded process: {FORKS_WITH_THREADS}"


@pytest.fixture
def bpf_ready():
    require(os.geteuid() == 0, "needs root")
    require(os.path.ismount("/sys/fs/bpf"), "needs bpffs at /sys/fs/bpf (make setup)")
    for name in ("classifier", "queues"):
        require(bpf.object_path(name).exists(), f"needs {bpf.object_path(name)} (make bpf)")


@pytest.fixture
def fabric_ready(bpf_ready):
    require(shutil.which("mnexec") is not None, "needs Debian's mininet (mnexec)")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        require(False, "needs the mininet Python module (make setup)")
