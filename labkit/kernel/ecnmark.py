"""Step marking (``bpf/ecnmark.bpf.c``) on a fabric's bottleneck ports, as DCTCP's
switches mark: an ECN-capable packet that finds K bytes or more queued at the port is
marked CE (scenario ``transport.ecn_k_packets``).

K is given in packets, as the DCTCP paper gives it, and kept in bytes at the port's MTU
(a frame: MTU plus the Ethernet header). One object per port: each has its own K and
its own counts. The marker runs before the lane classifier and hands every packet on.
"""

from __future__ import annotations

from labkit.kernel import bpf, tc
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import ECNMARK, EcnmarkMaps, EcnmarkPrograms

ETH_HLEN = 14
ECT, CE = 0, 1  # lk_mark_counts keys


def k_bytes(k_packets: int, mtu: int) -> int:
    """K in bytes queued: ``k_packets`` full frames of a port with this MTU."""
    return k_packets * (mtu + ETH_HLEN)


class EcnMarks:
    """The markers of one fabric, by port label (``<node>/<ifname>``)."""

    def __init__(self, record: bpf.Recorder | None = None):
        self.record = record
        self.objects: dict[str, bpf.BpfObject[EcnmarkMaps, EcnmarkPrograms]] = {}
        self.attachments: list[tuple[Netns, bpf.TcAttachment]] = []

    def attach(self, ns: Netns, ifname: str, ifindex: int, k_packets: int, mtu: int) -> None:
        obj = bpf.record_programs(ECNMARK.open(), self.record)
        self.objects[f"{ns.name}/{ifname}"] = obj
        obj.maps.lk_mark_k.update(0, k_bytes(k_packets, mtu))
        bpf.attach_filter(ns, obj.programs.lk_mark, ifname, ifindex, tc.PRIO_ECN_MARK,
                          self.attachments, self.record)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per port, the ECN-capable packets it saw and those it found over K (marked CE)."""
        out = {}
        for port, obj in self.objects.items():
            counts = obj.maps.lk_mark_counts
            out[port] = {name: sum(int.from_bytes(v, "little") for v in counts.per_cpu(key))
                         for name, key in (("ect", ECT), ("ce", CE))}
        return out

    def close(self) -> None:
        bpf.detach_all(self.attachments)
        for obj in self.objects.values():
            obj.close()
        self.objects.clear()
