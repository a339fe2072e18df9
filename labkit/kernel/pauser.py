"""Lossless lanes, the pause itself: per-lane link-level pause between neighbours during
a run, carried out from the plan of :mod:`labkit.model.lossless` with this kernel's parts:

* every leaf queue of every port is a TBF under its HTB class (:mod:`labkit.kernel.tc`), so
  one lane of one port can be stopped and restarted while HTB serves the others;
* at each router port's lossless queue, ``bpf/pause.bpf.c`` (on the qdisc tracepoints)
  reads the queue's own backlog as packets enter and leave: at ``xoff`` it sends an
  XOFF naming the ingress port the packet came in by, at ``xon`` one XON;
* :class:`Pauser` pauses the queue of the neighbour behind that ingress port for that
  lane, and resumes it on XON, through netlink (:func:`labkit.kernel.tc.tbf_request`). A paused
  neighbour's own queue fills in turn and pauses its neighbours: congestion spreads hop
  by hop, as it does with PFC.

The pauser acts from a process of its own at real-time priority: a switch pauses its
neighbour within a frame's time, and on a busy two-core machine an ordinary thread waits
milliseconds for a CPU and for Python's GIL (measured: a thread of the run reacted in
0.34 ms at the median but 5.2 ms at p99, and the fabric dropped where it should have
paused). The run starts it by exec (``python -m labkit.kernel.pauser``), never by fork: the run
has threads, and a forked child can inherit a lock one of them held. It is handed what
it acts with as file descriptors (the ring buffer, a netlink and a raw socket opened in
each neighbour's namespace) and a brief on its stdin; it reports on its stdout.

A pause from a one-queue (``fifo``) port, or to a one-queue neighbour, stops all of the
neighbour's queues.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, NamedTuple

from labkit.kernel import bpf, tc
from labkit.kernel.fabric import mac_for
from labkit.kernel.skeletons import PAUSE
from labkit.model.abi import LANES, PAUSE_EVENT, PAUSE_XOFF, PausePort, PauseQueue, PortKey
from labkit.model.lossless import Queue, upstream
from labkit.model.tables import PauseRow
from labkit.model.topo import Port

POLL_MS = 100  # the pauser wakes on each event; this only bounds how long stop() waits
STOP_WAIT_S = 10.0  # how long stop() waits for the pauser's report
READY_WAIT_S = 30.0  # how long start() waits for the pauser to be ready (a busy machine)
RT_PRIORITY = 10  # SCHED_FIFO: above every ordinary task, far below the kernel's own
PR_SET_PDEATHSIG = 1
KICK_ETHERTYPE = 0x88B5  # IEEE 802 local experimental: no stack on the fabric takes it


def queue_class(q: Queue) -> int:
    """The HTB class that holds a lossless queue."""
    return tc.FIFO_CLASS if q.lane == "all" else tc.LANE_CLASS[q.lane]


def classes_to_pause(lane: str, layout: str) -> tuple[int, ...]:
    """The leaf classes of a neighbour's port (of ``layout``) that a pause of ``lane``
    stops: all of them for "all" (a one-queue port asked) or a one-queue neighbour."""
    if lane == "all" or layout == "fifo":
        return tc.leaf_classes(layout)
    if layout == "held":
        return (tc.LANE_CLASS["vip"] if lane == "vip" else tc.HELD_CLASS,)
    return (tc.LANE_CLASS[lane],)


class _Open(NamedTuple):
    """A pause in force."""

    t_ns: int
    woke_ns: int
    applied_ns: int
    lane: str
    cause: str


def _nonblocking(sock: socket.socket) -> socket.socket:
    sock.setblocking(False)
    return sock


def _mac(ip: str) -> bytes:
    """The MAC labkit gives the port with address ``ip`` (labkit.kernel.fabric.mac_for)."""
    return bytes.fromhex(mac_for(ip).replace(":", ""))


class _Switch:
    """One neighbour's port: its netlink socket, pause/resume requests per class and a
    raw socket for the frame that restarts its qdisc after a resume."""

    def __init__(self, key: str, layout: str, rtnl: tc.Rtnl, kick: socket.socket,
                 requests: dict[tuple[int, bool], bytearray], frame: bytes):
        self.key, self.layout, self.rtnl, self.kick = key, layout, rtnl, kick
        self.requests, self.frame = requests, frame
        self.held: dict[int, set[int]] = {}  # class -> the queues (plan indices) pausing it
        self.paused: set[int] = set()  # classes paused, or whose resume failed

    @classmethod
    def at(cls, fabric, port: Port, shape: tc.PortShape) -> _Switch:
        """The switch of ``port``, its sockets opened in the port's namespace."""
        handle = fabric.handle(port)
        rtnl, kick = handle.ns.run(cls._open, handle.ifindex)
        requests = {(classid, paused): tc.tbf_request(handle.ifindex, classid, shape, paused)
                    for classid in tc.leaf_classes(shape.layout) for paused in (True, False)}
        frame = (_mac(port.peer_ip) + _mac(port.ip)
                 + KICK_ETHERTYPE.to_bytes(2, "big")).ljust(60, b"\0")
        return cls(handle.key, shape.layout, rtnl, kick, requests, frame)

    @staticmethod
    def _open(ifindex: int):
        kick = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        kick.bind((socket.if_indextoname(ifindex), 0))
        kick.setblocking(False)
        return tc.Rtnl(), kick

    def fds(self) -> tuple[int, int]:
        return self.rtnl.sock.fileno(), self.kick.fileno()

    def brief(self) -> dict:
        """What the pauser process needs to rebuild this switch (its sockets by fd)."""
        rtnl_fd, kick_fd = self.fds()
        return {"key": self.key, "layout": self.layout, "rtnl_fd": rtnl_fd,
                "kick_fd": kick_fd, "frame": self.frame.hex(),
                "requests": [[c, p, r.hex()] for (c, p), r in self.requests.items()]}

    @classmethod
    def from_brief(cls, b: dict) -> _Switch:
        return cls(b["key"], b["layout"], tc.Rtnl(socket.socket(fileno=b["rtnl_fd"])),
                   _nonblocking(socket.socket(fileno=b["kick_fd"])),
                   {(c, p): bytearray.fromhex(r) for c, p, r in b["requests"]},
                   bytes.fromhex(b["frame"]))

    def set(self, classid: int, paused: bool) -> None:
        """Pause or resume leaf ``classid``; OSError if the kernel refuses."""
        self.rtnl.call(self.requests[classid, paused])
        if paused:
            self.paused.add(classid)
            return
        self.paused.discard(classid)
        try:  # a TBF change does not wake its qdisc: a frame through it does
            self.kick.send(self.frame)
        except OSError as exc:  # a full queue refused the frame, but trying ran the qdisc
            if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                raise

    def close(self) -> None:
        self.rtnl.close()
        self.kick.close()


