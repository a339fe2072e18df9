"""The RC transport of the collective agents, driven packet by packet over loopback.

A queue pair's sender (``rc.Sender`` over ``hotpath.Tx``) sends to a plain socket that
records every packet; a receiver (``hotpath.Rx``) is fed chosen packets from a peer
socket at 127.0.0.2, which records its replies. Real sockets and the real C path; the
fabric is exercised end to end in tier 2.
"""

import select
import socket
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from labkit.model import abi
from labkit.model.traffic import roce, wire
from labkit.traffic import hotpath, rc

PEER_IP = "127.0.0.2"
SOL_UDP, UDP_GRO = 17, 104


def bound(ip: str = "127.0.0.1", port: int = 0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((ip, port))
    s.settimeout(2)
    return s


def waiting(sock: socket.socket) -> list[bytes]:
    """Every datagram that has arrived at ``sock``."""
    out = []
    while select.select([sock], [], [], 0.05)[0]:
        out.append(sock.recv(65536))
    return out


class Link:
    """A queue pair's sender from 127.0.0.1 to a recording socket; ``sent`` is what it
    received so far."""

    def __init__(self, payload=1024, gso=1, batch=32, sndbuf=None):
        self.sink, self.src = bound(), bound()
        if sndbuf:
            self.src.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        templates = {k: rc.with_dqpn(v, 0x107)
                     for k, v in roce.data_templates(0, payload).items()}
        self.out = hotpath.Tx(self.src, "127.0.0.1", self.src.getsockname()[1],
                              self.sink.getsockname(), templates, payload, abi.seq_base(3),
                              batch=batch, gso=gso)
        self.sender = rc.Sender(self.out, payload)
        self._sent: list[bytes] = []

    @property
    def sent(self) -> list[bytes]:
        self._sent += waiting(self.sink)
        return self._sent


class Far:
    """A receiver at 127.0.0.1 for a queue pair whose peer is a socket at PEER_IP."""

    def __init__(self, cnp=False):
        self.sock = bound()
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        self.peer = bound(PEER_IP)
        self.rx = hotpath.Rx(self.sock, "127.0.0.1")
        self.rx.add_peer(PEER_IP, self.peer.getsockname()[1],
                         rc.with_dqpn(roce.ack_template(0), 0x106),
                         rc.with_dqpn(roce.ack_template(0, wire.SYNDROME_NAK_PSN), 0x106),
                         rc.with_dqpn(roce.cnp_template(0), 0x106) if cnp else None)
        self.delivered: list[tuple[int, int]] = []

    def feed(self, pkt: bytes, ce: bool = False) -> list[tuple]:
        """``pkt`` from the peer, marked CE or not: the events it caused."""
        self.peer.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, wire.CE if ce else 0)
        self.peer.sendto(pkt, self.sock.getsockname())
        select.select([self.sock], [], [], 2)
        events = self.rx.drain()
        self.delivered += [(a, b) for kind, _, a, b, _ in events if kind == hotpath.DELIVER]
        return events

    def replies(self) -> list[bytes]:
        return waiting(self.peer)


def drain(link: Link, now=1):
    while link.sender.pending():
        link.sender.send_some(now=now)


def psn(pkt: bytes) -> int:
    return int.from_bytes(pkt[wire.PSN:wire.PSN + 3], "big")


def test_message_segmentation_and_psns():
    link = Link()
    link.sender.enqueue(2500, chunk=5, value=77)  # FIRST 1024, MIDDLE 1024, LAST 452
    link.sender.enqueue(100)  # ONLY 100
    drain(link)
    sent = link.sent
    assert [p[wire.OPCODE] for p in sent] == [wire.RDMA_WRITE_FIRST, wire.RDMA_WRITE_MIDDLE,
                                               wire.RDMA_WRITE_LAST, wire.RDMA_WRITE_ONLY]
    assert [psn(p) for p in sent] == [0, 1, 2, 3]
    assert all(p[wire.DQPN:wire.DQPN + 3] == (0x107).to_bytes(3, "big") for p in sent)
    data = [len(p) - wire.BTH_LEN - wire.ICRC_LEN for p in sent]
    assert data == [1024 + wire.RETH_LEN, 1024, 452, 100 + wire.RETH_LEN]
    first = roce.decode(sent[0])[roce.RETH]
    assert (first.va, first.dlen) == (5, 2500)
    value_at = wire.DATA_OFFSET[wire.RDMA_WRITE_FIRST] + rc.MIN_MESSAGE - 8
    assert int.from_bytes(sent[0][value_at:value_at + 8], "little") == 77


def test_every_data_packet_carries_a_fresh_stamp():
    link = Link()
    link.sender.enqueue(2500)
    link.sender.enqueue(10)  # shorter than a stamp: padded to the minimum message
    before = time.monotonic_ns()
    drain(link)
    for i, pkt in enumerate(link.sent):
        at = wire.DATA_OFFSET[pkt[wire.OPCODE]]
        magic, seq, t_ns = abi.STAMP.unpack_from(pkt, at)
        assert magic == abi.STAMP_MAGIC and seq == abi.seq_base(3) | i
        assert before <= t_ns <= time.monotonic_ns()


