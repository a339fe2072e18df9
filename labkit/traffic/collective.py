"""Collective engine: one process driving the ranks of a group of GPU hosts (those behind
one leaf, or a single rank: scenario ``emulation.engines``). It starts in its first
rank's host and opens each other rank's sockets in that rank's own namespace (a
short-lived thread that joined it, :class:`labkit.kernel.netns.Netns`), so every rank
still sends from its own NIC; one poll loop then turns only the ranks that have a packet,
room to send or a due timer. One process per rank paid a wake-up, a cold cache and an
interpreter loop per rank and step; an engine pays them once per group.

Each rank runs ``iterations`` ops of one collective (:mod:`labkit.model.traffic.schedules` gives
each rank its steps) over RoCE RC queue pairs, one per peer it talks to
(:mod:`labkit.traffic.rc`). Closed loop: a step's messages leave only once the
messages of the steps before it have arrived. Each message carries its chunk's
value; at the end of every op the rank compares its values with the expected
ones and reports how many chunks were wrong (nccl-tests' ``#wrong``).

Protocol with the controller: the engine reads a JSON config (path in argv; its ranks,
:class:`labkit.model.traffic.configs.Engine`), binds its ranks' sockets, prints
``READY``, waits for ``GO <t0_ns>`` on stdin (a CLOCK_MONOTONIC instant shared by all
namespaces), prints ``OP <k> <compute ns>`` as its first rank completes each op and
``FINISHED`` once all its ranks are done (meanwhile ``SHIFT <op> <ns>`` on stdin puts off
the start of op ``op`` at every rank by ns, and ``SLOW <rank> <factor>`` makes every
compute phase of that rank that starts from then on take factor times as long: a
straggler), keeps acknowledging until ``END`` on stdin
(every rank of every engine has finished), writes its ranks' results JSON, prints
``DONE`` and exits. SIGTERM ends it early; the results written then cover the ops
completed. Its CPU time is shared equally among its ranks' counters.

Training jobs (:mod:`labkit.model.traffic.jobs`) run the same way, one plan per
iteration, with their compute phases as timed waits; each iteration reports its
compute time, the time spent waiting while data was on the wire (exposed
communication) and waiting for a peer that had not sent yet (bubbles); every op also
reports those phases as spans, when each began and ended (``phases`` in the results:
``[op, phase, start_ns, end_ns]``), a few per step of its plan.

Standard library only (plus ``wire``, ``hotpath``, ``rc``, ``schedules``, ``jobs``,
``netns``): engines start fast.
"""

from __future__ import annotations

import json
import resource
import select
import signal
import socket
import sys
import time

from labkit.kernel import sched
from labkit.kernel.netns import Netns
from labkit.model import abi
from labkit.model.traffic import configs, jobs, schedules, wire
from labkit.model.traffic.results import (
    CollectiveResult,
    EngineResult,
    OpResult,
    RankCounters,
    Span,
)
from labkit.traffic import hotpath, rc
from labkit.traffic.opsteps import PipeLines

SO_RCVBUFFORCE = 33
SOL_UDP, UDP_GRO = 17, 104  # <linux/udp.h>
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2  # <linux/in.h>; not exported by Python 3.11
RCVBUF_BYTES = 16 << 20
SNDBUF_BYTES = 128 << 10
SEND_BURST = 32  # packets per sendmmsg, between looks at the receive side
QPN_BASE = 0x100  # the queue pair of rank r is QPN_BASE + r
IDLE_NS = 50_000_000  # the longest an engine sleeps without a reason to wake
COMPUTE, WIRE_WAIT, BUBBLE = "compute", "wire_wait", "bubble"  # phases of a span


