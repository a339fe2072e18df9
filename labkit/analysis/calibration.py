"""What emulated rate this machine holds a scenario's fabric at: the scenario run at its
rates scaled by powers of two, each run's fidelity read, and the highest that held kept.

A scaled scenario is the same experiment, faster: every link's rate times the factor, every
compute time divided by it, the scale factor divided by it (1 emulated Mbit/s then stands
for fewer real ones); storage's offered loads are shares of the bottleneck already. Storage
on/off periods, the controllers' times (``control``) and commands' own options stay as
written: for a policy with a controller, a trial is a close relative of the experiment,
not the same one.

A trial holds when no policy's run was CPU-bound, every congested port sent at its rate and
kept time (``fidelity`` in summary.json, docs/data-model.md), and the All-Reduce alone was
not limited by its generator. :func:`labkit.runs.runner.calibrate` runs the trials, each an
ordinary recorded run, and records the calibration beside them (a run directory of kind
``calibration`` whose summary.json is :meth:`Calibration.to_dict`). Standard library
only, like the analysis it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from labkit.model.scenario import (
    JOB_PARAMS,
    MAX_RATE_FACTOR,
    MIN_RATE_FACTOR,
    AllReduceSpec,
    JobEntry,
    JobSpec,
    Scenario,
)
from labkit.model.summary import Summary

MIN_FACTOR, MAX_FACTOR = MIN_RATE_FACTOR, MAX_RATE_FACTOR
TRIAL_SECONDS = 8.0  # traffic per policy in each trial
BUSY_BEFORE_LIMIT = 0.15  # other work on the machine that makes a calibration pessimistic


def scaled(sc: Scenario, factor: float) -> Scenario:
    """``sc`` with its rates times ``factor`` and its times (compute, links' delays, its
    events' times) divided by it (its own ``emulation.rate_factor`` is not applied:
    :func:`as_written`)."""
    if factor == 1:
        return sc
    fabric = sc.fabric.scaled(factor)
    events = tuple(replace(e, at_s=e.at_s / factor,
                           for_s=e.for_s and e.for_s / factor,
                           every_s=e.every_s and e.every_s / factor,
                           value=e.value * factor if e.change == "rate_mbps" else
                           e.value / factor if e.change == "delay_ms" else e.value)
                   for e in sc.events)
    jobs = tuple(_scaled_job(job, factor) for job in sc.jobs)
    # a derived scenario is not the file: its runs record it whole, and no file's hash;
    # names go into bpffs paths, which take no '.': x0.5 is written x0p5
    return replace(sc, name=f"{sc.name}-x{factor:g}".replace(".", "p"),
                   scale_factor=sc.scale_factor / factor, fabric=fabric, jobs=jobs,
                   events=events, sha256="")


def _scaled_job(job: JobEntry, factor: float) -> JobEntry:
    """A job of labkit's own with its compute times divided by ``factor`` (a program's
    are its own: the checker refuses to scale a scenario with one)."""
    if isinstance(job, AllReduceSpec):
        return replace(job, compute_ms=job.compute_ms / factor)
    if isinstance(job, JobSpec):
        times = {k for k, unit in JOB_PARAMS[job.parallelism].items() if unit == "ms"}
        return replace(job, params=tuple((k, v / factor if k in times else v)
                                         for k, v in job.params))
    return job


def as_written(sc: Scenario) -> Scenario:
    """``sc`` at the rates its file writes, whatever its ``emulation.rate_factor`` says."""
    return replace(sc, emulation=replace(sc.emulation, rate_factor=1.0))


def faults(summary: Summary) -> list[str]:
    """Why a recorded run does not describe its fabric faithfully (empty: it does)."""
    out = []
    for policy, p in summary.policies.items():
        fid = p.fidelity
        if fid.cpu_bound:
            out.append(f"{policy}: CPU-bound ({p.cpu_busy:.0%} busy)")
        if not fid.links_at_rate:
            out.append(f"{policy}: a congested port sent below its rate")
        for port, d in fid.dequeue.items():  # runs before 2026-11 have none
            if d.flagged:
                out.append(f"{policy}: {port} did not keep time")
        if fid.generator_limited:
            out.append(f"{policy}: the All-Reduce alone was limited by its generator")
    return out


@dataclass(frozen=True)
class Trial:
    factor: float
    rate_mbps: float  # the scenario's bottleneck rate at this factor
    run: str  # the recorded run's directory
    faults: tuple[str, ...]
    cpu_busy: float  # the busiest policy's

    @property
    def held(self) -> bool:
        return not self.faults


@dataclass(frozen=True)
class Calibration:
    scenario: str
    bottleneck_rate_mbps: float  # as written in the scenario
    scale_factor: float  # as written
    trials: tuple[Trial, ...]
    busy_before: float = 0.0  # the machine's busy share before the trials, others' work

    @property
    def best(self) -> Trial | None:
        """The fastest trial that held."""
        held = [t for t in self.trials if t.held]
        return max(held, key=lambda t: t.factor) if held else None

    @property
    def advice(self) -> str:
        best = self.best
        if best is None:
            out = (f"no rate down to x{MIN_FACTOR:g} held on this machine: see each trial's "
                   "faults; a smaller fabric may")
        elif best.factor == 1:
            out = "the scenario's own rates hold on this machine"
        else:
            out = (f"set every link rate x{best.factor:g} (the bottleneck at "
                   f"{best.rate_mbps:g} Mbit/s), every compute time /{best.factor:g} and "
                   f"scale_factor: {self.scale_factor / best.factor:g}, as its trial did")
        if self.busy_before > BUSY_BEFORE_LIMIT:
            out += (f" — but the machine was {self.busy_before:.0%} busy with other work "
                    "before the trials, which counts against them: calibrate again when it is "
                    "quiet")
        return out

    def to_dict(self) -> dict:
        best = self.best
        return {"kind": "calibration", "scenario": self.scenario,
                "bottleneck_rate_mbps": self.bottleneck_rate_mbps,
                "scale_factor": self.scale_factor, "busy_before": self.busy_before,
                "trials": [{**asdict(t), "held": t.held} for t in self.trials],
                "best_factor": best.factor if best else None,
                "best_rate_mbps": best.rate_mbps if best else None,
                "advice": self.advice}


def bottleneck_rate(sc: Scenario) -> float:
    a, b = sc.fabric.bottlenecks[0]
    return next(link.rate_mbps for link in sc.fabric.links if {link.a, link.b} == {a, b})


def factors_to_try(held: Callable[[float], bool]) -> list[float]:
    """The factors a calibration tries, given ``held`` (which runs a trial): from 1 up by
    doubling while trials hold, or down by halving until one does, within
    [MIN_FACTOR, MAX_FACTOR]."""
    tried, factor = [1.0], 1.0
    up = held(factor)
    while MIN_FACTOR <= factor * (2 if up else 0.5) <= MAX_FACTOR:
        factor *= 2 if up else 0.5
        tried.append(factor)
        if held(factor) != up:
            break
    return tried