class _Asking(NamedTuple):
    """What the pauser knows of a lossless queue (one of the plan's)."""

    lane: str
    router: str
    port: str  # "<node>/<ifname>"


class _Acting:
    """The pauser's state and what it does on each event: which neighbour class each
    queue paused, the pauses in force, the rows of those that ended, what failed."""

    def __init__(self, queues: list[_Asking], ingress: dict[tuple[str, int], str],
                 switches: dict[str, _Switch]):
        self.queues, self.ingress, self.switches = queues, ingress, switches
        self.rows: list[PauseRow] = []
        self.open: dict[tuple[str, int], _Open] = {}
        self.holding: dict[int, set[tuple[_Switch, int]]] = {}  # queue -> what it paused
        self.errors: list[str] = []

    def on_event(self, raw: bytes) -> None:
        woke_ns = time.monotonic_ns()
        t_ns, slot, iif, _episode, _backlog, kind, _ = PAUSE_EVENT.unpack(raw)
        q = self.queues[slot]
        try:
            if kind == PAUSE_XOFF:
                self._pause(q, slot, iif, t_ns, woke_ns)
            else:
                self._resume(slot, t_ns)
        except OSError as exc:
            self.errors.append(f"{q.port}: {exc}")

    def _pause(self, q: _Asking, slot: int, iif: int, t_ns: int, woke_ns: int) -> None:
        key = self.ingress.get((q.router, iif))
        if key is None:
            return  # a packet labkit's fabric did not route (none expected)
        switch = self.switches[key]
        for classid in classes_to_pause(q.lane, switch.layout):
            holders = switch.held.setdefault(classid, set())
            if not holders:
                try:
                    switch.set(classid, paused=True)
                except OSError as exc:
                    self.errors.append(f"{switch.key} {tc.classid_str(classid)}: {exc}")
                    continue
                self.open[switch.key, classid] = _Open(t_ns, woke_ns, time.monotonic_ns(),
                                                       q.lane, q.port)
            holders.add(slot)
            self.holding.setdefault(slot, set()).add((switch, classid))

    def _resume(self, slot: int, t_ns: int) -> None:
        for switch, classid in self.holding.pop(slot, ()):
            holders = switch.held[classid]
            holders.discard(slot)
            if holders:
                continue
            try:
                self._release(switch, classid, t_ns)
            except OSError as exc:  # stays in switch.paused: resumed again at the end
                self.errors.append(f"{switch.key} {tc.classid_str(classid)}: {exc}")

    def _release(self, switch: _Switch, classid: int, t_ns: int) -> None:
        switch.set(classid, paused=False)
        now = time.monotonic_ns()
        o = self.open.pop((switch.key, classid), None)
        if o is not None:
            self.rows.append(PauseRow(o.t_ns, switch.key, tc.classid_str(classid), o.lane,
                                      o.cause, o.applied_ns - o.t_ns, o.woke_ns - o.t_ns,
                                      now - o.applied_ns, now - t_ns))

    def resume_everything(self) -> None:
        """Resume every class paused, or whose resume failed (the end of the run)."""
        self.holding.clear()
        for switch in self.switches.values():
            for holders in switch.held.values():
                holders.clear()
            for classid in sorted(switch.paused):
                try:
                    self._release(switch, classid, time.monotonic_ns())
                except OSError as exc:
                    self.errors.append(f"{switch.key} {tc.classid_str(classid)}: {exc}")