class Op:
    """One op (or training iteration) at this rank: values, awaited receives, compute,
    and where the time went, as spans ``(phase, start_ns, end_ns)`` in the order they
    happened: ``compute``, ``bubble`` (waiting for a peer that had not sent yet) and
    ``wire_wait`` (waiting while the data was on its way); the rest of the op is the
    rank's own sending and other work. A step adds at most one compute span, and at most
    one wait (a bubble, then a wire wait) ends before the next step starts or the op
    ends: at most three spans per step of the plan, as bounded as the plan itself."""

    def __init__(self, plan: schedules.Plan, now: int, slow: float = 1.0, resent: int = 0):
        self.plan = plan
        self.resent_before = resent  # the rank's packets sent again before the op began
        self.slow = slow  # each compute phase takes this many times its planned time
        self.values = dict(plan.initial)
        self.pending = [list(step.recv) for step in plan.steps]
        self.received = 0  # leading steps whose receives have all arrived
        self._count_received()
        self.started = 0  # steps whose sends are queued
        self.busy_until: int | None = None  # computing until then
        self.start_ns = now
        self.waiting_since: int | None = None  # blocked on the network since
        self.spans: list[tuple[str, int, int]] = []
        self.last_sent_ns = 0  # when the last message matched left its sender

    def arrived(self, peer: int, chunk: int, value: int, sent_ns: int = 0) -> bool:
        """Match a whole message to the earliest receive awaiting it."""
        for k in range(self.received, len(self.pending)):
            awaited = self.pending[k]
            for m in awaited:
                if m.peer == peer and m.chunk == chunk:
                    awaited.remove(m)
                    self.values[chunk] = (self.values.get(chunk, 0) + value if m.reduce
                                          else value)
                    self.last_sent_ns = sent_ns
                    self._count_received()
                    return True
        return False

    def _count_received(self) -> None:
        pending, k = self.pending, self.received
        while k < len(pending) and not pending[k]:
            k += 1
        self.received = k

    def waited(self, since: int, now: int) -> None:
        """Account a wait that ``now`` ended: until the message that ended it left its
        sender, the peer was not ready (a bubble); after, the data was on the way."""
        sent = min(max(self.last_sent_ns, since), now)
        if sent > since:
            self.spans.append((BUBBLE, since, sent))
        if now > sent:
            self.spans.append((WIRE_WAIT, sent, now))

    def step(self, now: int) -> list[tuple[schedules.Msg, int]]:
        """One look from the agent's loop: the wait for the network that ``now`` ends is
        accounted, the sends that may leave are returned (:meth:`advance`), and a wait
        that begins now is noted, then and there: the loop may sleep until the message
        that ends it arrives."""
        if self.waiting_since is not None and not self.blocked(now):
            self.waited(self.waiting_since, now)
            self.waiting_since = None
        out = self.advance(now)
        if self.waiting_since is None and self.blocked(now):
            self.waiting_since = now
        return out

    def advance(self, now: int) -> list[tuple[schedules.Msg, int]]:
        """Sends of every step whose predecessors' receives have arrived and whose
        compute is done (a step's compute starts once it may start)."""
        out = []
        steps = self.plan.steps
        while self.started < len(steps) and self.received >= self.started:
            step = steps[self.started]
            if step.compute_ns:
                if self.busy_until is None:
                    self.busy_until = now + int(step.compute_ns * self.slow)
                    self.spans.append((COMPUTE, now, self.busy_until))
                if now < self.busy_until:
                    break
                self.busy_until = None
            out += [(m, self.values.get(m.chunk, 0)) for m in step.send]
            self.started += 1
        return out

    def can_advance(self) -> bool:
        """Whether a step may start now, without waiting for the network."""
        return self.started < len(self.plan.steps) and self.received >= self.started

    def computing(self, now: int) -> bool:
        return self.busy_until is not None and now < self.busy_until

    def blocked(self, now: int) -> bool:
        """Whether the op can go on only once a message arrives."""
        return not self.computing(now) and not self.can_advance()

    def received_all(self) -> bool:
        return self.started == self.received == len(self.plan.steps)

    def wrong(self) -> int:
        return sum(self.values.get(c) != v for c, v in self.plan.expected.items())

    def total_ns(self, phase: str) -> int:
        return sum(end - start for p, start, end in self.spans if p == phase)

    def finish(self, index: int, rank: int, now: int, resent: int) -> OpResult:
        """End the op at ``now`` (a wait still open ends with it; ``resent``: the rank's
        packets sent again so far): its row of the ``collectives`` table."""
        if self.waiting_since is not None:
            self.waited(self.waiting_since, now)
            self.waiting_since = None
        return OpResult(op=index, rank=rank, start_ns=self.start_ns, end_ns=now,
                        wrong=self.wrong(), compute_ns=self.total_ns(COMPUTE),
                        exposed_ns=self.total_ns(WIRE_WAIT), bubble_ns=self.total_ns(BUBBLE),
                        resent=resent - self.resent_before)


