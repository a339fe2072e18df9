"""Lossless lanes, the plan: which router queues pause which neighbours, and when.

A scenario's ``fabric.lossless`` names the lanes that must not drop (``true``: vip).
Every router port gets a lossless queue for them (one queue under the ``fifo`` layout,
where a lossless lane makes the whole port lossless: 802.3x rather than per-priority
pause); :mod:`labkit.kernel.pauser` carries the plan out in the kernel.

Thresholds (:func:`thresholds`): a pause takes up to :data:`REACTION_BUDGET_S` to act,
during which every neighbour that may feed the queue keeps sending at its link rate, and
each may still let out one (GSO) packet (:func:`paused_burst`) after it; the queue keeps
that *headroom* free above ``xoff``. ``xoff`` is also at most :data:`XOFF_MAX_S` of the port's
own drain time: a deeper standing queue would only delay every packet through it, until
the RDMA transport's retransmission timer fires for packets that were never lost
(measured: halving-doubling at 4 MiB on leaf-spine with 4 MiB buffers resent 3328
packets after 10 timeouts, without a drop). ``xon`` is half of ``xoff``. Hosts are never
asked to pause anyone: a host's sockets block when its own NIC queue is full.

Pure: nothing here touches the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.model.fabric_spec import FabricSpec
from labkit.model.topo import Port, Topology

# A pause acts within this. Measured on a 2-core VM with its fabric at full tilt: 0.2 ms
# at the median, 3-4 ms at p99, 6.2 ms at most (the pauses table: wake_ns, reaction_ns).
# The tail is the kernel's own forwarding: softirq processing runs ahead of any task, the
# real-time pauser too, for up to 300 packets at a time, on both CPUs.
REACTION_BUDGET_S = 0.010
XOFF_MAX_S = 0.020  # a lossless queue pauses its feeders at most this much of its drain time
FRAME_OVERHEAD = 64  # bytes a frame may add to the MTU (Ethernet header and then some)
MAX_GSO_BYTES = 72 << 10  # a GSO packet as a qdisc counts it: 64 KiB and its segments' headers


def paused_burst(mtu: int) -> int:
    """What a paused queue may still let out: one GSO packet. A TBF cuts a GSO packet
    longer than its burst into segments as it queues it, and frees the original, which the
    qdisc_enqueue tracepoint then reports (bpf/pause.bpf.c would read a freed skb): a
    paused TBF's burst holds the largest, so it never cuts one."""
    return max(mtu + FRAME_OVERHEAD, MAX_GSO_BYTES)


class LosslessError(ValueError):
    """A lossless fabric that cannot work as asked (a buffer too small for its headroom)."""


@dataclass(frozen=True)
class Queue:
    """A lossless queue at a router port: which lane, and when it pauses and resumes."""

    port: Port
    lane: str  # the lane it carries; "all" under the fifo layout
    xoff_bytes: int
    xon_bytes: int


def feeders(topo: Topology, port: Port) -> list[Port]:
    """The ports that can send into ``port``'s queue: every neighbour of its router but
    the one it sends to, each by its own port towards the router."""
    return [upstream(topo, p) for p in topo.ports[port.node] if p is not port]


def upstream(topo: Topology, ingress: Port) -> Port:
    """The neighbour's port at the far end of ``ingress`` (the one that sends into it)."""
    return next(p for p in topo.ports[ingress.peer] if p.ip == ingress.peer_ip)


def thresholds(topo: Topology, port: Port) -> tuple[int, int]:
    """(xoff, xon) in bytes for a lossless queue of ``port``; LosslessError when its
    buffer cannot hold the headroom a pause needs."""
    frame = port.link.mtu + FRAME_OVERHEAD
    senders = feeders(topo, port)
    headroom = frame + sum(f.link.rate_mbps * 1e6 / 8 * REACTION_BUDGET_S
                           + paused_burst(f.link.mtu) for f in senders)
    buffer = port.link.buffer_kb * 1024
    xoff = int(buffer - headroom)
    if xoff < 4 * frame:
        need_kb = -(-int(headroom + 4 * frame) // 1024)
        raise LosslessError(
            f"link {port.link.name}: a lossless queue at {port.node}/{port.ifname} needs "
            f"buffer_kb >= {need_kb} (a pause takes up to {REACTION_BUDGET_S * 1e3:g} ms, "
            f"while {len(senders)} neighbours keep sending), it has {port.link.buffer_kb}")
    xoff = min(xoff, max(int(port.link.rate_mbps * 1e6 / 8 * XOFF_MAX_S), 4 * frame))
    return xoff, xoff // 2


def headroom_problem(fabric: FabricSpec, rate_factor: float = 1.0) -> str | None:
    """Why ``fabric``'s lossless queues cannot hold a pause's headroom with its links at
    ``rate_factor`` times their rates (``emulation.rate_factor``: the headroom grows with
    them), or None when they can (or none is lossless)."""
    if not fabric.lossless:
        return None
    try:
        queues(Topology(fabric.scaled(rate_factor)), fabric.lossless, "fifo")
    except LosslessError as exc:
        return str(exc)
    return None


def carries_collectives(fabric: FabricSpec, router_layout: str) -> bool:
    """Whether the collectives' packets are never dropped on purpose or by a full queue:
    their lane (vip) is lossless, or every lane is (one queue per port), and no link
    loses packets on purpose. Only then may their transport wait long to resend."""
    if not fabric.lossless or any(link.loss_percent for link in fabric.links):
        return False
    return router_layout == "fifo" or "vip" in fabric.lossless


def queues(topo: Topology, lanes: tuple[str, ...], router_layout: str) -> list[Queue]:
    """The lossless queues of every router port, none when ``lanes`` is empty. (An NVLink
    switch's ports are not among them: at several times the NIC's rate they rarely queue,
    and their headroom would take megabytes.)"""
    if not lanes:
        return []
    out = []
    for port in topo.router_ports():
        xoff, xon = thresholds(topo, port)
        out += ([Queue(port, "all", xoff, xon)] if router_layout == "fifo" else
                [Queue(port, lane, xoff, xon) for lane in lanes])
    return out
