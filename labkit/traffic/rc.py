"""RoCE reliable connection (RC) semantics for one queue pair, over UDP sockets.

:class:`Sender` segments messages into RDMA WRITE FIRST/MIDDLE/LAST (or ONLY)
packets with consecutive PSNs, sends them in batches, and goes back N on a NAK or a
retransmission timeout (RFC 6298-style RTO). Each message carries its chunk id in the
RETH virtual address and the chunk's value (see :mod:`labkit.model.traffic.schedules`)
after the stamp in its first packet. The receiver (:class:`labkit.traffic.hotpath.Rx`)
accepts only the next expected PSN, ACKs each message end, NAKs the first packet of a
gap once, and reports whole messages. With DCQCN on, a receiver answers packets that
arrive marked CE with a CNP (at most one per 2 ms and queue pair) and the sender's
:class:`Dcqcn` paces it below line rate.

Every data packet carries a stamp for one-way latency (``bpf/latency.bpf.c``) and
a valid ICRC. The per-packet work (building, stamping, the ICRC, receiving) is C
(:mod:`labkit.traffic.hotpath`); what takes a message, an ACK or a timer is here.
Standard library only.
"""

from __future__ import annotations

from labkit.model.traffic import wire
from labkit.traffic.hotpath import MIN_MESSAGE, Tx

# An ACK's round trip is mostly the sender's own NIC queue (~12 ms at 100 Mbit/s), and a
# busy 2-core machine can hold a rank off its socket for ~10 ms more: a 20 ms floor fired
# on ACKs that were only late (1-3 spurious timeouts per run, each resending a message).
MIN_RTO_NS = 50_000_000
MAX_RTO_NS = 1_000_000_000
# On a lossless fabric a packet is late, never lost, and link-level pauses add their
# queues' drain times to a round trip: there, the timer waits this long at least (an RDMA
# fabric with PFC is run with long transport timeouts for the same reason).
LOSSLESS_MIN_RTO_NS = MAX_RTO_NS
DQPN_AT = slice(wire.DQPN, wire.DQPN + 3)



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
    """The send side of a queue pair towards one peer: what ``out`` has queued, sent and
    had acknowledged."""

    def __init__(self, out: Tx, payload_bytes: int, dcqcn: Dcqcn | None = None,
                 min_rto_ns: int = MIN_RTO_NS):
        self.out = out
        self.dcqcn = dcqcn
        self.min_rto = min_rto_ns
        self.cnps = 0
        self.mtu = payload_bytes
        self.total = 0  # packets queued
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
        """Queue one message of ``nbytes`` (at least MIN_MESSAGE) as RDMA WRITE packets."""
        self.total += self.out.enqueue(max(nbytes, MIN_MESSAGE), chunk, value)
        self.ends.add(self.total)

    def pending(self) -> bool:
        return self.next < self.total

    def idle(self) -> bool:
        return self.base >= self.total

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
        first = self.next
        stop = min(self.total, first + self.out.batch)
        if self.dcqcn:
            stop = min(stop, first + self.dcqcn.allowed(now, self.mtu))
            if stop == first:
                return True  # paced: not the socket's fault
        psn = first + self.out.send(first, stop)
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