def plan_for(workload: dict, n: int, rank: int) -> schedules.Plan:
    """Rank ``rank``'s plan (of ``n``) for one op of a collective, or one iteration of a
    training job."""
    if workload["kind"] == "collective":
        return schedules.collective_plan(workload["op"], workload["algo"], n, rank,
                                         workload["size_bytes"], workload.get("group", 1))
    return jobs.plan(workload["job"], n, rank)


class PhaseBoard:
    """This rank's phase, written into its host's valve (``lk_phase``, struct lk_job_phase)
    so the valve holds storage while the rank communicates. Each write names the window
    in which the rank expects to communicate: announced when its compute starts, from
    the next op's start for twice the last op's length (a slow op must not outlast
    it), and closed as the op ends by announcing the next."""

    SOON, COMMUNICATE = 1, 2
    FIRST_GUESS_NS = 10**9

    def __init__(self, fd: int | None):
        self.map = None
        if fd is not None:
            from labkit.kernel.bpf import InheritedMap  # only when asked: agents start fast
            self.map = InheritedMap(fd)
        self.last_op_ns = self.FIRST_GUESS_NS

    def _write(self, start: int, end: int, bytes_left: int, phase: int) -> None:
        if self.map:
            self.map.update(0, abi.JOB_PHASE.pack(start, end, bytes_left, phase, 0, 0, 0))

    def next_op_at(self, t_ns: int, nbytes: int) -> None:
        self._write(t_ns, t_ns + 2 * self.last_op_ns, nbytes, self.SOON)

    def op_started(self, t_ns: int, nbytes: int) -> None:
        self._write(t_ns, t_ns + 2 * self.last_op_ns, nbytes, self.COMMUNICATE)

    def op_ended(self, duration_ns: int) -> None:
        self.last_op_ns = duration_ns

    def close(self) -> None:
        self._write(0, 0, 0, 0)
        if self.map:
            self.map.close()


def _udp_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # DF set and unconnected: the kernel writes IP ID 0, as RoCE NICs do (see wire.py's ICRC)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.setblocking(False)
    return s


