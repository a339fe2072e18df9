"""Who runs first on a busy machine: labkit's processes and threads by their nice value.

The emulated fabric shares a few CPUs with the traffic it carries, where real hardware
would not: a switch's telemetry and its controllers do not wait for the GPUs, and a GPU
does not wait for a storage server's CPU. So the ranks — labkit's own and a user's
program's alike — run ahead of storage and other commands (``RANK_NICE``), and labkit's
control plane (the queue poller, the controllers, the gates, the event reader) ahead of
the ranks (``CONTROL_NICE``): eight ranks at -10 outweigh a thread at nice 0 by ten to
one whenever they are busy. (Measured on checkpoint-burst.yaml, three runs each on a
2-core VM: the poller's 8 ms period stretched to 17-22 ms at the 90th percentile at nice
0, and to 14-19 ms at -15; what is left is the machine's own noise.) Linux keeps a nice
value per thread, so it ends with the thread: nothing outlives the run.
"""

from __future__ import annotations

import os
import threading

RANK_NICE = -10  # ranks stand in for GPUs and their NICs: storage agents must not delay them
CONTROL_NICE = -15  # the fabric's telemetry and controllers must not wait for the ranks


def run_ahead(nice: int, tid: int | None = None) -> bool:
    """Give the calling thread, or the thread or single-threaded process ``tid``, the
    nice value ``nice`` (threads it starts and processes it forks inherit it); False
    without the privilege (CAP_SYS_NICE): it runs as it was."""
    try:
        os.setpriority(os.PRIO_PROCESS, tid or threading.get_native_id(), nice)
    except PermissionError:
        return False
    return True


def control_thread() -> bool:
    """Run the calling thread as labkit's control plane (ahead of the ranks)."""
    return run_ahead(CONTROL_NICE)
