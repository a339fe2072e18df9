"""Every qdisc, class and handle labkit puts on an interface, via pyroute2 (netlink).

Each shaped port gets the same HTB skeleton: root ``1:``, a class ``1:1`` at the
link rate, and leaf classes under it, each with a byte-limited FIFO (bfifo)
holding the port's buffer:

* ``fifo`` ports: one leaf ``1:10`` that every packet shares;
* ``held`` ports (a controlled host's NIC): ``1:10`` for vip at the whole link, strict,
  and ``1:20`` for everything else. The host's valve (``bpf/valve.bpf.c``) sends vip
  to ``1:10`` and gates the rest, whoever sent it, before it reaches ``1:20`` (the
  default class), whose ceiling follows the gate (:func:`set_held_ceil`) so that what
  the gate lets through leaves at its rate from a queue TCP can clock itself by.
* ``lanes`` ports: ``1:10`` vip, ``1:20`` normal, ``1:30`` low. vip's own rate is
  the whole link, the others get a token rate and may borrow up to the link
  (``ceil``): HTB serves a class within its rate before any borrower, so vip
  has strict priority and idle capacity still goes to the lower lanes.
  Unclassified packets land in normal (the HTB default).
* ``weights`` ports (``job-weights``, several jobs): the lanes' classes, but vip and
  normal at the same priority, each with half the link less low's token rate as its own
  and the whole link as ceiling: two jobs, one in each, share a congested port by those
  rates (HTB lends what one leaves idle to the other, in equal quanta), and neither
  starves; low borrows what they leave.

A port of a lossless fabric (:mod:`labkit.model.lossless`) holds each leaf's bfifo inside a
TBF, so that the leaf can be paused and resumed on its own (:mod:`labkit.kernel.pauser`, with
:func:`tbf_request`).
Resumed, the TBF's rate is :data:`RESUMED_RATE_FACTOR` times the link and its burst
holds a GSO packet, so HTB alone shapes the port.

The lane classifier (see :mod:`labkit.kernel.lanes`) selects a class by setting
``skb->priority`` to its id. Functions here act on the namespace of the calling
thread; run them through :meth:`labkit.kernel.netns.Netns.run`.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass

from pyroute2 import IPBatch, IPRoute
from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_GETTCLASS, RTM_NEWTCLASS, tcmsg

from labkit.kernel.netns import in_thread
from labkit.model.lossless import paused_burst

ROOT = 0x10000  # 1:
PARENT = 0x10001  # 1:1
LANE_CLASS = {"vip": 0x10010, "normal": 0x10020, "low": 0x10030}
FIFO_CLASS = 0x10010
HELD_CLASS = 0x10020  # a held port's class for every non-vip packet
# tc filter priorities on a port's clsact hooks (lower runs first). Egress: a lossy link's
# dropper, a rank host's job marker (it writes the DSCP the valve then reads), a host's
# valve, the step marker (CE past K), then the lane classifier. Ingress: the latency probe
# alone (0: the kernel picks).
PRIO_DROPPER, PRIO_MARK, PRIO_VALVE, PRIO_CLASSIFIER, PRIO_LATENCY = 1, 3, 5, 10, 0
PRIO_ECN_MARK = 7
TOKEN_RATE_FRACTION = 0.01  # the lower lanes' guaranteed share of the link
QUANTUM_BYTES = 65536  # >= one GSO packet, so HTB's round-robin never starves a class

# pyroute2 knows pfifo but not bfifo; both take the same option struct (tc_fifo_qopt).
tcmsg.plugins.setdefault("bfifo", tcmsg.plugins["pfifo"])


def classid_str(classid: int) -> str:
    return f"{classid >> 16:x}:{classid & 0xFFFF:x}"


def lane_of_class(classid: int, layout: str) -> str:
    if layout == "fifo":
        return "all"
    return {v: k for k, v in LANE_CLASS.items()}.get(classid, "?")


@dataclass(frozen=True)
class PortShape:
    ifname: str
    rate_mbps: float
    buffer_bytes: int
    mtu: int
    layout: str  # "fifo", "lanes" or "held"
    pausable: bool = False  # each leaf a TBF the pauser can stop (lossless)


def bytes_per_s(rate_mbps: float) -> int:
    """A rate in Mbit/s as whole bytes per second, as tc takes it."""
    return int(rate_mbps * 1e6 / 8)


def _token(link: int) -> int:
    """The guaranteed rate of a class that borrows the rest of the link (bytes/s)."""
    return max(int(link * TOKEN_RATE_FRACTION), 1000)


def burst_bytes(ceil: int, mtu: int) -> int:
    """HTB's burst (and cburst) for a class whose ceiling is ``ceil`` bytes/s: one jiffy of
    tokens at the ceiling plus a packet, as tc computes them. A class that was idle may
    send this much back to back before its rate holds it."""
    return ceil // 1000 + mtu


def _class_params(rate: int, ceil: int, mtu: int) -> dict:
    """HTB's rate and ceil, both with :func:`burst_bytes` of the ceiling."""
    burst = burst_bytes(ceil, mtu)
    return {"rate": rate, "ceil": ceil, "burst": burst, "cburst": burst,
            "quantum": QUANTUM_BYTES, "mtu": mtu}


