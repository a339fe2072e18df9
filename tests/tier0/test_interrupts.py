"""Signals held while labkit changes the kernel (labkit.kernel.interrupts)."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from labkit.kernel import interrupts

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def python_handlers():
    """Python's own handlers (an earlier test may have run the CLI, which installs its)."""
    saved = {s: signal.getsignal(s) for s in interrupts.ENDING}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_signal_in_the_block_arrives_after_it(capfd):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred("tearing down"):
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # twice: delivered once
            done.append("the rest of the block ran")
    assert done
    assert "tearing down; it finishes first" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nested_blocks_hold_until_the_outer_ends():
    seen = []
    previous = signal.signal(signal.SIGHUP, lambda s, f: seen.append(s))
    try:
        with interrupts.deferred():
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGHUP)
            assert not seen
        assert seen == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_off_the_main_thread_it_changes_nothing():
    handlers = []

    def worker():
        with interrupts.deferred():
            handlers.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert handlers == [before]


# a process whose main thread sleeps in a system call when SIGTERM reaches another of its
# threads; the first WAKE is lost, as one is when it lands just before that sleep begins
# (readline's select under load: `labkit shell` once ignored a SIGTERM so, in 83 of 300
# tries on a busy machine)
LOST_FIRST_WAKE = """
import ctypes, signal, threading, time
from labkit.kernel import interrupts

real_kill, lost = signal.pthread_kill, []

def first_wake_lost(tid, signum):
    if signum == interrupts.WAKE and not lost:
        lost.append(signum)
        return
    real_kill(tid, signum)

def leave(signum, _frame):
    raise SystemExit(128 + signum)

signal.pthread_kill = first_wake_lost
signal.signal(signal.SIGTERM, leave)

def terminate_this_thread():
    time.sleep(0.3)  # the main thread is asleep in pause() by then
    real_kill(threading.get_ident(), signal.SIGTERM)

with interrupts.reaching_the_main_thread((signal.SIGTERM,)):
    threading.Thread(target=terminate_this_thread, daemon=True).start()
    ctypes.CDLL(None).pause()
"""


def test_a_signal_reaches_the_main_thread_even_if_a_wake_is_lost():
    proc = subprocess.run([sys.executable, "-c", LOST_FIRST_WAKE], cwd=REPO,
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
