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
