"""RoCE reliable connection (RC) semantics for one queue pair, over UDP sockets.

:class:`Sender` segments messages into RDMA WRITE FIRST/MIDDLE/LAST (or ONLY)
packets with consecutive PSNs, batches them into ``sendmmsg`` calls, and goes
back N on a NAK or a retransmission timeout (RFC 6298-style RTO). Each message
carries its chunk id in the RETH virtual address and the chunk's value (see
:mod:`labkit.traffic.schedules`) after the stamp in its first packet.
:class:`Receiver` accepts only the next expected PSN, ACKs each message end,
NAKs the first packet of a gap once, and reports whole messages. With DCQCN on, a
receiver answers packets that arrive marked CE with a CNP (at most one per
``CNP_GAP_NS``) and the sender's :class:`Dcqcn` paces it below line rate.

Every data packet carries a stamp for one-way latency (``bpf/latency.bpf.c``) and
a valid ICRC. Standard library only (plus ``wire`` and ``sender``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from labkit import abi
from labkit.traffic import wire
from labkit.traffic.sender import BatchSender

# An ACK's round trip is mostly the sender's own NIC queue (~12 ms at 100 Mbit/s), and a
# busy 2-core machine can hold a rank off its socket for ~10 ms more: a 20 ms floor fired
# on ACKs that were only late (1-3 spurious timeouts per run, each resending a message).
MIN_RTO_NS = 50_000_000
MAX_RTO_NS = 1_000_000_000
# On a lossless fabric a packet is late, never lost, and link-level pauses add their
# queues' drain times to a round trip: there, the timer waits this long at least (an RDMA
# fabric with PFC is run with long transport timeouts for the same reason).
LOSSLESS_MIN_RTO_NS = MAX_RTO_NS
PSN_AT = slice(wire.PSN, wire.PSN + 3)
DQPN_AT = slice(wire.DQPN, wire.DQPN + 3)
RETH_VA = wire.BTH_LEN  # RETH: virtual address (8), R_Key (4), DMA length (4)
RETH_DLEN = wire.BTH_LEN + 12
VALUE_AT = abi.STAMP.size  # the chunk value follows the stamp in a message's first packet
MIN_MESSAGE = VALUE_AT + 8


CNP_GAP_NS = 2_000_000  # a receiver sends at most one CNP per queue pair this often


class Dcqcn:
    """DCQCN's reaction point for one queue pair (Zhu et al., SIGCOMM 2015), in bytes/s
    and emulated time. A CNP cuts the rate by ``alpha``/2 (at most once per
    ``TIMER_NS``) and keeps the rate before as the target; every ``TIMER_NS`` after,
    ``alpha`` decays and the rate recovers: halfway to the target for ``FAST_ROUNDS``
    rounds, then the target itself grows by ``AI`` of line rate. Back at line rate the
    sender is not paced at all. (DCQCN's byte counter and hyper increase are left out:
    the timer alone drives recovery.)"""

    G = 1 / 16
    TIMER_NS = 5_000_000
    FAST_ROUNDS = 5
    AI = 0.05  # of line rate, per round after fast recovery
    FLOOR = 0.01  # of line rate
    BURST_NS = 1_000_000  # a paced sender may send this long at its rate at once

    def __init__(self, line_bytes_per_s: float):
        self.line = line_bytes_per_s
        self.rate = self.target = line_bytes_per_s
        self.alpha = 1.0
        self.rounds = 0
        self.next_round: int | None = None
        self.last_cut: int | None = None
        self.tokens = 0.0
        self.filled_at = 0

    @property
    def paced(self) -> bool:
        return self.rate < self.line

    def on_cnp(self, now: int) -> None:
        """Cut the rate, at most once per ``TIMER_NS`` (later CNPs in it are the same
        congestion, still being reported)."""
        if self.last_cut is not None and now - self.last_cut < self.TIMER_NS:
            return
        self.last_cut = now
        self._recover(now)
        if not self.paced:  # pacing starts now, with an empty bucket
            self.tokens, self.filled_at = 0.0, now
        self.target = self.rate
        self.rate = max(self.rate * (1 - self.alpha / 2), self.FLOOR * self.line)
        self.alpha = (1 - self.G) * self.alpha + self.G
        self.rounds = 0
        self.next_round = now + self.TIMER_NS

    def _recover(self, now: int) -> None:
        while self.next_round is not None and now >= self.next_round:
            self.alpha *= 1 - self.G
            self.rounds += 1
            if self.rounds > self.FAST_ROUNDS:
                self.target = min(self.target + self.AI * self.line, self.line)
            self.rate = (self.rate + self.target) / 2
            if self.rate >= 0.99 * self.line:
                self.rate, self.next_round = self.line, None
            else:
                self.next_round += self.TIMER_NS

    def allowed(self, now: int, packet_bytes: int) -> int:
        """How many packets may leave now (no limit when not paced)."""
        self._recover(now)
        if not self.paced:
            return 1 << 30
        burst = max(2 * packet_bytes, self.rate * self.BURST_NS / 1e9)
        self.tokens = min(burst, self.tokens + (now - self.filled_at) * self.rate / 1e9)
        self.filled_at = now
        return int(self.tokens // packet_bytes)

    def spent(self, nbytes: int) -> None:
        if self.paced:
            self.tokens -= nbytes

    def ready_at(self, now: int, packet_bytes: int) -> int | None:
        """When a paced sender's next packet may leave (None: now, or not paced)."""
        if not self.paced or self.allowed(now, packet_bytes):
            return None
        return now + int((packet_bytes - self.tokens) / self.rate * 1e9) + 1


