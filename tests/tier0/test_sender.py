"""The sendmmsg batcher, over loopback."""

import socket

from labkit.traffic.sender import BatchSender


def test_batches_arrive_whole_and_in_order():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out = BatchSender(tx, rx.getsockname(), batch=8, slot_bytes=256)
    template = bytes(range(100))
    for n in range(40):
        slot = out.slot(template[: 50 + n % 7])  # datagrams of different lengths
        slot[0:2] = n.to_bytes(2, "big")
        if out.full():
            assert out.flush(blocking=True) == 8
    assert out.flush(blocking=True) == 0  # 40 is a multiple of 8: nothing left
    got = [rx.recv(512) for _ in range(40)]
    assert [int.from_bytes(g[:2], "big") for g in got] == list(range(40))
    assert [len(g) for g in got] == [50 + n % 7 for n in range(40)]
    assert all(g[2:] == template[2:len(g)] for g in got)


def test_runs_of_equal_packets_go_as_gso_sends_and_arrive_as_the_same_datagrams():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out = BatchSender(tx, rx.getsockname(), batch=16, slot_bytes=1200, gso=4)
    # a message as the RC sender lays it out: a longer first packet, full middles, a short
    # last one; then a packet alone
    sizes = [1116, 1100, 1100, 1100, 1100, 1100, 1100, 700, 1116]
    for n, size in enumerate(sizes):
        out.slot(bytes([n]) * size)
    # runs: [1116, 1100 (shorter: ends it)], [1100 x4], [1100, 700], [1116]
    assert out._sends == [2, 4, 2, 1]
    assert out.flush(blocking=True) == len(sizes)
    got = [rx.recv(2048) for _ in sizes]
    assert [len(g) for g in got] == sizes
    assert [g[0] for g in got] == list(range(len(sizes)))
    assert all(g == bytes([g[0]]) * len(g) for g in got)
    out.slot(bytes(1100))  # the buffer is reused from its start after a flush
    assert out._sends == [1] and out.flush(blocking=True) == 1
    assert len(rx.recv(2048)) == 1100


def test_a_run_never_outgrows_one_udp_datagram():
    """16 RoCE packets of 4112 bytes would be 65792: the run stops at 15."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out = BatchSender(tx, rx.getsockname(), batch=16, slot_bytes=4112, gso=16)
    for n in range(16):
        out.slot(bytes([n]) * 4112)
    assert out._sends == [15, 1]
    assert out.flush(blocking=True) == 16
    assert [rx.recv(8192)[0] for _ in range(16)] == list(range(16))
