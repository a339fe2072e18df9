"""Links' propagation delays as a feature of a policy's stack: the fabric holds the delay
line (:mod:`labkit.kernel.delayline`, spliced in as it builds the links); this feature
reads how faithfully it kept time over the run, per delayed link and direction."""

from __future__ import annotations

from labkit.kernel.delayline import DelayLine
from labkit.model.scenario_spec import Policy, Scenario
from labkit.model.summary_meta import LinkDelayRow
from labkit.runs.features.base import Feature, Stack
from labkit.runs.result import PolicyResult


class Delays(Feature):
    """The delay line's report at the traffic's end, one row per delayed link direction."""

    records_only = True  # the delay is the fabric's; this only reads it
    line: DelayLine | None = None
    directions: dict[str, tuple[str, str]]  # the delay line's in-interface -> (link, hop)

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return any(link.delay_ms > 0 for link in sc.fabric.links)

    def build(self, stack: Stack) -> None:
        self.line = stack.fabric.delay_line
        self.directions = {}
        for (pa, pb), (a, b) in stack.fabric.delayed_links().items():
            self.directions[a] = (pa.link.name, f"{pa.node}->{pb.node}")
            self.directions[b] = (pa.link.name, f"{pb.node}->{pa.node}")
        self.rows: list[LinkDelayRow] = []

    def stop(self) -> None:
        report = self.line.report() if self.line else None
        self.rows = [] if report is None else [
            LinkDelayRow(link=self.directions[p.into][0], hop=self.directions[p.into][1],
                         delay_ns=p.delay_ns, jitter_ns=p.jitter_ns, frames=p.frames,
                         dropped=p.dropped, late_p50_ns=p.late_p50_ns,
                         late_p99_ns=p.late_p99_ns, late_max_ns=p.late_max_ns,
                         realtime=report.realtime)
            for p in report.pipes if p.into in self.directions]

    def collect(self, result: PolicyResult) -> None:
        result.delays = self.rows
