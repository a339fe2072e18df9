"""The RC transport of the collective agents, driven packet by packet.

Recording stand-ins for the UDP socket (receiver) and the sendmmsg batcher
(sender) let these tests see every packet the protocol logic emits; the real
sockets are exercised end to end in tier 2.
"""

import time

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from labkit import abi
from labkit.traffic import rc, roce, wire


class Wire:
    """Records datagrams instead of sending them; can refuse (a full socket). Speaks
    both the socket's ``sendto`` and the BatchSender's ``slot``/``flush``."""

    batch = 32

    def __init__(self, room: int = 10**9):
        self.sent: list[bytes] = []
        self.room = room
        self.slots: list[bytearray] = []

    def sendto(self, buf, dest):
        if len(self.sent) >= self.room:
            raise BlockingIOError
        self.sent.append(bytes(buf))

    def slot(self, data):
        self.slots.append(bytearray(data))
        return memoryview(self.slots[-1])

    def flush(self):
        took = self.slots[:max(0, self.room - len(self.sent))]
        self.sent += [bytes(s) for s in took]
        self.slots = []
        return len(took)


def sender(out, payload=1024):
    templates = {k: rc.with_dqpn(v, 0x107) for k, v in roce.data_templates(0, payload).items()}
    return rc.Sender(out, wire.Icrc("10.0.1.2", "10.0.2.2", 50000), templates, payload,
                     abi.seq_base(3))


def receiver(out, delivered=None):
    return rc.Receiver(out, ("10.0.8.2", 4791), wire.Icrc("10.0.1.2", "10.0.8.2", 4791),
                       rc.with_dqpn(roce.ack_template(0), 0x106),
                       rc.with_dqpn(roce.ack_template(0, wire.SYNDROME_NAK_PSN), 0x106),
                       deliver=lambda c, v, sent: delivered.append((c, v))
                       if delivered is not None else None)


def psn(pkt: bytes) -> int:
    return int.from_bytes(pkt[wire.PSN:wire.PSN + 3], "big")


def drain(s, now=1):
    while s.pending():
        s.send_some(now=now)


def test_message_segmentation_and_psns():
    out = Wire()
    s = sender(out)
    s.enqueue(2500, chunk=5, value=77)  # FIRST 1024, MIDDLE 1024, LAST 452
    s.enqueue(100)  # ONLY 100
    drain(s)
    assert [p[wire.OPCODE] for p in out.sent] == [wire.RDMA_WRITE_FIRST, wire.RDMA_WRITE_MIDDLE,
                                                   wire.RDMA_WRITE_LAST, wire.RDMA_WRITE_ONLY]
    assert [psn(p) for p in out.sent] == [0, 1, 2, 3]
    assert all(p[wire.DQPN:wire.DQPN + 3] == (0x107).to_bytes(3, "big") for p in out.sent)
    data = [len(p) - wire.BTH_LEN - wire.ICRC_LEN for p in out.sent]
    assert data == [1024 + wire.RETH_LEN, 1024, 452, 100 + wire.RETH_LEN]
    first = roce.decode(out.sent[0])[roce.RETH]
    assert (first.va, first.dlen) == (5, 2500)


def test_every_data_packet_carries_a_fresh_stamp():
    out = Wire()
    s = sender(out)
    s.enqueue(2500)
    s.enqueue(10)  # shorter than a stamp: padded to the minimum message
    before = time.monotonic_ns()
    drain(s)
    for i, pkt in enumerate(out.sent):
        at = wire.DATA_OFFSET[pkt[wire.OPCODE]]
        magic, seq, t_ns = abi.STAMP.unpack_from(pkt, at)
        assert magic == abi.STAMP_MAGIC and seq == abi.seq_base(3) | i
        assert before <= t_ns <= time.monotonic_ns()


def test_packets_carry_a_valid_icrc():
    out = Wire()
    s = sender(out)
    s.enqueue(2500)
    drain(s)
    for pkt in out.sent:  # scapy computes the ICRC over the packet as the kernel sends it
        ip = IP(src="10.0.1.2", dst="10.0.2.2", id=0, flags="DF", ttl=61, tos=0x68)
        rebuilt = IP(bytes(ip / UDP(sport=50000, dport=4791) / BTH(pkt)))
        rebuilt[BTH].icrc = None
        assert bytes(rebuilt)[-4:] == pkt[-4:]


def test_receiver_acks_messages_naks_a_gap_once_and_delivers_chunk_and_value():
    out, delivered = Wire(), []
    r = receiver(out, delivered)
    tx = Wire()
    s = sender(tx)
    s.enqueue(4096, chunk=9, value=123456789)  # 4 packets
    drain(s)
    first, second, third, last = (memoryview(p) for p in tx.sent)
    r.on_data(first, len(first))
    r.on_data(third, len(third))  # second lost: NAK for PSN 1
    r.on_data(last, len(last))  # still missing: no second NAK
    assert [(p[wire.OPCODE], p[wire.BTH_LEN], psn(p)) for p in out.sent] == [
        (wire.ACKNOWLEDGE, wire.SYNDROME_NAK_PSN, 1)]
    assert delivered == []
    for p in (second, third, last):  # go-back-N resend arrives in order
        r.on_data(p, len(p))
    assert r.messages == 1 and r.expected == 4 and delivered == [(9, 123456789)]
    assert (out.sent[-1][wire.BTH_LEN], psn(out.sent[-1])) == (wire.SYNDROME_ACK, 3)


