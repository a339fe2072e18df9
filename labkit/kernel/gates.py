"""The held hosts' gates from user space: each one's queue ceiling, and waking its
senders when it opens.

A held host's gate (``bpf/valve.bpf.c`` on its NIC) refuses data over the rate in
force before any queue, so the sender's stack is told at once: TCP keeps the
segment, counts nothing as lost, and retries on its next acknowledgement — or, when
nothing of it is in flight any more, on a timer of 200-500 ms. Two things keep that
retry prompt. One thread, :class:`Gates`, decides both every 2 ms from what each gate
lets through now (:meth:`labkit.kernel.valve.Valve.gate`: the controller's decision, or
the busy rate around the job's window), and a :class:`HostWorker` per host carries them
out inside the host's namespace:

* the ceiling of the host's held HTB class (:func:`labkit.kernel.tc.set_held_ceil`) follows
  the gate's rate, so what the gate admits leaves at that rate from a queue: the
  sender always has data in flight and its acknowledgements clock the retries. Below
  one full-size packet (the NIC's MTU) per ``horizon_ms`` the gate admits no data at
  all: it holds. A hold inside the job's window keeps the ceiling at the gate's rate
  outside it: what was queued before leaves at the rate it was admitted at (the
  kernel closes the gate early enough before a known window for that), and when the
  window ends, the bucket the gate then admits at once (``horizon_ms`` of its rate)
  leaves at that rate too, not as one burst at the NIC's speed: the ceiling moves up
  to 2 ms after the kernel's rate does, and a burst at a storage server's 1 Gbit/s
  left 50 ms queues at the bottleneck as each window of ``pytorch-ddp.yaml`` ended.
  A controller's own hold (its rate after it is unknown) keeps the ceiling in force:
  what was queued leaves at the rate it was admitted at. (Sending it to the link
  instead let a ``reactive`` controller's last cut release what its earlier, higher
  rates had queued — up to 1 MB from a storage server on ``pytorch-ddp.yaml`` — into
  the middle of the job's all-reduce, the very queue it cut for.) A hold is never a
  ceiling: HTB charges a packet at the ceiling in force when it leaves, as time, so one 64 KiB
  packet let out at a hold's 0.1 Mbit/s would leave the class five seconds in debt,
  which no later ceiling forgives;
* whenever the gate opens wider, the socket iterator ``bpf/wake.bpf.c`` is read in
  the host's namespace: every established TCP socket there pushes what it has
  queued, now, instead of sleeping through the start of the compute phase. Any
  program's sockets, not only labkit's; nothing about them changes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from functools import partial

from pyroute2 import IPRoute

from labkit.kernel import bpf, sched, tc
from labkit.kernel.fabric import Fabric
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import WAKE
from labkit.kernel.valve import GATE_LANE, Valves

Job = Callable[[IPRoute], object]  # what a HostWorker does, on its netlink socket

POLL_MS = 2.0
GSO_MAX_BYTES = 65536  # the largest packet a host's TCP hands its NIC (one GSO run)


def ceiling(gate_mbps: float, horizon_ms: float, mtu: int,
            outside_mbps: float | None = None, current: float | None = None) -> float | None:
    """The held class's ceiling (Mbit/s; None: the link) for a gate at ``gate_mbps``: the
    gate's rate; the link when it is open; when it holds (its bucket takes no full-size
    packet), the rate outside the job's window (``outside_mbps``) if that one admits,
    else the ceiling in force (``current``). Never below the rate at which the largest
    packet takes a bucket's time: HTB charges a packet at the ceiling in force when it
    leaves, and a 64 KiB packet admitted at 49 Mbit/s that left at 1.5 Mbit/s put the
    class 340 ms in debt — storage then sat out the whole compute phase after the gate
    reopened."""
    def holds(mbps: float) -> bool:
        return mbps * horizon_ms * 1e3 / 8 < mtu
    lowest = GSO_MAX_BYTES * 8 / (horizon_ms * 1e3)

    if gate_mbps == float("inf"):
        return None
    if not holds(gate_mbps):
        return max(gate_mbps, lowest)
    if outside_mbps is not None and not holds(outside_mbps):
        return max(outside_mbps, lowest)
    return current


class HostWorker:
    """One thread inside a host's namespace that does that host's ceiling moves and wakes
    in order, on a netlink socket it keeps open: a wake never waits for another host's
    netlink, and no message pays for opening a socket."""

    def __init__(self, ns: Netns, name: str, errors: list[BaseException]):
        self.name = name
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.errors = errors
        self.thread = ns.thread(self._run, f"gates-{name}")
        self.thread.start()

    def _run(self) -> None:
        sched.control_thread()
        stopped = False
        try:
            with IPRoute() as ipr:
                while (job := self.jobs.get()) is not None:
                    job(ipr)
                stopped = True
        except BaseException as exc:  # surfaced by Gates.stop(), with the host's name
            self.errors.append(RuntimeError(f"host {self.name}: {exc}"))
            while not stopped and self.jobs.get() is not None:  # drain until told to stop
                pass

    def submit(self, job: Job | None) -> None:
        """Do ``job`` in turn (None: stop after the jobs before it)."""
        self.jobs.put(job)


class Gates:
    """Keep the held hosts' class ceilings at their gates' rates, and wake their TCP
    senders each time a gate opens wider."""

    def __init__(self, valves: Valves, fabric: Fabric, hosts: list[str],
                 record: bpf.Recorder | None = None):
        self.valves, self.fabric, self.hosts = valves, fabric, hosts
        self.nics = {h: (fabric.nic(h).ifindex, fabric.host_shape(h)) for h in hosts}
        self.obj = WAKE.open()
        bpf.record_programs(self.obj, record)
        self.iterator: bpf.Iterator | None = None
        self.workers: dict[str, HostWorker] = {}
        self.allowed = {h: float("inf") for h in hosts}
        self.ceilings: dict[str, float | None] = {h: None for h in hosts}
        self.wakes = self.ceiling_changes = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gates", daemon=True)

    def step(self) -> None:
        """Hand each host's worker the ceiling when it changed, then a wake when its gate
        opened wider (so what the woken senders push leaves at the new ceiling); the
        workers do them at once, each in its host's namespace."""
        iterator = self.iterator
        if iterator is None:
            raise RuntimeError("the gates step only once started")
        for host in self.hosts:
            valve = self.valves.valves[host]
            allowed = valve.gate(time.monotonic_ns())
            worker = self.workers[host]
            setting = valve.lanes[GATE_LANE]
            ceil = ceiling(allowed, setting.horizon_ms, self.nics[host][1].mtu, setting.mbps,
                           self.ceilings[host])
            if ceil != self.ceilings[host]:
                index, shape = self.nics[host]
                worker.submit(partial(tc.set_held_ceil, index=index, port=shape, ceil_mbps=ceil))
                self.ceilings[host] = ceil
                self.ceiling_changes += 1
            if allowed > self.allowed[host]:
                worker.submit(lambda _ipr: iterator.run())
                self.wakes += 1
            self.allowed[host] = allowed

    def _loop(self) -> None:
        sched.control_thread()
        try:
            while not self._stop.wait(POLL_MS / 1e3):
                self.step()
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)

    def start(self) -> Gates:
        self.iterator = self.obj.programs.lk_wake.attach_iter()
        for host in self.hosts:
            self.workers[host] = HostWorker(self.fabric.ns[host], host, self.errors)
        self.step()
        self._thread.start()
        return self

    def close(self) -> None:
        """End the thread and release the iterator and its program (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for worker in self.workers.values():
            worker.submit(None)
        deadline = time.monotonic() + 5
        for worker in self.workers.values():
            worker.thread.join(timeout=max(deadline - time.monotonic(), 0))
        if self._thread.is_alive() or any(w.thread.is_alive() for w in self.workers.values()):
            return  # stuck in a netlink call: its objects go with the process
        self.workers.clear()
        if self.iterator:
            self.iterator.close()
            self.iterator = None
        self.obj.close()

    def stop(self) -> None:
        """:meth:`close`, then raise what failed while it ran."""
        self.close()
        if self.errors:
            raise RuntimeError(f"gates failed: {self.errors[0]}") from self.errors[0]