def test_packets_and_replies_carry_a_valid_icrc():
    def icrc_ok(pkt: bytes, sport: int, dport: int, src="127.0.0.1", dst="127.0.0.1"):
        # scapy computes the ICRC over the packet as the kernel sent it
        ip = IP(src=src, dst=dst, id=0, flags="DF", ttl=61, tos=0x68)
        rebuilt = ip / UDP(sport=sport, dport=dport) / BTH(pkt)
        rebuilt[BTH].icrc = None
        return bytes(rebuilt)[-4:] == pkt[-4:]

    link = Link()
    link.sender.enqueue(2500)
    drain(link)
    sport, dport = link.src.getsockname()[1], link.sink.getsockname()[1]
    assert all(icrc_ok(p, sport, dport) for p in link.sent)
    far = Far()
    far.feed(link.sent[0])
    far.feed(link.sent[2])  # a gap: NAK
    (nak,) = far.replies()
    assert icrc_ok(nak, far.sock.getsockname()[1], far.peer.getsockname()[1], dst=PEER_IP)


def test_receiver_acks_messages_naks_a_gap_once_and_delivers_chunk_and_value():
    far, link = Far(), Link()
    link.sender.enqueue(4096, chunk=9, value=123456789)  # 4 packets
    drain(link)
    first, second, third, last = link.sent
    far.feed(first)
    far.feed(third)  # second lost: NAK for PSN 1
    far.feed(last)  # still missing: no second NAK
    assert [(p[wire.OPCODE], p[wire.BTH_LEN], psn(p)) for p in far.replies()] == [
        (wire.ACKNOWLEDGE, wire.SYNDROME_NAK_PSN, 1)]
    assert far.delivered == []
    for p in (second, third, last):  # go-back-N resend arrives in order
        far.feed(p)
    assert far.delivered == [(9, 123456789)]
    assert far.rx.stats(0) == {"messages": 1, "bytes": sum(map(len, link.sent)),
                               "out_of_order": 2, "cnps": 0}  # accepted packets only
    (ack,) = far.replies()
    assert (ack[wire.BTH_LEN], psn(ack)) == (wire.SYNDROME_ACK, 3)
    assert BTH(ack).dqpn == 0x106


def test_a_sender_reads_acks_naks_and_cnps_from_its_receive_side():
    far = Far()
    for syndrome, at in ((wire.SYNDROME_ACK, 5), (wire.SYNDROME_NAK_PSN, 7)):
        reply = rc.with_dqpn(roce.ack_template(0, syndrome), 0x107)
        reply[wire.PSN:wire.PSN + 3] = at.to_bytes(3, "big")
        assert far.feed(bytes(reply)) == [(hotpath.ACK, 0, at, syndrome, 0)]
    assert far.feed(roce.cnp_template(0x107)) == [(hotpath.CNP, 0, 0, 0, 0)]
    far.peer.sendto(b"\x11" * 8, far.sock.getsockname())  # too short to be RoCE: ignored
    stranger = bound("127.0.0.3")  # no queue pair from there: ignored
    stranger.sendto(roce.cnp_template(0x107), far.sock.getsockname())
    assert far.feed(roce.ack_template(0)[:10]) == []


def test_sender_goes_back_n_on_nak_and_counts_retransmits():
    link = Link()
    s = link.sender
    s.enqueue(8192)  # PSN 0..7
    drain(link)
    s.on_ack(3, wire.SYNDROME_NAK_PSN, now=2)
    assert (s.base, s.next) == (3, 3)
    drain(link, now=3)
    assert [psn(p) for p in link.sent[8:]] == [3, 4, 5, 6, 7]
    assert s.retransmits == 5 and s.naks == 1
    s.on_ack(7, wire.SYNDROME_ACK, now=4)
    assert s.idle()


def test_sender_times_out_when_the_tail_is_lost():
    link = Link()
    s = link.sender
    s.enqueue(2048)
    drain(link, now=1_000)
    deadline = s.deadline()
    assert deadline is not None and deadline > 1_000
    s.on_timeout(now=deadline)
    assert s.next == 0 and s.timeouts == 1
    assert s.deadline() is None  # packets to resend: no timer until they leave
    drain(link, now=deadline + 1)
    assert s.retransmits == 2


def test_duplicate_message_end_is_acked_again():
    far, link = Far(), Link()
    link.sender.enqueue(100)
    link.sender.send_some(now=1)
    (only,) = link.sent
    far.feed(only)
    far.feed(only)  # the ACK was lost and the sender resent
    assert [psn(p) for p in far.replies()] == [0, 0] and len(far.delivered) == 1


MS = 1_000_000