def test_sender_goes_back_n_on_nak_and_counts_retransmits():
    tx = Wire()
    s = sender(tx)
    s.enqueue(8192)  # PSN 0..7
    drain(s)
    s.on_ack(3, wire.SYNDROME_NAK_PSN, now=2)
    assert (s.base, s.next) == (3, 3)
    drain(s, now=3)
    assert [psn(p) for p in tx.sent[8:]] == [3, 4, 5, 6, 7]
    assert s.retransmits == 5 and s.naks == 1
    s.on_ack(7, wire.SYNDROME_ACK, now=4)
    assert s.idle()


def test_sender_times_out_when_the_tail_is_lost():
    tx = Wire()
    s = sender(tx)
    s.enqueue(2048)
    drain(s, now=1_000)
    deadline = s.deadline()
    assert deadline is not None and deadline > 1_000
    s.on_timeout(now=deadline)
    assert s.next == 0 and s.timeouts == 1
    assert s.deadline() is None  # packets to resend: no timer until they leave
    drain(s, now=deadline + 1)
    assert s.retransmits == 2


def test_blocked_socket_resumes_where_it_stopped():
    tx = Wire(room=3)
    s = sender(tx)
    s.enqueue(8192)
    assert s.send_some(now=1) is False and s.next == 3
    tx.room = 100
    drain(s, now=2)
    assert [psn(p) for p in tx.sent] == list(range(8)) and s.retransmits == 0


def test_duplicate_message_end_is_acked_again():
    out, delivered = Wire(), []
    r = receiver(out, delivered)
    tx = Wire()
    s = sender(tx)
    s.enqueue(100)
    s.send_some(now=1)
    only = memoryview(tx.sent[0])
    r.on_data(only, len(only))
    r.on_data(only, len(only))  # the ACK was lost and the sender resent
    assert [psn(p) for p in out.sent] == [0, 0] and r.messages == 1 and len(delivered) == 1


MS = 1_000_000


def test_a_packet_marked_ce_gets_one_cnp_per_gap():
    out = Wire()
    r = rc.Receiver(out, ("10.0.8.2", 4791), wire.Icrc("10.0.1.2", "10.0.8.2", 4791),
                    rc.with_dqpn(roce.ack_template(0), 0x106),
                    rc.with_dqpn(roce.ack_template(0, wire.SYNDROME_NAK_PSN), 0x106),
                    deliver=lambda *_: None, cnp=rc.with_dqpn(roce.cnp_template(0), 0x106))
    s = sender(Wire())
    s.enqueue(3000)
    drain(s)
    for i, pkt in enumerate(s.out.sent):
        r.on_data(memoryview(pkt), len(pkt), ce=i < 2)  # two marked, back to back
    cnps = [p for p in out.sent if p[wire.OPCODE] == wire.CNP]
    assert len(cnps) == 1 and r.cnps == 1  # the second came within CNP_GAP_NS
    assert BTH(cnps[0]).dqpn == 0x106


def test_dcqcn_cuts_on_a_cnp_then_recovers_to_line_rate():
    line = 12.5e6  # 100 Mbit/s in bytes/s
    d = rc.Dcqcn(line)
    assert not d.paced and d.allowed(0, 9000) > 1000
    d.on_cnp(0)
    assert d.rate == line / 2 and d.target == line  # alpha starts at 1
    d.on_cnp(1 * MS)  # the same congestion, still being reported: no second cut
    assert d.rate == line / 2
    d.allowed(rc.Dcqcn.TIMER_NS, 9000)  # one round of fast recovery: halfway back
    assert d.rate == 0.75 * line
    d.on_cnp(rc.Dcqcn.TIMER_NS + 1)  # alpha has grown a little less than it decayed
    assert 0.375 * line < d.rate < 0.75 * line and d.target == 0.75 * line
    d.allowed(10**9, 9000)  # a second later: target grown back by additive increase
    assert not d.paced and d.rate == line


def test_a_paced_sender_sends_at_its_rate_and_says_when_it_may_again():
    out = Wire()
    s = sender(out, payload=1000)
    s.dcqcn = rc.Dcqcn(1e6)  # 1 MB/s line
    s.dcqcn.on_cnp(0)  # paced at 500 kB/s from now; at most two packets at once
    s.enqueue(10_000)
    assert s.send_some(now=1) and not out.sent  # paced, not blocked by the socket
    assert not s.ready(now=1)  # ... so the agent's loop waits instead of spinning
    assert s.paced_until(1) == 2 * MS + 1  # 1000 bytes at 500 kB/s
    s.send_some(now=4 * MS)  # long enough for three, but the bucket holds two
    assert len(out.sent) == 2 and s.paced_until(4 * MS) == 6 * MS + 1


def test_on_a_lossless_fabric_the_timer_waits_at_least_a_second():
    templates = {k: rc.with_dqpn(v, 0x107) for k, v in roce.data_templates(0, 1024).items()}
    s = rc.Sender(Wire(), wire.Icrc("10.0.1.2", "10.0.2.2", 50000), templates, 1024,
                  abi.seq_base(3), min_rto_ns=rc.LOSSLESS_MIN_RTO_NS)
    s._rtt_sample(1_000_000)  # a 1 ms round trip: a lossy fabric's timer would say 50 ms
    assert s.rto == rc.LOSSLESS_MIN_RTO_NS
    s = sender(Wire())
    s._rtt_sample(1_000_000)
    assert s.rto == rc.MIN_RTO_NS
