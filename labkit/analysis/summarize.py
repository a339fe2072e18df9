"""A run's summary (its summary.json) from its tables and what the run reported besides
(:class:`labkit.model.summary_meta.SummaryMeta`): each policy's workload, bottleneck and
fidelity, then each section of :data:`labkit.analysis.sections.SECTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import polars as pl

from labkit.analysis.fidelity import cpu_busy, fidelity
from labkit.analysis.jobs import with_job_slowdowns
from labkit.analysis.ports import bottleneck_lanes, busiest_port, utilizations
from labkit.analysis.sections import SECTIONS, PolicyView
from labkit.analysis.windows import event_pairs, op_times, windows
from labkit.analysis.workloads import allreduce, job, program, with_slowdowns
from labkit.model.summary import (
    AllReduce,
    Bottleneck,
    PolicySummary,
    Summary,
    Workload,
)
from labkit.model.summary_meta import SummaryMeta


def policy_summary(tables: dict, meta: SummaryMeta, policy: str, ops: pl.DataFrame,
                   start: int, end: int, port: str) -> PolicySummary:
    """One policy's summary over [start, end], its bottleneck figures at ``port`` (the
    run's: the same port for every policy): its workload, bottleneck and fidelity, then
    each of :data:`SECTIONS`."""
    def of(name: str) -> pl.DataFrame:
        return tables[name].filter(pl.col("policy") == policy)

    def first_job(name: str) -> pl.DataFrame:  # several jobs: the workload is the first's
        frame = of(name)
        return frame.filter(pl.col("host").is_in(meta.jobs[0].hosts)) \
            if meta.jobs and name == "collectives" else frame

    seconds = (end - start) / 1e9
    util = utilizations(of("queue"), meta, start, end)
    info = meta.ports[port]
    control = meta.control.get(policy)
    lanes = bottleneck_lanes(of, port, info.senders, start, end,
                             control.port_ce_marks.get(port, {}) if control else {})
    bottleneck = Bottleneck(link=info.link, port=port, rate_mbps=info.rate_mbps,
                            utilization=util.get(port, 0.0), lanes=lanes)
    busy = cpu_busy(of("cpu"), start, end)
    fid = fidelity(tables, policy, meta, start, end, busy)
    if meta.jobs:
        ops = op_times(first_job("collectives"))
    workload = _workload(meta, policy, ops, first_job, lanes.vip.mbps * 1e6 / 8 * seconds,
                         port)
    view = PolicyView(policy, meta, of, start, end, workload, bottleneck)
    sections, notes = {}, list(fid.notes)
    for section in SECTIONS:
        value, more = section.make(view)
        notes += more
        if section.field:
            sections[section.field] = value
    return PolicySummary(workload=workload, bottleneck=bottleneck, cpu_busy=busy,
                         cpu_bound=fid.cpu_bound, fidelity=replace(fid, notes=tuple(notes)),
                         window_s=seconds, **sections)


def _workload(meta: SummaryMeta, policy: str, ops: pl.DataFrame,
              of: Callable[[str], pl.DataFrame], vip_bytes: float, port: str) -> Workload:
    """The policy's workload: a user's program, a training job or an All-Reduce."""
    if meta.workload == "program":
        if meta.program is None:
            raise ValueError(f"run {meta.run_id}: a program's summary needs what it reported")
        return program(ops, of("collectives"), of("program_ops"), meta.program[policy],
                       meta.ranks, vip_bytes)
    if meta.workload == "job":
        return job(ops, of("collectives"), meta, port)
    if meta.size_bytes is None:
        raise ValueError(f"run {meta.run_id}: an All-Reduce's summary needs its size")
    return allreduce(ops, meta.size_bytes, meta.ranks)


def summarize(tables: dict[str, pl.DataFrame], meta: SummaryMeta) -> Summary:
    """A run's summary (written as its summary.json).

    ``meta`` carries what the tables do not (:class:`SummaryMeta`): scenario name, run id,
    scale factor, the workload's facts, the ring's slowest link, the bottleneck ports and
    what each policy reported besides. A program's first ``meta.warmup`` iterations are
    left out of every figure.
    """
    if warmup := meta.warmup:
        tables = {**tables,
                  "collectives": tables["collectives"].filter(pl.col("op") >= warmup),
                  "program_ops": tables["program_ops"].filter(
                      pl.col("iteration").is_null() | (pl.col("iteration") >= warmup))}
    ops = op_times(tables["collectives"])
    spans = windows(ops)
    if meta.workload == "program" and "bursts" in tables:  # its times not measurable:
        spans = windows(tables["bursts"]) | spans                # its traffic's span
    # the port the tables name, one for the run: the bottleneck port busiest over them all
    used: dict[str, float] = {}
    for p, (start, end) in spans.items():
        for port, share in utilizations(
                tables["queue"].filter(pl.col("policy") == p), meta, start, end).items():
            used[port] = used.get(port, 0.0) + share
    port = busiest_port(used, list(meta.ports))
    policies = {p: policy_summary(tables, meta, p, ops.filter(pl.col("policy") == p),
                               *spans[p], port)
                for p in meta.policies if p in spans}
    base = policies["isolated"].workload if "isolated" in policies else None
    policies = with_job_slowdowns({p: replace(s, workload=with_slowdowns(s.workload, base))
                                   for p, s in policies.items()})
    faults = event_pairs(tables.get("events"), "isolated")
    if isinstance(base, AllReduce) and base.busbw_mbps < 0.8 * meta.ring_link_mbps \
            and not faults:  # faults on purpose, not the generator, slowed it then
        fid = policies["isolated"].fidelity
        policies["isolated"] = replace(policies["isolated"], fidelity=replace(
            fid, generator_limited=True, notes=(
                *fid.notes,
                f"the All-Reduce alone reached {base.busbw_mbps:.0f} Mbit/s of bus bandwidth "
                f"on {meta.ring_link_mbps:g} Mbit/s links: the traffic generator, not the "
                "network, was the limit")))
    return Summary(scenario=meta.scenario, run_id=meta.run_id,
                   scale_factor=meta.scale_factor, policies=policies)
