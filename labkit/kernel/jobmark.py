"""The job marker (``bpf/jobmark.bpf.c``) seen from Python: one object per rank host of
a user's own program (``kind: program``), on the host's NIC egress.

It knows the rank's processes by their cgroup (:mod:`labkit.kernel.cgroups`) and writes the
collectives' DSCP into every packet they send, so the lanes, gates, counters and probes
treat the job's traffic as the collective it is. It also records the job's traffic as
the kernel sees it: packets and bytes, and bursts (a gap of ``quiet_ms`` ends one),
which are what a program that reports nothing of its own is measured by; and, while
the job sends to a rank whose path crosses a bottleneck port (``far``), it holds the
host's job phase open ``hold_ms`` past its latest such packet (the valve's
``lk_phase`` when the host is held: state-aware control without the job's
cooperation, and only where the job meets storage), once a burst across has carried
:data:`OPEN_BYTES` (a framework's handshake before a collective opens nothing).
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Sequence

from labkit.kernel import bpf, tc
from labkit.kernel.cgroups import Cgroup
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import JOBMARK
from labkit.model.abi import BURST, LANE_COUNTERS, MAX_BURSTS, JobmarkConfig, JobState
from labkit.model.tables import BurstRow

OPEN_BYTES = 16 << 10  # a burst across a bottleneck opens the window from this many bytes


class JobMark:
    """One rank host's marker: its object and its configuration."""

    def __init__(self, host: str, group: Cgroup, dscp: int, quiet_ms: float, hold_ms: float,
                 far: Sequence[str] = (), phase: bpf.Map | None = None,
                 record: bpf.Recorder | None = None, open_bytes: int = OPEN_BYTES):
        self.host = host
        self.obj = bpf.record_programs(JOBMARK.open(reuse=[phase] if phase else []), record)
        for address in far:
            self.obj.maps.lk_jobmark_far.update(socket.inet_aton(address), 1)
        self.obj.maps.lk_jobmark_cfg.update(0, JobmarkConfig(
            cgroup_id=group.id, quiet_ns=int(quiet_ms * 1e6), hold_ns=int(hold_ms * 1e6),
            level=group.level, dscp=dscp, open_bytes=open_bytes))

    def counters(self) -> tuple[int, int]:
        """(packets, bytes) of the job out of this NIC so far."""
        per_cpu = LANE_COUNTERS.iter_unpack(self.obj.maps.lk_jobmark_stats.raw(0))
        packets, nbytes = map(sum, zip(*per_cpu, strict=True))
        return packets, nbytes

    def bursts(self) -> tuple[list[BurstRow], int]:
        """The bursts so far, the one under way last, and how many were lost (past
        :data:`labkit.model.abi.MAX_BURSTS`)."""
        state = JobState.from_buffer_copy(self.obj.maps.lk_job_state.value(0))
        kept = min(state.ended, MAX_BURSTS)
        table = self.obj.maps.lk_job_bursts
        rows = [BurstRow(self.host, *BURST.unpack(table.value(i))) for i in range(kept)]
        if state.open.packets:
            o = state.open
            rows.append(BurstRow(self.host, o.start_ns, o.end_ns, o.bytes, o.packets))
        return rows, state.ended - kept

    def close(self) -> None:
        self.obj.close()


class JobMarks:
    """The markers of one policy's run, each attached to its rank host's NIC."""

    def __init__(self, record: bpf.Recorder | None = None):
        self.record = record
        self.marks: dict[str, JobMark] = {}
        self.attachments: list[tuple[Netns, bpf.TcAttachment]] = []

    def attach(self, host: str, ns: Netns, ifname: str, ifindex: int, group: Cgroup,
               dscp: int, quiet_ms: float, hold_ms: float, far: Sequence[str] = (),
               phase: bpf.Map | None = None) -> JobMark:
        """A marker on ``host``'s NIC for the processes of ``group`` (``far``: the
        addresses whose path from ``host`` crosses a bottleneck port)."""
        mark = self.marks[host] = JobMark(host, group, dscp, quiet_ms, hold_ms, far, phase,
                                          self.record)
        bpf.attach_filter(ns, mark.obj.programs.lk_jobmark, ifname, ifindex, tc.PRIO_MARK,
                          self.attachments, self.record)
        return mark

    def traffic(self, hosts: Collection[str] | None = None
                ) -> tuple[dict[str, tuple[int, int]], list[BurstRow], int]:
        """Per host (packets, bytes) of the job; every host's bursts; bursts lost: of
        ``hosts`` (None: every marked host)."""
        rows, lost = [], 0
        marks = {h: m for h, m in self.marks.items() if hosts is None or h in hosts}
        for mark in marks.values():
            found, missed = mark.bursts()
            rows += found
            lost += missed
        return {h: m.counters() for h, m in marks.items()}, rows, lost

    def close(self) -> None:
        bpf.detach_all(self.attachments)
        for mark in self.marks.values():
            mark.close()
        self.marks.clear()
