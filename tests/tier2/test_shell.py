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
