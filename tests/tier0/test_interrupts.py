"""Signals held while labkit changes the kernel (labkit.kernel.interrupts)."""

import os
import signal
import threading

import pytest

from labkit.kernel import interrupts


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