class Rank:
    """One rank's sockets, queue pairs and ops, driven one pass at a time by an
    engine's loop (:func:`run`): :meth:`turn` does what can be done now and says when
    the rank needs another look. Its sockets are opened in the calling thread's
    namespace (the rank's host)."""

    def __init__(self, cfg: configs.Collective):
        self.cfg = cfg
        self.plan = plan_for(cfg.workload, cfg.n, cfg.rank)
        partners = sorted({m.peer for s in self.plan.steps for m in s.send + s.recv})
        self.compute_ns = int(cfg.compute_ms * 1e6)
        self.op_state: list[Op] = []
        self.early: list[tuple[int, int, int, int]] = []  # the next op's, arrived already
        self.delivered = 0  # whole messages so far: a new one may let the next step start
        dcqcn = cfg.dcqcn_line_mbps  # set when the scenario turns DCQCN on
        self.rx = rx = _udp_socket()
        rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
        if dcqcn:  # see each packet's ECN field: CE asks for a CNP
            rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        # the job's DSCP on everything the rank sends: its ACKs (from rx) as its data
        tos = cfg.dscp << 2 | (wire.ECT0 if dcqcn else 0)
        if cfg.dscp:
            rx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, cfg.dscp << 2)
        rx.setsockopt(SOL_UDP, UDP_GRO, 1)  # a peer's GSO run arrives as it was sent
        rx.bind(("0.0.0.0", wire.ROCEV2_PORT))
        self.receiver = hotpath.Rx(rx, cfg.ip)
        self.senders: dict[int, rc.Sender] = {}
        self.tx: dict[int, socket.socket] = {}
        self.by_index: dict[int, int] = {}  # the receiver's peer index -> rank
        for p in partners:
            s = self.tx[p] = _udp_socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
            if tos:  # ECN-capable under DCQCN: the fabric may mark it CE, not queue it long
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            s.bind(("0.0.0.0", cfg.sport_base + p))
            qpn = QPN_BASE + p
            out = hotpath.Tx(s, cfg.ip, cfg.sport_base + p, (cfg.peers[p], wire.ROCEV2_PORT),
                             {k: rc.with_dqpn(v, qpn) for k, v in cfg.templates.items()},
                             cfg.payload_bytes, abi.seq_base(cfg.rank), batch=SEND_BURST,
                             gso=cfg.gso_segments)
            self.senders[p] = rc.Sender(out, cfg.payload_bytes,
                                        rc.Dcqcn(dcqcn * 1e6 / 8) if dcqcn else None,
                                        rc.LOSSLESS_MIN_RTO_NS if cfg.lossless
                                        else rc.MIN_RTO_NS)
            index = self.receiver.add_peer(cfg.peers[p], wire.ROCEV2_PORT,
                                           rc.with_dqpn(cfg.ack_template, qpn),
                                           rc.with_dqpn(cfg.nak_template, qpn),
                                           rc.with_dqpn(cfg.cnp_template, qpn) if dcqcn
                                           else None)
            self.by_index[index] = p
        self.blocked: set[int] = set()  # peers whose socket is full: wait for room
        self.watched: set[int] = set()  # peers whose socket the engine polls for room
        self.ops: list[OpResult] = []
        self.phases: list[Span] = []
        self.op_index = 0
        self.op_bytes = sum(m.nbytes for step in self.plan.steps for m in step.send)
        self.board = PhaseBoard(cfg.phase_map_fd)
        self.finished = False
        self.next_op_at = 0
        self.shifts: dict[int, int] = {}  # op: ns its start is put off by (SHIFT)
        self.slow = 1.0  # its compute takes this many times as long (SLOW: a straggler)
        self.stop_at: int | None = None  # the run's duration ends it then

    def start(self, t0: int) -> None:
        self.next_op_at = t0
        self.stop_at = t0 + int(self.cfg.duration_s * 1e9) if self.cfg.duration_s else None
        self.board.next_op_at(t0, self.op_bytes)

    def compute_after(self) -> int:
        """The compute (ns) after an op, before the next: an All-Reduce job's, slowed."""
        return int(self.compute_ns * self.slow)

    def slow_down(self, factor: float) -> None:
        """Every compute phase that starts from now on takes ``factor`` times as long."""
        self.slow = factor
        for op in self.op_state:
            op.slow = factor

    def shift(self, op: int, ns: int) -> None:
        """Put off the start of op ``op`` by ``ns`` (the op after the current one if that
        one has begun): its iterations move in time, its period stays (``interleave``)."""
        if not self.op_state and not self.finished and op <= self.op_index:
            self.next_op_at += ns  # waiting for the next op: it starts later
            self.board.next_op_at(self.next_op_at, self.op_bytes)
        else:
            later = max(op, self.op_index + 1)
            self.shifts[later] = self.shifts.get(later, 0) + ns

    def _deliver(self, peer: int, chunk: int, value: int, sent_ns: int) -> None:
        """A whole message from ``peer`` (rank)."""
        self.delivered += 1
        if not (self.op_state and self.op_state[0].arrived(peer, chunk, value, sent_ns)):
            self.early.append((peer, chunk, value, sent_ns))

    def drain(self) -> None:
        """Handle every packet waiting at the receive socket (in C: hotpath.Rx): whole
        messages go to the op, ACKs and CNPs to their queue pair's sender."""
        for kind, index, a, b, c in self.receiver.drain():
            p = self.by_index[index]
            if kind == hotpath.DELIVER:
                self._deliver(p, a, b, c)
            elif kind == hotpath.ACK:
                self.senders[p].on_ack(a, b, time.monotonic_ns())
            else:
                self.senders[p].on_cnp(time.monotonic_ns())

    def turn(self, now: int) -> int | None:
        """Do what can be done now: start the next op, send what may leave, take what
        arrived, fire timers. When to look again: 0 at once, a CLOCK_MONOTONIC instant
        (or sooner, when a packet or room to send comes: :attr:`blocked`), or None once
        the rank is done with its ops (:attr:`finished`; it only answers from then on)."""
        if self.finished:
            self.drain()
            return None
        if self.op_index >= self.cfg.iterations or (self.stop_at and now >= self.stop_at):
            self.finish()
            return None
        senders = self.senders
        if not self.op_state and now >= self.next_op_at:  # the next op starts
            self.op_state.append(Op(self.plan, now, self.slow, self.resent()))
            self.board.op_started(now, self.op_bytes)
            waiting, self.early = self.early, []
            for message in waiting:
                self._deliver(*message)
        op = self.op_state[0] if self.op_state else None
        if op:
            for m, value in op.step(now):
                senders[m.peer].enqueue(m.nbytes, m.chunk, value)
        self.blocked = {p for p, s in senders.items() if s.pending() and not s.send_some(now)}
        before = self.delivered
        self.drain()
        now = time.monotonic_ns()
        if op and op.received_all() and all(s.idle() for s in senders.values()):
            self.ops.append(op.finish(self.op_index, self.cfg.rank, now, self.resent()))
            self.phases += [Span(self.op_index, *span) for span in op.spans]
            self.op_state.clear()
            self.op_index += 1
            self.next_op_at = now + self.compute_after() + self.shifts.pop(self.op_index, 0)
            self.board.op_ended(now - op.start_ns)
            if self.op_index < self.cfg.iterations:
                self.board.next_op_at(self.next_op_at, self.op_bytes)
            return 0
        deadlines, expired = [], False
        for s in senders.values():
            if (d := s.deadline()) is not None:
                if now >= d:
                    s.on_timeout(now)
                    expired = True
                deadlines.append(d)
        if (expired or self.delivered != before
                or any(s.ready(now) for p, s in senders.items() if p not in self.blocked)):
            return 0
        # wait for a packet, room to send, a timer, DCQCN's pace, the end of a compute or
        # the next op
        busy = op.busy_until if op else None
        paced = [t for s in senders.values() if (t := s.paced_until(now)) is not None]
        waits = deadlines + paced + [d for d in (None if self.op_state else self.next_op_at,
                                                 self.stop_at, busy) if d]
        return min(min(waits), now + IDLE_NS) if waits else now + IDLE_NS

    def watch(self, poller: select.poll) -> None:
        """Poll for room on exactly the sockets that were full at the last turn."""
        if not (self.blocked or self.watched):
            return
        for p in self.blocked - self.watched:
            poller.register(self.tx[p], select.POLLOUT)
        for p in self.watched - self.blocked:
            poller.unregister(self.tx[p])
        self.watched = set(self.blocked)

    def resent(self) -> int:
        """Packets this rank's senders have sent again so far (go-back-N)."""
        return sum(s.retransmits for s in self.senders.values())

    def finish(self) -> None:
        """Done with its ops: the phase board closes, the rank only answers from now."""
        if not self.finished:
            self.finished = True
            self.blocked = set()
            self.board.close()

    def result(self, stopped: bool, cpu_user_s: float, cpu_sys_s: float) -> CollectiveResult:
        received = [self.receiver.stats(i) for i in self.by_index]
        senders = self.senders.values()
        return CollectiveResult(
            rank=self.cfg.rank, ops=tuple(self.ops), phases=tuple(self.phases),
            aborted=stopped or self.op_index < self.cfg.iterations,
            counters=RankCounters(
                cpu_user_s=cpu_user_s, cpu_sys_s=cpu_sys_s,
                retransmits=self.resent(),
                timeouts=sum(s.timeouts for s in senders),
                naks=sum(s.naks for s in senders),
                cnps=sum(s.cnps for s in senders),
                out_of_order=sum(st["out_of_order"] for st in received),
                bytes_received=sum(st["bytes"] for st in received),
                packets_sent=sum(s.high for s in senders)))