def with_dqpn(template: bytes, dqpn: int) -> bytearray:
    out = bytearray(template)
    out[DQPN_AT] = dqpn.to_bytes(3, "big")
    return out


class Sender:
    """The send side of a queue pair towards one peer."""

    def __init__(self, out: BatchSender, icrc: wire.Icrc, templates: dict[str, bytes],
                 payload_bytes: int, seq_base: int, dcqcn: Dcqcn | None = None,
                 min_rto_ns: int = MIN_RTO_NS):
        self.out = out
        self.dcqcn = dcqcn
        self.min_rto = min_rto_ns
        self.cnps = 0
        self.icrc = icrc
        self.templates = templates
        self.mtu = payload_bytes
        self.seq_base = seq_base
        self.packets: list[tuple[bytearray, int]] = []  # (buffer, stamp offset or -1) per PSN
        self.base = 0  # oldest unacknowledged PSN
        self.next = 0  # next PSN to (re)send
        self.high = 0  # one past the highest PSN ever sent
        self.ends: set[int] = set()  # PSN after each message's last packet
        self.last_activity = 0
        self.srtt = 0.0
        self.rttvar = 0.0
        self.rto = min(4 * min_rto_ns, MAX_RTO_NS)
        self.backoff = 1
        self.sent_at: dict[int, int] = {}  # message end PSN -> when its last packet left
        self.retransmits = 0
        self.timeouts = 0
        self.naks = 0

    def enqueue(self, nbytes: int, chunk: int = 0, value: int = 0) -> None:
        """Queue one message of ``nbytes`` (at least MIN_MESSAGE) as RDMA WRITE packets.

        Full-size middle packets share their template buffer (patched in the batch
        slot just before sending); a message's first packet and a short last packet
        get copies of their own.
        """
        nbytes = max(nbytes, MIN_MESSAGE)
        count = -(-nbytes // self.mtu)
        for i in range(count):
            kind = ("only" if count == 1 else "first" if i == 0
                    else "last" if i == count - 1 else "middle")
            buf = self.templates[kind]
            size = min(self.mtu, nbytes - i * self.mtu)
            if size < self.mtu:
                head = len(buf) - self.mtu - wire.ICRC_LEN
                buf = buf[:head + size] + bytes(wire.ICRC_LEN)
            data_at = wire.DATA_OFFSET[buf[wire.OPCODE]]
            if i == 0:  # the RETH names the chunk and the message length; the value follows
                buf = bytearray(buf)
                buf[RETH_VA:RETH_VA + 8] = chunk.to_bytes(8, "big")
                buf[RETH_DLEN:RETH_DLEN + 4] = nbytes.to_bytes(4, "big")
                buf[data_at + VALUE_AT:data_at + VALUE_AT + 8] = value.to_bytes(8, "little")
            self.packets.append((buf, data_at if size >= abi.STAMP.size else -1))
        self.ends.add(len(self.packets))

    def pending(self) -> bool:
        return self.next < len(self.packets)

    def idle(self) -> bool:
        return self.base >= len(self.packets)

    def ready(self, now: int) -> bool:
        """Packets are waiting and may leave now (DCQCN's pace allowing)."""
        return self.pending() and (not self.dcqcn or self.dcqcn.allowed(now, self.mtu) > 0)

    def paced_until(self, now: int) -> int | None:
        """When DCQCN lets the next waiting packet leave, if it must wait."""
        return self.dcqcn.ready_at(now, self.mtu) if self.dcqcn and self.pending() else None

    def on_cnp(self, now: int) -> None:
        self.cnps += 1
        if self.dcqcn:
            self.dcqcn.on_cnp(now)

    def send_some(self, now: int) -> bool:
        """Send the next batch in one sendmmsg; False when the socket took less than all
        of it (it is full: wait until it drains)."""
        packets, out = self.packets, self.out
        first = self.next
        stop = min(len(packets), first + out.batch)
        if self.dcqcn:
            stop = min(stop, first + self.dcqcn.allowed(now, self.mtu))
            if stop == first:
                return True  # paced: not the socket's fault
        stamp, seq_base, clock = abi.STAMP.pack_into, self.seq_base, time.monotonic_ns
        for psn in range(first, stop):
            buf, stamp_at = packets[psn]
            slot = out.slot(buf)
            slot[PSN_AT] = (psn & wire.PSN_MASK).to_bytes(3, "big")
            if stamp_at >= 0:  # for one-way latency at the receiver (bpf/latency.bpf.c)
                stamp(slot, stamp_at, abi.STAMP_MAGIC, seq_base | psn & wire.PSN_MASK, clock())
            self.icrc.put(slot)
        psn = first + out.flush()
        if self.dcqcn:
            self.dcqcn.spent((psn - first) * self.mtu)
        for end in range(first + 1, psn + 1):
            if end in self.ends:
                self.sent_at.setdefault(end, now)
        if psn < self.high:
            self.retransmits += psn - first
        else:
            self.retransmits += max(0, self.high - first)
            self.high = psn
        if psn != first:
            self.last_activity = now
        self.next = psn
        return psn == stop

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
        self.rto = int(min(MAX_RTO_NS, max(self.min_rto, self.srtt + 4 * self.rttvar)))

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
    """The receive side of a queue pair from one peer; whole messages go to ``deliver``."""

    def __init__(self, sock: socket.socket, dest: tuple[str, int], icrc: wire.Icrc,
                 ack: bytearray, nak: bytearray,
                 deliver: Callable[[int, int, int], None], cnp: bytearray | None = None):
        self.sock = sock
        self.cnp = cnp  # with DCQCN on: the reply to packets marked CE
        self.cnps = 0
        self.last_cnp = -CNP_GAP_NS
        self.dest = dest
        self.icrc = icrc
        self.ack, self.nak = ack, nak
        self.deliver = deliver
        self.expected = 0
        self.messages = 0
        self.bytes = 0
        self.nak_sent_for = -1
        self.dropped_out_of_order = 0
        self.chunk = self.value = self.sent_ns = 0  # of the message being received
        self.in_message = False  # between a message's first and last packet

    def on_data(self, pkt: memoryview, nbytes: int, ce: bool = False) -> None:
        if ce and self.cnp is not None:
            now = time.monotonic_ns()
            if now - self.last_cnp >= CNP_GAP_NS:
                self.last_cnp = now
                self.cnps += 1
                self._reply(self.cnp, 0)
        psn24 = int.from_bytes(pkt[PSN_AT], "big")
        diff = (psn24 - self.expected) & wire.PSN_MASK
        opcode = pkt[wire.OPCODE]
        if diff == 0:
            self.expected += 1
            self.bytes += nbytes
            if opcode in wire.MESSAGE_START:
                self.in_message = True
                data_at = wire.DATA_OFFSET[opcode]
                self.chunk = int.from_bytes(pkt[RETH_VA:RETH_VA + 8], "big")
                self.value = int.from_bytes(pkt[data_at + VALUE_AT:data_at + VALUE_AT + 8],
                                            "little")
                self.sent_ns = abi.STAMP.unpack_from(pkt, data_at)[2]  # when it left
            if opcode in wire.MESSAGE_END:
                self.in_message = False
                self.messages += 1
                self._reply(self.ack, self.expected - 1)
                self.deliver(self.chunk, self.value, self.sent_ns)
        elif diff < 0x800000:  # ahead: a gap, NAK once per expected PSN
            self.dropped_out_of_order += 1
            if self.nak_sent_for != self.expected:
                self.nak_sent_for = self.expected
                self._reply(self.nak, self.expected)
        elif opcode in wire.MESSAGE_END:  # a duplicate message end: ACK again
            self._reply(self.ack, self.expected - 1)

    def _reply(self, template: bytearray, psn: int) -> None:
        template[PSN_AT] = (psn & wire.PSN_MASK).to_bytes(3, "big")
        self.icrc.put(template)
        try:
            self.sock.sendto(template, self.dest)
        except BlockingIOError:
            pass  # lost like any packet: the sender's timer recovers