class Pauser:
    """The pause half of a lossless fabric, for one run: loads ``bpf/pause.bpf.c``, tells
    it the queues, and acts on its events (in the pauser process) from :meth:`start` to
    :meth:`stop`."""

    def __init__(self, fabric, plan: list[Queue]):
        self.fabric, self.plan = fabric, plan
        self.obj = bpf.record_programs(PAUSE.open(), fabric.registry.add)
        self.links: list[bpf.TracingLink] = []
        self.switches: dict[str, _Switch] = {}
        self.ingress: dict[tuple[str, int], str] = {}  # (router, ifindex) -> upstream switch
        self.rows: list[PauseRow] = []
        self.errors: list[str] = []
        self.child: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None  # the pauser's stderr, a file
        try:
            self._load(fabric.registry.add)
        except BaseException:
            self.close()
            raise

    def _load(self, record: bpf.Recorder) -> None:
        topo, fabric = self.fabric.topo, self.fabric
        ports: dict[tuple[int, int], PausePort] = {}
        for slot, q in enumerate(self.plan):
            h = fabric.handle(q.port)
            self.obj.maps.lk_pause_queues.update(
                slot, PauseQueue(classid=queue_class(q), xoff_bytes=q.xoff_bytes,
                                 xon_bytes=q.xon_bytes))
            port = ports.setdefault((h.ns.inode, h.ifindex), PausePort())
            for i, lane in enumerate(LANES):
                if q.lane in (lane, "all"):
                    port.queue[i] = slot + 1
        for where, port in ports.items():
            self.obj.maps.lk_pause_ports.update(PortKey(*where), port)
        routers = {q.port.node for q in self.plan}
        for router in routers:
            for ingress in topo.ports[router]:
                up = upstream(topo, ingress)
                key = f"{up.node}/{up.ifname}"
                self.ingress[router, fabric.handle(ingress).ifindex] = key
                if key not in self.switches:
                    self.switches[key] = _Switch.at(fabric, up, fabric.shape_of(up))
        for program in (self.obj.programs.lk_pause_enqueue, self.obj.programs.lk_pause_dequeue):
            self.links.append(program.attach())
            record("tracing_link", prog=program.name, prog_id=program.id)

    def _brief(self) -> dict:
        ring = self.obj.maps.lk_pause_events
        return {"parent": os.getpid(), "ring_fd": ring.fd,
                "queues": [_Asking(q.lane, q.port.node, f"{q.port.node}/{q.port.ifname}")
                           for q in self.plan],
                "ingress": [[router, ifindex, key]
                            for (router, ifindex), key in self.ingress.items()],
                "switches": [s.brief() for s in self.switches.values()]}

    def start(self) -> Pauser:
        """Start the pauser process and wait until it acts; it acts until :meth:`stop`.
        It runs in a process group of its own (a Ctrl-C at the terminal is the run's to
        handle, not the pauser's), from labkit's own directory (``-m`` puts the working
        directory first on its import path, and the pauser runs as root)."""
        brief = self._brief()
        fds = [brief["ring_fd"], *(fd for s in self.switches.values() for fd in s.fds())]
        self._stderr = tempfile.TemporaryFile()  # read once it ends: a pipe could fill
        child = self.child = subprocess.Popen(
            [sys.executable, "-m", "labkit.kernel.pauser"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, pass_fds=fds, process_group=0,
            cwd=Path(__file__).resolve().parents[2])
        self.fabric.registry.add_process(child.pid, "pauser", signal.SIGKILL)
        stdin, stdout = child.stdin, child.stdout
        assert stdin is not None and stdout is not None  # pipes, as asked
        try:
            stdin.write(json.dumps(brief).encode() + b"\n")
            stdin.flush()
            ready = select.select([stdout], [], [], READY_WAIT_S)[0]
            started = ready and os.read(stdout.fileno(), len(READY)) == READY
        except OSError:  # it died before it read its brief
            started = False
        if not started:
            self._end(child)
            raise RuntimeError(f"the pauser did not start within {READY_WAIT_S:g} s: "
                               f"{self._said() or 'it said nothing'}")
        return self

    def _end(self, child: subprocess.Popen) -> bytes:
        """Close the pauser's (``child``'s) stdin, its cue to report and exit, and read its
        report, killing it if it has not exited within :data:`STOP_WAIT_S`."""
        self.child = None
        try:  # communicate() closes its stdin first
            out, _ = child.communicate(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            out, _ = child.communicate()
        return out

    def _said(self) -> str:
        """The end of what the pauser wrote to stderr."""
        if self._stderr is None:  # not started
            return ""
        self._stderr.seek(0)
        return _tail(self._stderr.read())

    def notes(self) -> list[str]:
        """What went wrong, for the run's fidelity notes: events lost, requests refused."""
        out = [f"the pauser could not pause or resume {len(self.errors)} time(s), first: "
               f"{self.errors[0]}"] if self.errors else []
        if lost := self.lost():
            out.append(f"{lost} pause event(s) were lost (a full ring): the fabric may "
                       "have dropped where it should have paused")
        return out

    def lost(self) -> int:
        """Events the kernel could not deliver (a full ring)."""
        return sum(int.from_bytes(v, "little") for v in self.obj.maps.lk_pause_lost.per_cpu(0))

    def stop(self) -> list[PauseRow]:
        """End the pauser process (it resumes every queue it paused first) and return
        its pauses; what it could not do is in :meth:`notes`. A pauser that does not
        report within :data:`STOP_WAIT_S` is killed, and every queue resumed from here."""
        if self.child is None:
            return self.rows
        child = self.child
        out = self._end(child)
        try:
            report = json.loads(out)
        except ValueError:
            said = self._said()
            self.errors.append(f"the pauser process failed (exit status {child.returncode}"
                               f"{': ' + said if said else ''}): every queue was "
                               "resumed after it")
            for switch in self.switches.values():
                switch.paused.update(tc.leaf_classes(switch.layout))
            acting = _Acting([], {}, self.switches)
            acting.resume_everything()
            self.errors += acting.errors
            return self.rows
        self.rows = [PauseRow(*row) for row in report["rows"]]
        self.errors += report["errors"]
        return self.rows

    def close(self) -> None:
        if self.child is not None:
            self.stop()
        for link in self.links:
            link.close()
        self.links.clear()
        for switch in self.switches.values():
            switch.close()
        self.switches.clear()
        if self._stderr is not None:
            self._stderr.close()
        self.obj.close()


READY = b"ready\n"


def _tail(err: bytes, lines: int = 3) -> str:
    return " | ".join(err.decode(errors="replace").strip().splitlines()[-lines:])


def main() -> None:
    """The pauser process: the brief from stdin, real-time priority, events until stdin
    closes, then every queue it paused resumed whatever happened, and its rows and errors
    to stdout. It ignores the run's interrupts (the run stops it) and dies with the run."""
    brief = json.loads(sys.stdin.buffer.readline())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != brief["parent"]:  # the run died before prctl took effect
        return
    acting = _Acting([_Asking(*q) for q in brief["queues"]],
                     {(r, i): key for r, i, key in brief["ingress"]},
                     {b["key"]: _Switch.from_brief(b) for b in brief["switches"]})
    ring = bpf.RingBuffer(brief["ring_fd"], acting.on_event)
    gc.disable()  # nothing here makes cycles: no collection pauses the pauser
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except OSError as exc:
        acting.errors.append(f"no real-time priority ({exc.strerror}): pauses may be late")
    stdin = sys.stdin.buffer.fileno()
    os.write(sys.stdout.fileno(), READY)
    try:
        while not select.select([stdin], [], [], 0)[0]:
            ring.poll(POLL_MS)
        ring.consume()
    except Exception as exc:  # noqa: BLE001 - reported; the queues are resumed below
        acting.errors.append(f"the pauser stopped early: {type(exc).__name__}: {exc}")
    finally:
        acting.resume_everything()
        sys.stdout.write(json.dumps({"rows": acting.rows, "errors": acting.errors}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
