"""The signals that end a run, held back while labkit changes the kernel.

SIGINT, SIGTERM and SIGHUP that arrive while a fabric is being built or torn down wait
until that is done, then reach whatever handler was in place (the CLI's, or Python's
``KeyboardInterrupt``): a build completes and is then torn down, a teardown always
finishes, and a second Ctrl-C cannot cut either short. Python runs signal handlers on
its main thread only, so on any other thread :func:`deferred` changes nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WAKE = signal.SIGURG  # ignored unless handled: ends the main thread's wait, nothing else
_holding = threading.Event()  # a deferred block is open: blocks inside it change nothing


@contextmanager
def deferred(what: str = "changing the kernel") -> Iterator[None]:
    """Hold :data:`ENDING` signals for the block; deliver each one caught, once, after."""
    if threading.current_thread() is not threading.main_thread() or _holding.is_set():
        yield
        return
    caught: list[int] = []

    def hold(signum, _frame) -> None:
        if not caught:
            with suppress(OSError, ValueError):  # a closed terminal (SIGHUP) takes no text
                print(f"labkit: {what}; it finishes first (a few seconds)", file=sys.stderr,
                      flush=True)
        caught.append(signum)

    previous = {s: signal.signal(s, hold) for s in ENDING}
    _holding.set()
    try:
        yield
    finally:
        _holding.clear()
        for s, handler in previous.items():  # None: not Python's; the default then
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


@contextmanager
def reaching_the_main_thread(signals: tuple[int, ...]) -> Iterator[None]:
    """While the main thread may wait in a system call with no timeout (``labkit shell``'s
    prompt), make ``signals`` reach it: the kernel may hand a process's signal to any of
    its threads (a library's worker, say), and then the main thread sleeps on and its
    Python handler never runs. Each one that arrives (Python's wakeup fd) is followed by
    :data:`WAKE`, sent to the main thread itself, whose handler only counts: it ends that
    system call so that the handlers run. Main thread only."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    wakes = [0]  # WAKE handlers the main thread ran (a counter: a handler takes no lock)

    def woke(*_) -> None:
        wakes[0] += 1

    was = signal.signal(WAKE, woke)
    main = threading.get_ident()  # the main thread's: set_wakeup_fd raised in any other
    ended = threading.Event()

    def relay() -> None:
        while got := os.read(r, 64):
            if set(got) & set(signals):
                # a signal caught just before the main thread began its wait (readline's
                # select, say) ends nothing, nor does a WAKE sent then: send one again every
                # 50 ms until the main thread has run its handlers
                before = wakes[0]
                while wakes[0] == before and not ended.is_set():
                    signal.pthread_kill(main, WAKE)
                    ended.wait(0.05)

    relayer = threading.Thread(target=relay, name="labkit-signal-relay", daemon=True)
    relayer.start()
    try:
        yield
    finally:
        ended.set()
        signal.set_wakeup_fd(previous)
        signal.signal(WAKE, was)
        os.close(w)  # the relay reads end of file and ends
        relayer.join(timeout=1)
        os.close(r)