def shape(ipr: IPRoute, port: PortShape) -> int:
    """Install the HTB skeleton on ``port`` (replacing whatever root qdisc it had)."""
    (index,) = ipr.link_lookup(ifname=port.ifname)
    ipr.link("set", index=index, mtu=port.mtu)
    rate = bytes_per_s(port.rate_mbps)
    default = {"fifo": FIFO_CLASS, "lanes": LANE_CLASS["normal"], "held": HELD_CLASS,
               "weights": LANE_CLASS["normal"]}[port.layout] & 0xFFFF
    ipr.tc("replace", "htb", index, ROOT, default=default)
    ipr.tc("add-class", "htb", index, PARENT, parent=ROOT, **_class_params(rate, rate, port.mtu))
    for classid, lane_rate, prio in _leaves(port.layout, rate):
        ipr.tc("add-class", "htb", index, classid, parent=PARENT, prio=prio,
               **_class_params(lane_rate, rate, port.mtu))
        if port.pausable:
            with Rtnl() as rtnl:
                rtnl.call(tbf_request(index, classid, port, paused=False, create=True))
        else:
            ipr.tc("add", "bfifo", index, leaf_handle(classid), parent=classid,
                   limit=port.buffer_bytes)
    return index


def rate_requests(index: int, port: PortShape, rate_mbps: float) -> list[bytearray]:
    """The rtnetlink requests that run ``port`` (ifindex ``index``) at ``rate_mbps`` (a
    degraded link, or its own rate again): its parent class and each leaf's ceiling move,
    a lane's guaranteed rate with them as :func:`shape` set it; every class keeps its
    queue. Encoded ahead of time by pyroute2 (``IPBatch``), to be sent through a
    :class:`Rtnl` in the port's namespace when the change is due: then it takes effect
    within about a millisecond (0.2-1.6 ms in a run), not after the milliseconds of Python
    that encoding each class's rate tables costs (7-19 ms for a link's two ports in a run
    here, 37 in CI's)."""
    rate = bytes_per_s(rate_mbps)
    leaves = [(c, PARENT, own, {"prio": prio}) for c, own, prio in _leaves(port.layout, rate)]

    def encode() -> list[bytearray]:
        requests = []
        with IPBatch() as batch:
            for classid, parent, own_rate, extra in [(PARENT, ROOT, rate, {}), *leaves]:
                batch.reset()
                batch.tc("change-class", "htb", index, classid, parent=parent, **extra,
                         **_class_params(own_rate, rate, port.mtu))
                requests.append(bytearray(batch.batch))
        return requests

    return in_thread(encode)  # pyroute2's: not in a thread whose asyncio loop runs


def _leaves(layout: str, rate: int) -> list[tuple[int, int, int]]:
    """A port's leaf classes of ``layout`` at ``rate`` bytes/s: (class, its own rate, its
    HTB priority), in :func:`leaf_classes`' order."""
    token = _token(rate)
    half = (rate - token) // 2
    return {"fifo": [(FIFO_CLASS, rate, 0)],
            "lanes": [(LANE_CLASS["vip"], rate, 0), (LANE_CLASS["normal"], token, 1),
                      (LANE_CLASS["low"], token, 2)],
            "weights": [(LANE_CLASS["vip"], half, 0), (LANE_CLASS["normal"], half, 0),
                        (LANE_CLASS["low"], token, 1)],
            "held": [(LANE_CLASS["vip"], rate, 0), (HELD_CLASS, token, 1)]}[layout]


