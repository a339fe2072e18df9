"""An event's rate change, encoded ahead of time (:func:`labkit.kernel.tc.rate_requests`):
one request per HTB class of the port's layout, and the same from a thread whose asyncio
loop runs (a notebook kernel's, where pyroute2's synchronous API cannot run)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from labkit.kernel import tc

CLASSES = {"fifo": 2, "lanes": 4, "weights": 4, "held": 3}  # the parent and each leaf
RTM_NEWTCLASS = 40


@pytest.mark.parametrize("layout", list(CLASSES))
def test_each_class_of_the_port_gets_one_request(layout):
    requests = tc.rate_requests(7, tc.PortShape("p", 100, 256 << 10, 1500, layout), 35)
    assert len(requests) == CLASSES[layout]
    for request in requests:
        length, kind = struct.unpack_from("=IH", request)
        index, = struct.unpack_from("=i", request, 20)  # tcmsg's ifindex
        assert (length, kind, index) == (len(request), RTM_NEWTCLASS, 7)


def test_the_requests_are_the_same_in_a_running_asyncio_loop():
    port = tc.PortShape("p", 100, 256 << 10, 1500, "lanes")

    async def in_a_notebook():
        return tc.rate_requests(7, port, 35)

    def content(requests: list[bytearray]) -> list[bytes]:  # less the sequence and port id
        return [bytes(r[:8] + r[16:]) for r in requests]

    outside = content(tc.rate_requests(7, port, 35))
    assert content(asyncio.run(in_a_notebook())) == outside
