"""`make test`: tier 0 beside the kernel tests that check no time, then the kernel tests
that measure, alone.

Tier 0 needs no kernel and keeps both CPUs busy. The tier 1 and 2 tests marked
``untimed`` (cleanup, signals, privileges, set-up: `pytest -m untimed`) check no time,
rate, ratio or CPU figure and leave the CPUs mostly idle, so they run at the same time, in
a process of their own, with tier 0 at a lower priority (they take longer, so they get the
CPUs first); their report is held back and printed once both are done. The
rest of tiers 1 and 2 measure on the kernel and the CPUs, so they run after, one test at a
time on an otherwise quiet machine. (Run beside tier 0, those fail: labkit rightly flags
their runs as CPU-bound, and their timing checks tip: docs/testing.md.)

Ctrl-C reaches every pytest (they share the terminal's process group); this runner only
waits for them to tear down what they built. Exit status: the first part's that failed,
as pytest gives it; a part that stopped short (status 2 or more) starts nothing more.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time

PYTEST = [sys.executable, "-m", "pytest", "-q"]
# tier 0 at nice 10: the kernel tests beside it, the longer part, get the CPUs first
TIER0 = ["nice", "-n", "10", *PYTEST, "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder",
         "tests/tier0"]
KERNEL = ["tests/tier1", "tests/tier2"]
UNTIMED = [*PYTEST, "-p", "no:cacheprovider", "-m", "untimed", *KERNEL]
TIMED = [*PYTEST, "-m", "not untimed", *KERNEL]


def main() -> int:
    # a handler that does nothing, not SIG_IGN: exec resets it, so each pytest gets Ctrl-C,
    # and this runner, never interrupted, waits for them to tear down
    signal.signal(signal.SIGINT, lambda *_: None)
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as held:
        beside = subprocess.Popen(UNTIMED, stdout=held, stderr=subprocess.STDOUT)
        tier0 = subprocess.call(TIER0)
        untimed = beside.wait()
        held.seek(0)
        print("\n--- tiers 1 and 2, the tests that check no time (run beside tier 0):",
              flush=True)
        sys.stdout.write(held.read())
    side_by_side = time.monotonic() - start
    statuses = [tier0, untimed]
    if max(statuses) <= 1:
        print("\n--- tiers 1 and 2, the tests that measure (alone):", flush=True)
        statuses.append(subprocess.call(TIMED))
    total = time.monotonic() - start
    print(f"\npytest in all {total:.0f} s: tier 0 beside the untimed kernel tests "
          f"{side_by_side:.0f} s, then the timed ones {total - side_by_side:.0f} s", flush=True)
    return next((s for s in statuses if s), 0)


if __name__ == "__main__":
    sys.exit(main())
