"""Lossy links on purpose: ``bpf/lossy.bpf.c`` on both ports of every link whose
scenario entry sets ``loss_percent``.

The dropper runs before the lane classifier (lower tc priority) and drops each
packet with the link's probability, whatever its lane, counting the drops, so a
lab can show what loss costs a go-back-N transport such as RoCE RC.
"""

from __future__ import annotations

from labkit.kernel import bpf, tc
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import LOSSY, LossyMaps, LossyPrograms


class LossyLinks:
    """One dropper object per lossy link (each link has its own probability)."""

    def __init__(self, record: bpf.Recorder | None = None):
        self.record = record
        self.objects: dict[str, bpf.BpfObject[LossyMaps, LossyPrograms]] = {}
        self.attachments: list[tuple[Netns, bpf.TcAttachment]] = []

    def add(self, link_name: str, loss_percent: float, ports: list[tuple[Netns, str, int]]) -> None:
        obj = bpf.record_programs(LOSSY.open(), self.record)
        self.objects[link_name] = obj
        obj.maps.lk_loss.update(0, round(loss_percent * 1e4))
        for ns, ifname, ifindex in ports:
            bpf.attach_filter(ns, obj.programs.lk_lossy, ifname, ifindex, tc.PRIO_DROPPER,
                              self.attachments, self.record)

    def set(self, link_name: str, loss_percent: float) -> None:
        """Drop ``link_name``'s packets with another probability from now on (100: the
        link is down)."""
        self.objects[link_name].maps.lk_loss.update(0, round(loss_percent * 1e4))

    def drops(self) -> dict[str, int]:
        return {name: sum(int.from_bytes(v, "little")
                          for v in obj.maps.lk_loss_drops.per_cpu(0))
                for name, obj in self.objects.items()}

    def close(self) -> None:
        bpf.detach_all(self.attachments)
        for obj in self.objects.values():
            obj.close()
        self.objects.clear()


def attach(topo, fabric, record: bpf.Recorder | None = None) -> LossyLinks:
    """Droppers on both ports of every lossy link of a running fabric."""
    lossy = LossyLinks(record)
    for pa, pb in topo.links:
        if pa.link.loss_percent > 0:
            lossy.add(pa.link.name, pa.link.loss_percent,
                      [(h.ns, h.ifname, h.ifindex) for h in map(fabric.handle, (pa, pb))])
    return lossy