def test_a_packet_marked_ce_gets_one_cnp_per_gap():
    for _ in range(50):  # until the two marks arrive within 1.5 ms (a busy machine may
        far, link = Far(cnp=True), Link()  # preempt the test between them)
        link.sender.enqueue(3000)
        drain(link)
        sent = link.sent
        began = time.monotonic_ns()
        for pkt in sent[:2]:
            far.feed(pkt, ce=True)  # two marked, back to back
        if time.monotonic_ns() - began < 1.5 * MS:
            break
    else:
        pytest.fail("no two packets were fed within 1.5 ms in 50 tries")
    for pkt in sent[2:]:
        far.feed(pkt)
    cnps = [p for p in far.replies() if p[wire.OPCODE] == wire.CNP]
    assert len(cnps) == 1 and far.rx.stats(0)["cnps"] == 1  # the second came within 2 ms
    assert BTH(cnps[0]).dqpn == 0x106
    unmarked = Far()  # DCQCN off: a mark is not answered
    unmarked.feed(sent[0], ce=True)
    assert unmarked.replies() == []


def test_gso_runs_leave_as_the_packets_the_sender_built():
    """A message's packets go as runs of up to 4; a short packet joins and ends its run."""
    link = Link(payload=1024, gso=4)
    link.sender.enqueue(7 * 1024 + 500)  # 8 packets
    link.sender.enqueue(9 * 1024)  # 9 more
    drain(link)
    assert [psn(p) for p in link.sent] == list(range(17))
    lengths = [len(p) - wire.BTH_LEN - wire.ICRC_LEN for p in link.sent]
    assert lengths == [1040] + [1024] * 6 + [500] + [1040] + [1024] * 8


def test_a_run_read_whole_is_split_into_its_packets():
    far = Far()
    far.sock.setsockopt(SOL_UDP, UDP_GRO, 1)  # as the ranks read: runs arrive whole
    templates = {k: rc.with_dqpn(v, 0x106) for k, v in roce.data_templates(0, 1024).items()}
    out = hotpath.Tx(far.peer, PEER_IP, far.peer.getsockname()[1], far.sock.getsockname(),
                     templates, 1024, abi.seq_base(1), gso=4)
    s = rc.Sender(out, 1024)
    s.enqueue(7 * 1024 + 500, chunk=1, value=10)
    s.enqueue(9 * 1024, chunk=2, value=20)
    while s.pending():
        s.send_some(now=1)
    deadline = time.monotonic() + 2
    while len(far.delivered) < 2 and time.monotonic() < deadline:
        select.select([far.sock], [], [], 0.1)
        far.delivered += [(a, b) for kind, _, a, b, _ in far.rx.drain()
                          if kind == hotpath.DELIVER]
    assert far.delivered == [(1, 10), (2, 20)]
    assert far.rx.stats(0)["out_of_order"] == 0 and far.rx.stats(0)["messages"] == 2


def test_a_run_never_outgrows_one_udp_datagram():
    """16 RoCE packets of 4112 bytes would be 65792 bytes: the run stops at 15."""
    link = Link(payload=4096, gso=16, batch=16)
    link.sender.enqueue(16 * 4096)
    assert link.sender.send_some(now=1)
    assert [psn(p) for p in link.sent] == list(range(16))


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
    link = Link(payload=1000)
    s = link.sender
    s.dcqcn = rc.Dcqcn(1e6)  # 1 MB/s line
    s.dcqcn.on_cnp(0)  # paced at 500 kB/s from now; at most two packets at once
    s.enqueue(10_000)
    assert s.send_some(now=1) and not link.sent  # paced, not blocked by the socket
    assert not s.ready(now=1)  # ... so the agent's loop waits instead of spinning
    assert s.paced_until(1) == 2 * MS + 1  # 1000 bytes at 500 kB/s
    s.send_some(now=4 * MS)  # long enough for three, but the bucket holds two
    assert len(link.sent) == 2 and s.paced_until(4 * MS) == 6 * MS + 1


def test_on_a_lossless_fabric_the_timer_waits_at_least_a_second():
    link = Link()
    s = rc.Sender(link.out, 1024, min_rto_ns=rc.LOSSLESS_MIN_RTO_NS)
    s._rtt_sample(1_000_000)  # a 1 ms round trip: a lossy fabric's timer would say 50 ms
    assert s.rto == rc.LOSSLESS_MIN_RTO_NS
    s = Link().sender
    s._rtt_sample(1_000_000)
    assert s.rto == rc.MIN_RTO_NS


def test_a_message_as_long_as_the_reth_allows_counts_its_packets():
    link = Link(payload=1024)
    assert link.out.enqueue(0xFFFFFFFF, 0, 0) == 1 << 22  # 4 GiB - 1 in 1 KiB packets
    assert link.out.send((1 << 22) - 1, 1 << 22, blocking=True) == 1
    (last,) = link.sent
    assert last[wire.OPCODE] == wire.RDMA_WRITE_LAST and psn(last) == (1 << 22) - 1
    assert len(last) == wire.BTH_LEN + 1023 + wire.ICRC_LEN
