"""Every qdisc, class and handle labkit puts on an interface, via pyroute2 (netlink).

Each shaped port gets the same HTB skeleton: root ``1:``, a class ``1:1`` at the
link rate, and leaf classes under it, each with a byte-limited FIFO (bfifo)
holding the port's buffer:

* ``fifo`` ports: one leaf ``1:10`` that every packet shares;
* ``lanes`` ports: ``1:10`` vip, ``1:20`` normal, ``1:30`` low. vip's own rate is
  the whole link, the others get a token rate and may borrow up to the link
  (``ceil``): HTB serves a class within its rate before any borrower, so vip
  has strict priority and idle capacity still goes to the lower lanes.
  Unclassified packets land in normal (the HTB default).

The lane classifier (see :mod:`labkit.lanes`) selects a class by setting
``skb->priority`` to its id. Functions here act on the namespace of the calling
thread; run them through :meth:`labkit.netns.Netns.run`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import tcmsg

from labkit.scenario import LANES

ROOT = 0x10000  # 1:
PARENT = 0x10001  # 1:1
LANE_CLASS = {"vip": 0x10010, "normal": 0x10020, "low": 0x10030}
FIFO_CLASS = 0x10010
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
    layout: str  # "fifo" or "lanes"


def _bytes_per_s(rate_mbps: float) -> int:
    return int(rate_mbps * 1e6 / 8)


def shape(ipr: IPRoute, port: PortShape) -> int:
    """Install the HTB skeleton on ``port`` (replacing whatever root qdisc it had)."""
    (index,) = ipr.link_lookup(ifname=port.ifname)
    ipr.link("set", index=index, mtu=port.mtu)
    rate = _bytes_per_s(port.rate_mbps)
    burst = rate // 1000 + port.mtu  # one jiffy of tokens plus a packet, as tc does
    default = (FIFO_CLASS if port.layout == "fifo" else LANE_CLASS["normal"]) & 0xFFFF
    ipr.tc("replace", "htb", index, ROOT, default=default)
    common = {"burst": burst, "cburst": burst, "quantum": QUANTUM_BYTES, "mtu": port.mtu}
    ipr.tc("add-class", "htb", index, PARENT, parent=ROOT, rate=rate, ceil=rate, **common)
    if port.layout == "fifo":
        leaves = [(FIFO_CLASS, rate, 0)]
    else:
        token = max(int(rate * TOKEN_RATE_FRACTION), 1000)
        leaves = [(LANE_CLASS["vip"], rate, 0), (LANE_CLASS["normal"], token, 1),
                  (LANE_CLASS["low"], token, 2)]
    for classid, lane_rate, prio in leaves:
        ipr.tc("add-class", "htb", index, classid, parent=PARENT, rate=lane_rate, ceil=rate,
               prio=prio, **common)
        ipr.tc("add", "bfifo", index, (classid & 0xFFFF) << 16, parent=classid,
               limit=port.buffer_bytes)
    return index


@dataclass(frozen=True)
class ClassStats:
    classid: int
    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int
    backlog_packets: int


def class_stats(ipr: IPRoute, index: int) -> list[ClassStats]:
    """Counters of the leaf classes on interface ``index`` (one netlink dump)."""
    out = []
    for msg in ipr.get_classes(index=index):
        handle = msg["handle"]
        if handle == PARENT:
            continue
        stats2 = msg.get_attr("TCA_STATS2")
        basic = stats2.get_attr("TCA_STATS_BASIC")
        queue = stats2.get_attr("TCA_STATS_QUEUE")
        out.append(ClassStats(handle, basic["bytes"], basic["packets"], queue["drops"],
                              queue["overlimits"], queue["backlog"], queue["qlen"]))
    return out


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


__all__ = ["LANES", "LANE_CLASS", "FIFO_CLASS", "PortShape", "shape", "class_stats"]
