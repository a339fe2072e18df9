"""`labkit shell` in a real terminal: Mininet's command line on a scenario's fabric."""

import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.leaks import assert_no_leaks

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

REPO = Path(__file__).resolve().parents[2]
PROMPT = b"mininet> "


def read_until(fd: int, marker: bytes | None, timeout_s: float) -> bytes:
    """What the terminal shows until ``marker`` (None: until the program exits)."""
    seen, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            return seen
        if not chunk:
            return seen
        seen += chunk
        if marker is not None and seen.endswith(marker):
            return seen
    raise AssertionError(f"no {marker!r} within {timeout_s} s; the terminal showed:\n"
                         f"{seen.decode(errors='replace')[-2000:]}")


def _shell(*args: str) -> tuple[subprocess.Popen, int]:
    """`labkit shell` of bottleneck.yaml in a pseudo-terminal, its controlling terminal, as
    a user types it (started by exec, not forked from the tests' threaded process): the
    process and the terminal's fd."""
    fd, secondary = os.openpty()
    proc = subprocess.Popen(["setsid", "--ctty", sys.executable, "-m", "labkit.ui.cli", "shell",
                             "topologies/bottleneck.yaml", *args], cwd=REPO,
                            stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    return proc, fd


def _ended(proc: subprocess.Popen, fd: int, wait_s: float) -> int:
    """The shell's exit code, once it ends within ``wait_s`` (else SIGTERM, which tears its
    fabric down, then its code; SIGKILL if even that does not end it within a minute, so
    that the test fails rather than hangs)."""
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:  # a check failed with the shell still open
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    os.close(fd)
    return proc.returncode


def test_ping_between_hosts_then_exit_leaves_nothing(fabric_ready):
    proc, fd = _shell("--policy", "priority")
    try:
        banner = read_until(fd, PROMPT, 90)
        assert b"hosts: g1" in banner
        os.write(fd, b"g1 ping -c 1 g5\n")
        assert b"1 received" in read_until(fd, PROMPT, 30)
        os.write(fd, b"leaf1 tc qdisc show\n")
        assert b"htb 1:" in read_until(fd, PROMPT, 30)
        os.write(fd, b"exit\n")
        assert b"fabric torn down" in read_until(fd, None, 60)
    finally:
        code = _ended(proc, fd, 10)
    assert code == 0
    assert_no_leaks()


TGKILL = {"x86_64": 234, "aarch64": 131}  # the syscall's number


def _another_thread(pid: int, signum: int) -> int:
    """A thread of ``pid`` other than its main one that does not block ``signum``."""
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        if tid != pid and not int(status.split("SigBlk:")[1].split()[0], 16) >> (signum - 1) & 1:
            return tid
    raise AssertionError("the shell has no other thread that takes the signal")


@pytest.mark.parametrize("target", ["the process", "another thread"])
def test_a_terminated_shell_tears_its_fabric_down(fabric_ready, target):
    """SIGTERM at the prompt (Mininet's prompt takes SIGINT; SIGTERM ends the shell), sent
    to the process, or given by the kernel to a thread a library started (forced here)."""
    proc, fd = _shell()
    try:
        read_until(fd, PROMPT, 90)
        if target == "the process":
            proc.send_signal(signal.SIGTERM)
        else:
            syscall = ctypes.CDLL(None, use_errno=True).syscall
            tid = _another_thread(proc.pid, signal.SIGTERM)
            assert syscall(TGKILL[os.uname().machine], proc.pid, tid, signal.SIGTERM) == 0
        read_until(fd, None, 60)
    finally:
        code = _ended(proc, fd, 5)
    assert code == 128 + signal.SIGTERM
    assert_no_leaks()
