"""Collective agent: one process per rank, inside that GPU host's namespace.

Runs ``iterations`` ops of one collective (:mod:`labkit.model.traffic.schedules` gives
each rank its steps) over RoCE RC queue pairs, one per peer it talks to
(:mod:`labkit.traffic.rc`). Closed loop: a step's messages leave only once the
messages of the steps before it have arrived. Each message carries its chunk's
value; at the end of every op the rank compares its values with the expected
ones and reports how many chunks were wrong (nccl-tests' ``#wrong``).

Protocol with the controller: the agent reads a JSON config (path in argv),
binds its sockets, prints ``READY``, waits for ``GO <t0_ns>`` on stdin (a
CLOCK_MONOTONIC instant shared by all namespaces), prints ``OP <k>`` as each op
completes here and ``FINISHED`` after the last, keeps acknowledging until ``END``
on stdin (every rank has finished), writes its results JSON, prints ``DONE`` and
exits. SIGTERM ends it early; the results written then cover the ops completed.

Training jobs (:mod:`labkit.model.traffic.jobs`) run the same way, one plan per
iteration, with their compute phases as timed waits; each iteration reports its
compute time, the time spent waiting while data was on the wire (exposed
communication) and waiting for a peer that had not sent yet (bubbles); every op also
reports those phases as spans, when each began and ended (``phases`` in the results:
``[op, phase, start_ns, end_ns]``), a few per step of its plan.

Standard library only (plus ``wire``, ``hotpath``, ``rc``, ``schedules``, ``jobs``):
agents start fast.
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
from labkit.model import abi
from labkit.model.traffic import configs, jobs, schedules, wire
from labkit.model.traffic.results import CollectiveResult, OpResult, RankCounters, Span
from labkit.traffic import hotpath, rc

SO_RCVBUFFORCE = 33
SOL_UDP, UDP_GRO = 17, 104  # <linux/udp.h>
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2  # <linux/in.h>; not exported by Python 3.11
RCVBUF_BYTES = 16 << 20
SNDBUF_BYTES = 128 << 10
SEND_BURST = 32  # packets per sendmmsg, between looks at the receive side
QPN_BASE = 0x100  # the queue pair of rank r is QPN_BASE + r
COMPUTE, WIRE_WAIT, BUBBLE = "compute", "wire_wait", "bubble"  # phases of a span


class Op:
    """One op (or training iteration) at this rank: values, awaited receives, compute,
    and where the time went, as spans ``(phase, start_ns, end_ns)`` in the order they
    happened: ``compute``, ``bubble`` (waiting for a peer that had not sent yet) and
    ``wire_wait`` (waiting while the data was on its way); the rest of the op is the
    rank's own sending and other work. A step adds at most one compute span, and at most
    one wait (a bubble, then a wire wait) ends before the next step starts or the op
    ends: at most three spans per step of the plan, as bounded as the plan itself."""

    def __init__(self, plan: schedules.Plan, now: int):
        self.plan = plan
        self.values = dict(plan.initial)
        self.pending = [list(step.recv) for step in plan.steps]
        self.started = 0  # steps whose sends are queued
        self.busy_until: int | None = None  # computing until then
        self.start_ns = now
        self.waiting_since: int | None = None  # blocked on the network since
        self.spans: list[tuple[str, int, int]] = []
        self.last_sent_ns = 0  # when the last message matched left its sender

    def arrived(self, peer: int, chunk: int, value: int, sent_ns: int = 0) -> bool:
        """Match a whole message to the earliest receive awaiting it."""
        for awaited in self.pending:
            for m in awaited:
                if m.peer == peer and m.chunk == chunk:
                    awaited.remove(m)
                    self.values[chunk] = (self.values.get(chunk, 0) + value if m.reduce
                                          else value)
                    self.last_sent_ns = sent_ns
                    return True
        return False

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
        while self.started < len(steps) and not any(self.pending[:self.started]):
            step = steps[self.started]
            if step.compute_ns:
                if self.busy_until is None:
                    self.busy_until = now + step.compute_ns
                    self.spans.append((COMPUTE, now, self.busy_until))
                if now < self.busy_until:
                    break
                self.busy_until = None
            out += [(m, self.values.get(m.chunk, 0)) for m in step.send]
            self.started += 1
        return out

    def can_advance(self) -> bool:
        """Whether a step may start now, without waiting for the network."""
        return self.started < len(self.plan.steps) and not any(self.pending[:self.started])

    def computing(self, now: int) -> bool:
        return self.busy_until is not None and now < self.busy_until

    def blocked(self, now: int) -> bool:
        """Whether the op can go on only once a message arrives."""
        return not self.computing(now) and not self.can_advance()

    def received_all(self) -> bool:
        return self.started == len(self.plan.steps) and not any(self.pending)

    def wrong(self) -> int:
        return sum(self.values.get(c) != v for c, v in self.plan.expected.items())

    def total_ns(self, phase: str) -> int:
        return sum(end - start for p, start, end in self.spans if p == phase)

    def finish(self, index: int, rank: int, now: int) -> OpResult:
        """End the op at ``now`` (a wait still open ends with it): its row of the
        ``collectives`` table."""
        if self.waiting_since is not None:
            self.waited(self.waiting_since, now)
            self.waiting_since = None
        return OpResult(op=index, rank=rank, start_ns=self.start_ns, end_ns=now,
                        wrong=self.wrong(), compute_ns=self.total_ns(COMPUTE),
                        exposed_ns=self.total_ns(WIRE_WAIT), bubble_ns=self.total_ns(BUBBLE))


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


def run(cfg: configs.Collective, stdin, stdout) -> CollectiveResult:
    rank = cfg.rank
    plan = plan_for(cfg.workload, cfg.n, rank)
    peers = cfg.peers
    partners = sorted({m.peer for s in plan.steps for m in s.send + s.recv})
    compute_ns = int(cfg.compute_ms * 1e6)
    data = cfg.templates
    op_state: list[Op] = []
    early: list[tuple[int, int, int, int]] = []  # messages of the next op, arrived already
    delivered = [0]  # whole messages so far: a new one may let the next step start

    def deliver(peer: int, chunk: int, value: int, sent_ns: int) -> None:
        """A whole message from ``peer`` (rank)."""
        delivered[0] += 1
        if not (op_state and op_state[0].arrived(peer, chunk, value, sent_ns)):
            early.append((peer, chunk, value, sent_ns))

    dcqcn = cfg.dcqcn_line_mbps  # set when the scenario turns DCQCN on
    rx = _udp_socket()
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
    if dcqcn:  # see each packet's ECN field: CE asks for a CNP
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.setsockopt(SOL_UDP, UDP_GRO, 1)  # a peer's GSO run arrives as it was sent
    rx.bind(("0.0.0.0", wire.ROCEV2_PORT))
    receiver = hotpath.Rx(rx, cfg.ip)
    senders, tx = {}, {}
    by_index = {}  # the receiver's peer index -> rank
    for p in partners:
        s = tx[p] = _udp_socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
        if dcqcn:  # ECN-capable: the fabric may mark it CE instead of queueing it long
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, wire.ECT0)
        s.bind(("0.0.0.0", cfg.sport_base + p))
        qpn = QPN_BASE + p
        out = hotpath.Tx(s, cfg.ip, cfg.sport_base + p, (peers[p], wire.ROCEV2_PORT),
                         {k: rc.with_dqpn(v, qpn) for k, v in data.items()},
                         cfg.payload_bytes, abi.seq_base(rank), batch=SEND_BURST,
                         gso=cfg.gso_segments)
        senders[p] = rc.Sender(out, cfg.payload_bytes,
                               rc.Dcqcn(dcqcn * 1e6 / 8) if dcqcn else None,
                               rc.LOSSLESS_MIN_RTO_NS if cfg.lossless else rc.MIN_RTO_NS)
        index = receiver.add_peer(peers[p], wire.ROCEV2_PORT,
                                  rc.with_dqpn(cfg.ack_template, qpn),
                                  rc.with_dqpn(cfg.nak_template, qpn),
                                  rc.with_dqpn(cfg.cnp_template, qpn) if dcqcn else None)
        by_index[index] = p

    print("READY", file=stdout, flush=True)
    line = stdin.readline().split()
    if not line or line[0] != "GO":
        return CollectiveResult(rank=rank, ops=(), phases=(), aborted=True)
    t0 = int(line[1])
    stop_at = t0 + int(cfg.duration_s * 1e9) if cfg.duration_s else None
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    poller = select.poll()
    poller.register(rx, select.POLLIN)
    watching: set[int] = set()  # tx sockets polled for room

    def drain() -> None:
        """Handle every packet waiting at the receive socket (in C: hotpath.Rx): whole
        messages go to the op, ACKs and CNPs to their queue pair's sender."""
        for kind, index, a, b, c in receiver.drain():
            p = by_index[index]
            if kind == hotpath.DELIVER:
                deliver(p, a, b, c)
            elif kind == hotpath.ACK:
                senders[p].on_ack(a, b, time.monotonic_ns())
            else:
                senders[p].on_cnp(time.monotonic_ns())

    ops: list[OpResult] = []
    phases: list[Span] = []
    op_index, next_op_at = 0, t0
    op_bytes = sum(m.nbytes for step in plan.steps for m in step.send)
    board = PhaseBoard(cfg.phase_map_fd)
    board.next_op_at(t0, op_bytes)
    while (wait_ns := t0 - time.monotonic_ns()) > 0:
        time.sleep(min(0.001, wait_ns / 1e9))

    while op_index < cfg.iterations and not stopping:
        now = time.monotonic_ns()
        if stop_at and now >= stop_at:
            break
        if not op_state and now >= next_op_at:  # the next op starts
            op_state.append(Op(plan, now))
            board.op_started(now, op_bytes)
            waiting, early[:] = list(early), []
            for message in waiting:
                deliver(*message)
        op = op_state[0] if op_state else None
        if op:
            for m, value in op.step(now):
                senders[m.peer].enqueue(m.nbytes, m.chunk, value)
        blocked = [p for p, s in senders.items() if s.pending() and not s.send_some(now)]
        before = delivered[0]
        drain()
        now = time.monotonic_ns()
        if op and op.received_all() and all(s.idle() for s in senders.values()):
            ops.append(op.finish(op_index, rank, now))
            phases += [Span(op_index, *span) for span in op.spans]
            print(f"OP {op_index}", file=stdout, flush=True)
            op_state.clear()
            op_index += 1
            next_op_at = now + compute_ns
            board.op_ended(now - op.start_ns)
            if op_index < cfg.iterations:
                board.next_op_at(next_op_at, op_bytes)
            continue
        deadlines = [d for s in senders.values() if (d := s.deadline()) is not None]
        expired = [p for p, s in senders.items() if (d := s.deadline()) is not None and now >= d]
        for p in expired:
            senders[p].on_timeout(now)
        if (expired or delivered[0] != before
                or any(s.ready(now) for p, s in senders.items() if p not in blocked)):
            continue
        # wait for a packet, room to send, a timer, DCQCN's pace, the end of a compute or
        # the next op
        busy = op.busy_until if op else None
        paced = [t for s in senders.values() if (t := s.paced_until(now)) is not None]
        waits = deadlines + paced + [d for d in (None if op_state else next_op_at, stop_at,
                                                 busy) if d]
        timeout_ms = max(0, min(waits) - now) / 1e6 if waits else 50
        for p in set(blocked) - watching:
            poller.register(tx[p], select.POLLOUT)
        for p in watching - set(blocked):
            poller.unregister(tx[p])
        watching = set(blocked)
        poller.poll(min(timeout_ms, 50))

    board.close()
    # Stay until every rank is done: a peer whose last ACK was lost resends its last
    # message and needs it ACKed again, and ranks exiting early would take CPU from the
    # ones still finishing the last op.
    print("FINISHED", file=stdout, flush=True)
    for p in watching:
        poller.unregister(tx[p])
    poller.register(stdin, select.POLLIN)
    while not stopping:
        if any(fd == stdin.fileno() for fd, _ in poller.poll(50)):
            stdin.readline()  # END, or "" when the controller is gone
            break
        drain()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    received = [receiver.stats(i) for i in by_index]
    return CollectiveResult(
        rank=rank, ops=tuple(ops), phases=tuple(phases),
        aborted=bool(stopping) or op_index < cfg.iterations,
        counters=RankCounters(
            cpu_user_s=usage.ru_utime, cpu_sys_s=usage.ru_stime,
            retransmits=sum(s.retransmits for s in senders.values()),
            timeouts=sum(s.timeouts for s in senders.values()),
            naks=sum(s.naks for s in senders.values()),
            cnps=sum(s.cnps for s in senders.values()),
            out_of_order=sum(st["out_of_order"] for st in received),
            bytes_received=sum(st["bytes"] for st in received),
            packets_sent=sum(s.high for s in senders.values())))


def main() -> None:
    cfg = configs.read_collective(sys.argv[1])
    sched.run_ahead(sched.RANK_NICE)  # a rank's compute ends on time, its packets leave when due
    result = run(cfg, sys.stdin, sys.stdout)
    with open(cfg.out, "w") as f:
        json.dump(result.to_json(), f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
