"""Ring All-Reduce agent: one process per rank, inside that GPU host's namespace.

Each op is a reduce-scatter followed by an all-gather: ``2(n-1)`` steps, each
moving one ``size/n`` chunk to the right-hand neighbour as an RDMA WRITE
message (FIRST/MIDDLE/LAST, or ONLY) over RoCEv2 (UDP 4791). Closed loop: the
chunk of step ``s+1`` leaves only once the chunk of step ``s`` has arrived
from the left. Reliable-connection semantics as RoCE RC: PSNs per queue pair,
the receiver ACKs each message and NAKs the first gap it sees, the sender goes
back N on a NAK or a retransmission timeout. Retransmissions are counted.

Protocol with the controller: the agent reads a JSON config (path in argv),
binds its sockets, prints ``READY``, waits for ``GO <t0_ns>`` on stdin (a
CLOCK_MONOTONIC instant shared by all namespaces), prints ``OP <k>`` as each op
completes here, writes its results JSON, prints ``DONE`` and exits. SIGTERM
ends it early; the results written then cover the ops completed.

Standard library only (plus :mod:`labkit.traffic.wire` and :mod:`labkit.traffic.sender`):
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

from labkit.traffic import wire
from labkit.traffic.sender import BatchSender

SO_RCVBUFFORCE = 33
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2  # <linux/in.h>; not exported by Python 3.11
RCVBUF_BYTES = 16 << 20
SNDBUF_BYTES = 128 << 10
MIN_RTO_NS = 20_000_000
MAX_RTO_NS = 1_000_000_000
SEND_BURST = 32  # packets per sendmmsg, between looks at the receive side
PSN_AT = slice(wire.PSN, wire.PSN + 3)
RETH_DLEN = wire.BTH_LEN + 12  # RETH: virtual address (8), R_Key (4), DMA length (4)


class Sender:
    """The send side of this rank's queue pair towards its right-hand neighbour."""

    def __init__(self, cfg: dict, out: BatchSender):
        self.out = out  # sendmmsg batches towards the right-hand neighbour
        self.icrc = wire.Icrc(cfg["ip"], cfg["right_ip"], cfg["sport"])
        self.mtu = cfg["payload_bytes"]
        self.templates = {k: bytearray.fromhex(v) for k, v in cfg["templates"].items()}
        self.packets: list[tuple[bytearray, int]] = []  # (buffer, stamp offset or -1) per PSN
        self.seq_base = cfg["rank"] << 24
        self.base = 0  # oldest unacknowledged PSN
        self.next = 0  # next PSN to (re)send
        self.high = 0  # one past the highest PSN ever sent
        self.ends: set[int] = set()  # PSN after each message's last packet
        self.last_activity = 0
        self.srtt = 0.0
        self.rttvar = 0.0
        self.rto = 4 * MIN_RTO_NS
        self.backoff = 1
        self.sent_at: dict[int, int] = {}  # message end PSN -> when its last packet left
        self.retransmits = 0
        self.timeouts = 0
        self.naks = 0

    def enqueue(self, nbytes: int) -> None:
        """Queue one message of ``nbytes`` as RDMA WRITE packets.

        Full-size packets share their template buffer (the PSN is patched just
        before each send); a short last packet gets a trimmed copy of its own.
        """
        count = max(1, -(-nbytes // self.mtu))
        for i in range(count):
            kind = ("only" if count == 1 else "first" if i == 0
                    else "last" if i == count - 1 else "middle")
            buf = self.templates[kind]
            size = nbytes - i * self.mtu
            if kind in ("first", "only"):  # the RETH carries the message's length
                buf = bytearray(buf)
                buf[RETH_DLEN:RETH_DLEN + 4] = nbytes.to_bytes(4, "big")
            if size < self.mtu:
                head = len(buf) - self.mtu - wire.ICRC_LEN
                buf = buf[:head + size] + bytes(wire.ICRC_LEN)
            stamp_at = wire.DATA_OFFSET[buf[wire.OPCODE]] if size >= wire.STAMP.size else -1
            self.packets.append((buf, stamp_at))
        self.ends.add(len(self.packets))

    def pending(self) -> bool:
        return self.next < len(self.packets)

    def idle(self) -> bool:
        return self.base >= len(self.packets)

    def send_some(self, now: int) -> bool:
        """Send the next batch of packets in one sendmmsg; False when the socket took
        less than all of them (it is full: wait until it drains)."""
        packets, out = self.packets, self.out
        first = self.next
        stop = min(len(packets), first + out.batch)
        stamp, seq_base, clock = wire.STAMP.pack_into, self.seq_base, time.monotonic_ns
        for psn in range(first, stop):
            buf, stamp_at = packets[psn]
            slot = out.slot(buf)
            slot[PSN_AT] = (psn & wire.PSN_MASK).to_bytes(3, "big")
            if stamp_at >= 0:  # for one-way latency at the receiver (bpf/latency.bpf.c)
                stamp(slot, stamp_at, wire.STAMP_MAGIC, seq_base | psn & wire.PSN_MASK, clock())
            self.icrc.put(slot)
        psn = first + out.flush()
        blocked = psn < stop
        for end in range(first + 1, psn + 1):
            if end in self.ends:
                self.sent_at.setdefault(end, now)
        if psn < self.high:
            self.retransmits += psn - self.next
        else:
            self.retransmits += max(0, self.high - self.next)
            self.high = psn
        if psn != self.next:
            self.last_activity = now
        self.next = psn
        return not blocked

    def on_ack(self, psn24: int, syndrome: int, now: int) -> None:
        psn = self._unwrap(psn24)
        if syndrome == wire.SYNDROME_NAK_PSN:
            # everything before psn arrived; go back to psn
            self.naks += 1
            if self.base <= psn <= self.next:
                self.base = psn
                self.next = psn
                self.sent_at = {k: v for k, v in self.sent_at.items() if k <= psn}
        elif psn + 1 > self.base:
            self.base = psn + 1
            sent = self.sent_at.pop(self.base, None)
            if sent is not None:
                self._rtt_sample(now - sent)
            self.backoff = 1
        self.last_activity = now

    def _rtt_sample(self, rtt: int) -> None:
        if self.srtt == 0:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = int(min(MAX_RTO_NS, max(MIN_RTO_NS, self.srtt + 4 * self.rttvar)))

    def deadline(self) -> int | None:
        if self.idle() or self.pending():
            return None
        return self.last_activity + self.rto * self.backoff

    def on_timeout(self, now: int) -> None:
        self.timeouts += 1
        self.backoff = min(self.backoff * 2, 64)
        self.next = self.base
        self.sent_at.clear()
        self.last_activity = now

    def _unwrap(self, psn24: int) -> int:
        """Map a 24-bit PSN onto the nearest absolute PSN at or below ``high``."""
        diff = (self.high - psn24) & wire.PSN_MASK
        return self.high - diff


class Receiver:
    """The receive side of the queue pair from the left-hand neighbour."""

    def __init__(self, cfg: dict, sock: socket.socket):
        self.sock = sock
        self.dest = (cfg["left_ip"], wire.ROCEV2_PORT)
        self.icrc = wire.Icrc(cfg["ip"], cfg["left_ip"], wire.ROCEV2_PORT)
        self.ack = bytearray.fromhex(cfg["ack_template"])
        self.nak = bytearray.fromhex(cfg["nak_template"])
        self.expected = 0
        self.messages = 0
        self.bytes = 0
        self.nak_sent_for = -1
        self.dropped_out_of_order = 0

    def on_data(self, pkt: memoryview, nbytes: int) -> None:
        psn24 = int.from_bytes(pkt[wire.PSN:wire.PSN + 3], "big")
        diff = (psn24 - self.expected) & wire.PSN_MASK
        opcode = pkt[wire.OPCODE]
        if diff == 0:
            self.expected += 1
            self.bytes += nbytes
            if opcode in wire.MESSAGE_END:
                self.messages += 1
                self._reply(self.ack, self.expected - 1)
        elif diff < 0x800000:  # ahead: a gap, NAK once per expected PSN
            self.dropped_out_of_order += 1
            if self.nak_sent_for != self.expected:
                self.nak_sent_for = self.expected
                self._reply(self.nak, self.expected)
        elif opcode in wire.MESSAGE_END:  # a duplicate message end: ACK again
            self._reply(self.ack, self.expected - 1)

    def _reply(self, template: bytearray, psn: int) -> None:
        template[wire.PSN:wire.PSN + 3] = (psn & wire.PSN_MASK).to_bytes(3, "big")
        self.icrc.put(template)
        try:
            self.sock.sendto(template, self.dest)
        except BlockingIOError:
            pass  # lost like any packet: the sender's timer recovers


def run(cfg: dict, stdin, stdout) -> dict:
    n, rank = cfg["n"], cfg["rank"]
    steps = 2 * (n - 1)
    chunk = -(-cfg["size_bytes"] // n)
    iterations = cfg["iterations"]
    compute_ns = int(cfg["compute_ms"] * 1e6)

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
    # ACKs and NAKs leave from rx: DF set and no IP ID, as wire.Icrc expects
    rx.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    rx.bind(("0.0.0.0", wire.ROCEV2_PORT))
    rx.setblocking(False)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
    # DF set and an unconnected socket: the kernel writes IP ID 0, as RoCE NICs do
    tx.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    if cfg.get("dscp"):
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, cfg["dscp"] << 2)
    tx.bind(("0.0.0.0", cfg["sport"]))
    tx.setblocking(False)

    out = BatchSender(tx, (cfg["right_ip"], wire.ROCEV2_PORT), batch=SEND_BURST,
                      slot_bytes=max(len(t) for t in cfg["templates"].values()) // 2)
    sender, receiver = Sender(cfg, out), Receiver(cfg, rx)
    print("READY", file=stdout, flush=True)
    line = stdin.readline().split()
    if not line or line[0] != "GO":
        return {"rank": rank, "ops": [], "aborted": True}
    t0 = int(line[1])
    stop_at = t0 + int(cfg["duration_s"] * 1e9) if cfg.get("duration_s") else None

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    poller = select.poll()
    rbuf = bytearray(65536)
    rview = memoryview(rbuf)
    ops: list[dict] = []
    op, step_sent = 0, 0  # current op; messages of this op queued so far
    op_start = max(t0, time.monotonic_ns())
    next_op_at = t0
    while (wait_ns := t0 - time.monotonic_ns()) > 0:
        time.sleep(min(0.001, wait_ns / 1e9))

    while op < iterations and not stopping:
        now = time.monotonic_ns()
        if stop_at and now >= stop_at:
            break
        # queue every message whose input has arrived (closed loop)
        base_msg = op * steps
        while step_sent < steps and now >= next_op_at and (
                step_sent == 0 or receiver.messages >= base_msg + step_sent):
            if step_sent == 0:
                op_start = now
            sender.enqueue(chunk)
            step_sent += 1
        blocked = sender.pending() and not sender.send_some(now)
        # drain the receive side
        while True:
            try:
                nbytes = rx.recv_into(rbuf)
            except BlockingIOError:
                break
            opcode = rbuf[wire.OPCODE]
            if opcode == wire.ACKNOWLEDGE:
                sender.on_ack(int.from_bytes(rbuf[wire.PSN:wire.PSN + 3], "big"),
                              rbuf[wire.BTH_LEN], time.monotonic_ns())
            elif opcode in wire.DATA_OPCODES:
                receiver.on_data(rview, nbytes)
        now = time.monotonic_ns()
        if receiver.messages >= base_msg + steps and sender.idle() and step_sent == steps:
            ops.append({"op": op, "rank": rank, "start_ns": op_start, "end_ns": now})
            print(f"OP {op}", file=stdout, flush=True)
            op += 1
            step_sent = 0
            next_op_at = now + compute_ns
            continue
        deadline = sender.deadline()
        if deadline is not None and now >= deadline:
            sender.on_timeout(now)
            continue
        if sender.pending() and not blocked:
            continue
        # wait for a packet, send space, the retransmission timer or the next op
        waits = [d for d in (deadline, next_op_at if step_sent == 0 else None, stop_at)
                 if d is not None]
        timeout_ms = max(0, min(waits) - now) / 1e6 if waits else 50
        poller.register(rx, select.POLLIN)
        if blocked:
            poller.register(tx, select.POLLOUT)
        else:
            try:
                poller.unregister(tx)
            except KeyError:
                pass
        poller.poll(min(timeout_ms, 50))

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_user_s": usage.ru_utime, "cpu_sys_s": usage.ru_stime,
        "rank": rank, "ops": ops, "aborted": bool(stopping) or op < iterations,
        "retransmits": sender.retransmits, "timeouts": sender.timeouts, "naks": sender.naks,
        "out_of_order": receiver.dropped_out_of_order, "bytes_received": receiver.bytes,
        "packets_sent": sender.high, "rto_ms": sender.rto / 1e6,
    }


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    result = run(cfg, sys.stdin, sys.stdout)
    with open(cfg["out"], "w") as f:
        json.dump(result, f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
