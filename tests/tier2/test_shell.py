"""`labkit shell` in a real terminal: Mininet's command line on a scenario's fabric."""

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

from tests.leaks import assert_no_leaks

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


def test_ping_between_hosts_then_exit_leaves_nothing(fabric_ready):
    pid, fd = pty.fork()
    if pid == 0:  # the child: labkit shell, as a user types it
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "labkit.cli", "shell",
                                  "topologies/bottleneck.yaml", "--policy", "priority"])
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
        deadline = time.monotonic() + 10
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        _, status = done
        if not done[0]:  # a check failed with the shell still open: stop it, it tears down
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert_no_leaks()


def test_a_terminated_shell_tears_its_fabric_down(fabric_ready):
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "labkit.cli", "shell",
                                  "topologies/bottleneck.yaml"])
    try:
        read_until(fd, PROMPT, 90)
        os.kill(pid, signal.SIGTERM)  # Mininet's prompt takes SIGINT; SIGTERM ends the shell
        read_until(fd, None, 60)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM
    assert_no_leaks()


TGKILL = {"x86_64": 234, "aarch64": 131}  # the syscall's number


def _blocks(pid: int, tid: int, signum: int) -> bool:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    mask = int(status.split("SigBlk:")[1].split()[0], 16)
    return bool(mask & (1 << (signum - 1)))


def test_a_signal_that_lands_on_another_thread_still_ends_the_shell(fabric_ready):
    """The kernel may give a process's SIGTERM to any thread (here, forced, to one that a
    library started); the shell at its prompt must still tear down and leave."""
    import ctypes

    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "labkit.cli", "shell",
                                  "topologies/bottleneck.yaml"])
    try:
        read_until(fd, PROMPT, 90)
        others = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid
                  and not _blocks(pid, int(t), signal.SIGTERM)]
        assert others, "the shell has no other thread that takes SIGTERM"
        syscall = ctypes.CDLL(None, use_errno=True).syscall
        assert syscall(TGKILL[os.uname().machine], pid, others[0], signal.SIGTERM) == 0
        read_until(fd, None, 30)
    finally:
        deadline = time.monotonic() + 5
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        if not done[0]:  # still at its prompt: end it as a user would, then fail
            os.kill(pid, signal.SIGTERM)
            done = os.waitpid(pid, 0)
        status = done[1]
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM
    assert_no_leaks()