def leaf_handle(classid: int) -> int:
    """The handle of the qdisc under leaf class ``classid``: 1:10 holds 10:."""
    return (classid & 0xFFFF) << 16


def leaf_classes(layout: str) -> tuple[int, ...]:
    """The leaf classes of a port of ``layout``."""
    return {"fifo": (FIFO_CLASS,), "lanes": tuple(LANE_CLASS.values()),
            "weights": tuple(LANE_CLASS.values()),
            "held": (LANE_CLASS["vip"], HELD_CLASS)}[layout]


def set_held_ceil(ipr: IPRoute, index: int, port: PortShape, ceil_mbps: float | None) -> None:
    """Move the ceiling of a held port's class 1:20 (None: the whole link) through ``ipr``,
    used in a thread inside the port's namespace (pyroute2 opens its socket in the thread
    that uses it); the class keeps its queue, so a flow is never reordered."""
    link = bytes_per_s(port.rate_mbps)
    ceil = link if ceil_mbps is None else min(max(bytes_per_s(ceil_mbps), 1000), link)
    ipr.tc("change-class", "htb", index, HELD_CLASS, parent=PARENT, prio=1,
           **_class_params(min(_token(link), ceil), ceil, port.mtu))


# --- pausable leaves: a TBF per leaf, encoded by hand -------------------------------------
# pyroute2's tbf knows neither TCA_TBF_BURST (a burst in bytes, not in ticks of a rate
# table) nor a change sent fast enough to pause a port within a packet's time, so the
# request is built here once per leaf and sent as bytes.

RTM_NEWQDISC = 36
NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x4, 0x200, 0x400
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_BURST = 1, 6
TC_LINKLAYER_ETHERNET = 1
RESUMED_RATE_FACTOR = 4  # a resumed TBF's rate, times the link: never the one that shapes
RESUMED_BURST_BYTES = 128 << 10  # more than a GSO packet: a resumed TBF never splits one
PAUSED_RATE = 1  # bytes/s: a paused TBF earns a packet's tokens in hours


def _nlattr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + bytes(-size % 4)


def tbf_request(index: int, classid: int, port: PortShape, paused: bool,
                create: bool = False) -> bytearray:
    """An RTM_NEWQDISC request for the TBF under leaf ``classid``: created (its bfifo
    holding the port's buffer), or changed to paused or resumed. A change refills
    the TBF's bucket, so a resumed leaf starts with a full burst and owes nothing."""
    if paused:
        rate, burst = PAUSED_RATE, paused_burst(port.mtu)
    else:
        rate = min(bytes_per_s(port.rate_mbps) * RESUMED_RATE_FACTOR, 0xFFFFFFFF)
        burst = max(RESUMED_BURST_BYTES, 2 * paused_burst(port.mtu))
    ratespec = struct.pack("=BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate)
    qopt = ratespec + bytes(12) + struct.pack("=III", port.buffer_bytes, 0, 0)
    options = _nlattr(TCA_TBF_PARMS, qopt) + _nlattr(TCA_TBF_BURST, struct.pack("=I", burst))
    body = struct.pack("=BxxxiIII", socket.AF_UNSPEC, index, leaf_handle(classid), classid, 0)
    body += _nlattr(TCA_KIND, b"tbf\0") + _nlattr(TCA_OPTIONS, options)
    flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE | NLM_F_EXCL if create else 0)
    return bytearray(struct.pack("=IHHII", 16 + len(body), RTM_NEWQDISC, flags, 0, 0) + body)


class Rtnl:
    """A bare rtnetlink socket that sends prepared requests and waits for their ack. Open
    it in the namespace it is to act in (the socket stays there). Hand-written for speed
    (see :class:`StatsReader`, which reads class counters over the same kind of socket)."""

    NLMSG_ERROR = 2

    def __init__(self, sock: socket.socket | None = None):
        """A new socket, or ``sock`` (one opened so elsewhere: the pauser's, by fd)."""
        if sock is None:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            sock.bind((0, 0))
        self.sock, self.seq = sock, 0

    def call(self, request: bytearray) -> None:
        """Send ``request`` (its sequence number is set here); OSError if the kernel
        refuses it."""
        self.seq += 1
        struct.pack_into("=I", request, 8, self.seq)
        self.sock.send(request)
        while True:
            data = self.sock.recv(4096)
            pos = 0
            while pos + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, pos)
                if kind == self.NLMSG_ERROR and seq == self.seq:
                    (err,) = struct.unpack_from("=i", data, pos + 16)
                    if err:
                        raise OSError(-err, f"rtnetlink: {os.strerror(-err)}")
                    return
                pos += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class ClassStats:
    classid: int
    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int
    backlog_packets: int