def open_ranks(cfgs: list[configs.Collective]) -> list[Rank]:
    """Each rank with its sockets in its own host's namespace (``netns_fd``, joined by a
    short-lived thread; None: this process's namespace)."""
    ranks = []
    for cfg in cfgs:
        if cfg.netns_fd is None:
            ranks.append(Rank(cfg))
        else:
            ranks.append(Netns.inherited(cfg.netns_fd).run(Rank, cfg))
    return ranks


def run(ranks: list[Rank], stdin, stdout) -> list[CollectiveResult]:
    """Drive ``ranks`` (an engine's, all in this process) with one poll loop: each pass
    turns only the ranks that have a packet, room to send or a due timer. Prints
    ``OP <k> <compute ns>`` as the first rank completes op k (its compute in the op and
    after it), ``FINISHED`` once all are done."""
    print("READY", file=stdout, flush=True)
    line = stdin.readline().split()
    if not line or line[0] != "GO":
        return [CollectiveResult(rank=r.cfg.rank, ops=(), phases=(), aborted=True)
                for r in ranks]
    t0 = int(line[1])
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    poller = select.poll()
    owner: dict[int, Rank] = {}  # fd -> its rank
    for r in ranks:
        owner |= {s.fileno(): r for s in (r.rx, *r.tx.values())}
        poller.register(r.rx, select.POLLIN)
        r.start(t0)
    wake = dict.fromkeys(ranks, t0)  # when each rank needs a look
    told = 0  # ops of the first rank reported
    while (wait_ns := t0 - time.monotonic_ns()) > 0:
        time.sleep(min(0.001, wait_ns / 1e9))

    due = set(ranks)
    launcher = PipeLines(stdin.fileno())
    poller.register(stdin, select.POLLIN)  # SHIFT, SLOW: the launcher's lines
    while wake and not stopping:
        now = time.monotonic_ns()
        for r in due:
            at = r.turn(now)
            if at is None:
                wake.pop(r, None)
            else:
                wake[r] = at
            r.watch(poller)
        for k in range(told, len(ranks[0].ops)):  # and its compute: in the op, and after it
            compute = ranks[0].ops[k].compute_ns + ranks[0].compute_after()
            print(f"OP {k} {compute}", file=stdout, flush=True)
        told = len(ranks[0].ops)
        if not wake:
            break
        timeout_ms = max(0, min(wake.values()) - time.monotonic_ns()) / 1e6
        events = poller.poll(min(timeout_ms, IDLE_NS / 1e6))
        now = time.monotonic_ns()
        if any(fd == stdin.fileno() for fd, _ in events):
            _obey(ranks, launcher.read(), stopping)
            events = [e for e in events if e[0] != stdin.fileno()]
            wake.update({r: now for r in wake})
        due = {owner[fd] for fd, _ in events} | {r for r, at in wake.items() if at <= now}

    for r in ranks:
        r.finish()
    # Stay until every rank is done: a peer whose last ACK was lost resends its last
    # message and needs it ACKed again, and ranks exiting early would take CPU from the
    # ones still finishing the last op.
    print("FINISHED", file=stdout, flush=True)
    for r in ranks:
        r.watch(poller)
    poller.register(stdin, select.POLLIN)
    while not stopping:
        events = poller.poll(IDLE_NS // 1_000_000)
        if any(fd == stdin.fileno() for fd, _ in events):
            lines = launcher.read()  # END, or None when the controller is gone; a late
            if lines is None or "END" in lines:  # SHIFT or SLOW changes nothing now
                break
            continue
        for fd, _ in events:
            owner[fd].drain()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    share = 1 / len(ranks)  # the engine's CPU, shared equally among its ranks
    return [r.result(bool(stopping), usage.ru_utime * share, usage.ru_stime * share)
            for r in ranks]


def _obey(ranks: list[Rank], lines: list[str] | None, stopping: list) -> None:
    """Lines from the launcher while the ops run: ``SHIFT <op> <ns>`` (every rank's op
    starts ns later), ``SLOW <rank> <factor>`` (that rank computes factor times as long
    from now on), or end of file (None: the launcher is gone, stop)."""
    if lines is None:
        stopping.append(1)
        return
    for words in (line.split() for line in lines):
        if len(words) == 3 and words[0] == "SHIFT":
            for r in ranks:
                r.shift(int(words[1]), int(words[2]))
        elif len(words) == 3 and words[0] == "SLOW":
            for r in ranks:
                if r.cfg.rank == int(words[1]):
                    r.slow_down(float(words[2]))


def main() -> None:
    cfg = configs.read_engine(sys.argv[1])
    sched.run_ahead(sched.RANK_NICE)  # a rank's compute ends on time, its packets leave when due
    results = run(open_ranks(cfg.ranks), sys.stdin, sys.stdout)
    with open(cfg.out, "w") as f:
        json.dump(EngineResult(tuple(results)).to_json(), f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
