"""The valve (``bpf/valve.bpf.c``) seen from Python: one object per host, attached to
the host's NIC egress, with a rate per lane held in ``lk_valve``.

:class:`Valves` owns every host's valve in a run and the decision log: each rate
change is recorded as (time, valve, lane, old and new Mbit/s, reason), which
becomes ``controller.parquet``. Rates change by rewriting the map — at any rate
the controller likes, nothing is reloaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from labkit.kernel import bpf, tc
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import VALVE
from labkit.model.abi import LANES, PHASES, JobPhase, ValveConfig, ValveCounters, ValveLane
from labkit.model.tables import Decision

GATE_LANE = "low"  # a held NIC's gate: the lane setting the controllers move




@dataclass(frozen=True)
class LaneSetting:
    """A lane's valve: Mbit/s (None: open), CE threshold and horizon (the bucket, in
    time at the rate) in ms, and the Mbit/s while the job communicates (None: the same)."""

    mbps: float | None = None
    ce_ms: float = 1.0
    horizon_ms: float = 50.0
    busy_mbps: float | None = None

    def encode(self) -> ValveLane:
        def bps(mbps: float | None) -> int:
            return 0 if mbps is None else max(1, int(mbps * 1e6 / 8))
        return ValveLane(bps(self.mbps), int(self.ce_ms * 1e6), int(self.horizon_ms * 1e6),
                         bps(self.busy_mbps))


def read_counters(stats: bpf.Map) -> dict[str, ValveCounters]:
    """Per lane, the per-CPU counters summed."""
    out = {}
    for i, lane in enumerate(LANES):
        total = ValveCounters()
        for raw in stats.per_cpu(i):
            c = ValveCounters.from_buffer_copy(raw)
            for name, *_ in ValveCounters._fields_:
                setattr(total, name, getattr(total, name) + getattr(c, name))
        out[lane] = total
    return out


class Valve:
    """One host's valve: its object (sharing the classifier's rules) and its lanes."""

    def __init__(self, host: str, rules: bpf.Map, record: bpf.Recorder | None = None,
                 setting: LaneSetting = LaneSetting(), one_clock: bool = False,
                 vip_class: int = 0, lead_ms: float = 0.0):
        """``vip_class``: the host's NIC is held (labkit/kernel/tc.py): send vip to that class and
        hold every other packet with data to the ``low`` lane's setting (the host's gate).
        ``lead_ms``: busy rates apply this long before the job's window opens."""
        self.host = host
        self.obj = bpf.record_programs(
            VALVE.open(reuse=[rules]), record)
        self.lanes = {lane: setting for lane in LANES}
        self.one_clock = one_clock
        self.vip_class = vip_class
        self.lead_ns = int(lead_ms * 1e6)
        self.write()

    def write(self) -> None:
        cfg = ValveConfig(one_clock=int(self.one_clock), vip_class=self.vip_class,
                          lead_ns=self.lead_ns)
        for i, lane in enumerate(LANES):
            cfg.lanes[i] = self.lanes[lane].encode()
        self.obj.maps.lk_valve.update(0, cfg)

    def gate(self, now_ns: int) -> float:
        """What the host's gate lets through now (held NIC: the ``low`` lane's rate, or
        its busy rate from ``lead_ms`` before the job's window to its end), in Mbit/s;
        infinite when open."""
        setting = self.lanes[GATE_LANE]
        mbps = setting.mbps
        if setting.busy_mbps is not None:
            p = JobPhase.from_buffer_copy(self.obj.maps.lk_phase.value(0))
            if p.busy_from_ns - self.lead_ns <= now_ns < p.busy_until_ns:
                mbps = setting.busy_mbps
        return float("inf") if mbps is None else mbps

    def publish_phase(self, phase: str, busy_from_ns: int, busy_until_ns: int,
                      bytes_left: int = 0) -> None:
        self.obj.maps.lk_phase.update(
            0, JobPhase(busy_from_ns, busy_until_ns, bytes_left, PHASES[phase]))

    def counters(self) -> dict[str, ValveCounters]:
        return read_counters(self.obj.maps.lk_valve_stats)

    def close(self) -> None:
        self.obj.close()


class Valves:
    """Every host's valve in a run, and the log of every rate decision."""

    def __init__(self, rules: bpf.Map, record: bpf.Recorder | None = None):
        self.rules, self.record = rules, record
        self.valves: dict[str, Valve] = {}
        self.attachments: list[tuple[Netns, bpf.TcAttachment]] = []
        self.decisions: list[Decision] = []

    def open(self, host: str, setting: LaneSetting = LaneSetting(), one_clock: bool = False,
             vip_class: int = 0, lead_ms: float = 0.0) -> Valve:
        """A valve known as ``host`` (a host, or a fabric port), loaded: it needs no
        interface yet, so a run loads its valves while the fabric is built."""
        valve = self.valves[host] = Valve(host, self.rules, self.record, setting, one_clock,
                                          vip_class, lead_ms)
        return valve

    def attach(self, host: str, ns: Netns, ifname: str, ifindex: int) -> Valve:
        """``host``'s valve (opened) on ``ifname``'s egress."""
        valve = self.valves[host]
        bpf.attach_filter(ns, valve.obj.programs.lk_valve_egress, ifname, ifindex, tc.PRIO_VALVE,
                          self.attachments, self.record)
        return valve

    def set(self, host: str, lane: str, reason: str, **changes) -> None:
        """Change a lane's setting (``mbps=…``, ``busy_mbps=…``, …) and log it."""
        valve = self.valves[host]
        old = valve.lanes[lane]
        new = replace(old, **changes)
        if new == old:
            return
        valve.lanes[lane] = new
        valve.write()
        self.decisions.append(Decision(time.monotonic_ns(), host, lane, old.mbps, new.mbps,
                                       old.busy_mbps, new.busy_mbps, None, None, reason))

    def log_phase(self, hosts: list[str], start_ns: int, end_ns: int, now_ns: int) -> None:
        """Record that the job's phase reached ``hosts``' valves: busy from..until."""
        reason = (f"job phase relayed: busy from {(start_ns - now_ns) / 1e6:+.0f} ms "
                  f"to {(end_ns - now_ns) / 1e6:+.0f} ms" if end_ns else "job phase relayed: idle")
        for host in hosts:
            lane = self.valves[host].lanes[GATE_LANE]
            self.decisions.append(Decision(now_ns, host, GATE_LANE, lane.mbps, lane.mbps,
                                           lane.busy_mbps, lane.busy_mbps, start_ns or None,
                                           end_ns or None, reason))

    def counters(self) -> dict[str, dict[str, ValveCounters]]:
        return {host: v.counters() for host, v in self.valves.items()}

    def close(self) -> None:
        bpf.detach_all(self.attachments)
        for valve in self.valves.values():
            valve.close()
        self.valves.clear()