class StatsReader(Rtnl):
    """Leaf-class counters of ports, fast enough to poll at 100+ Hz.

    The request is a pyroute2 ``tcmsg`` encoded once; the reply is parsed here with
    ``struct`` because pyroute2's generic decoder costs about 1 ms per dump, which
    at 100 Hz on two ports takes a sixth of a core from the emulation itself.
    Only the TCA_STATS2 attribute (basic and queue stats) is read. Open it in the
    namespace of the ports (its netlink socket belongs to the opening thread's).
    """

    NLMSG_ERROR, NLMSG_DONE = 2, 3
    TCA_STATS2, TCA_STATS_BASIC, TCA_STATS_QUEUE = 7, 1, 3
    HEADER = struct.Struct("=IHHII")  # struct nlmsghdr
    TCMSG = struct.Struct("=BxxxiIII")  # struct tcmsg
    ATTR = struct.Struct("=HH")  # struct rtattr

    def __init__(self):
        super().__init__()
        self.requests: dict[int, bytearray] = {}  # per ifindex, encoded once

    def _request(self, index: int) -> bytearray:
        if index not in self.requests:
            msg = tcmsg.tcmsg()
            msg["index"] = index
            msg["header"] = {"type": RTM_GETTCLASS, "flags": NLM_F_REQUEST | NLM_F_DUMP}
            msg.encode()
            self.requests[index] = bytearray(msg.data)
        return self.requests[index]

    def read(self, index: int) -> list[ClassStats]:
        self.seq += 1
        request = self._request(index)
        struct.pack_into("=I", request, 8, self.seq)  # nlmsghdr.nlmsg_seq
        self.sock.send(request)
        out: list[ClassStats] = []
        while True:
            data = self.sock.recv(1 << 16)
            pos = 0
            while pos + self.HEADER.size <= len(data):
                length, kind, _, seq, _ = self.HEADER.unpack_from(data, pos)
                if kind == self.NLMSG_DONE:
                    return out
                if kind == self.NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, pos + self.HEADER.size)
                    raise OSError(-err, f"class dump of ifindex {index}: {os.strerror(-err)}")
                if seq == self.seq and kind == RTM_NEWTCLASS:
                    stats = self._parse(data, pos + self.HEADER.size, pos + length)
                    if stats and stats.classid != PARENT:
                        out.append(stats)
                pos += (length + 3) & ~3

    def _parse(self, data: bytes, pos: int, end: int) -> ClassStats | None:
        _, _, handle, _, _ = self.TCMSG.unpack_from(data, pos)
        for kind, start, stop in self._attrs(data, pos + self.TCMSG.size, end):
            if kind != self.TCA_STATS2:
                continue
            basic = queue = None
            for sub_kind, s, _ in self._attrs(data, start, stop):
                if sub_kind == self.TCA_STATS_BASIC:
                    basic = struct.unpack_from("=QI", data, s)
                elif sub_kind == self.TCA_STATS_QUEUE:
                    queue = struct.unpack_from("=IIIII", data, s)
            if basic and queue:
                qlen, backlog, drops, _requeues, overlimits = queue
                return ClassStats(handle, basic[0], basic[1], drops, overlimits, backlog, qlen)
        return None

    def _attrs(self, data: bytes, pos: int, end: int):
        while pos + self.ATTR.size <= end:
            length, kind = self.ATTR.unpack_from(data, pos)
            if length < self.ATTR.size:
                return
            yield kind & 0x3FFF, pos + self.ATTR.size, pos + length
            pos += (length + 3) & ~3


def wait_for_carrier(ipr: IPRoute, ifnames: list[str], timeout_s: float = 5.0) -> None:
    """Wait until every interface reports carrier (veths come up asynchronously)."""
    deadline = time.monotonic() + timeout_s
    pending = set(ifnames)
    while pending:
        for name in list(pending):
            (link,) = ipr.get_links(ifname=name)
            if link.get_attr("IFLA_CARRIER") == 1 and link.get_attr("IFLA_OPERSTATE") == "UP":
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"no carrier on {', '.join(sorted(pending))}")
        if pending:
            time.sleep(0.01)

