"""A request resolved before anything touches the kernel: a scenario (a file, parsed here
once, or one already parsed) and the caller's overrides turned into what a run needs, or
a :class:`~labkit.model.scenario.ScenarioError` that names the file (or parameter), the
key and the reason.

Resolving: the rates ``emulation.rate_factor`` asks for (a number, or ``auto``: the
newest calibration's), the algorithm ``algo: auto`` takes from the fabric's tuned model,
the scenario's own traffic kinds expanded, the users' controllers loaded. Checking: the
policies, the duration, the capture, the commands and the program the scenario names.
:func:`resolve_run` does them all, in that order, for :func:`labkit.run`; the sweep, the
tuning and the shell take the few they need. Whether this machine can run anything now
is the runner's (:func:`labkit.runs.runner.not_ready`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.model import autotune, lossless, paths
from labkit.model import scenario as scenario_mod
from labkit.model.manifest import AutoChoice, Rates
from labkit.model.scenario import Policy, Scenario, ScenarioError
from labkit.model.topo import Topology
from labkit.runs import store

if TYPE_CHECKING:
    from labkit.kernel.pcap import PcapRequest

MAX_SNAPLEN = 262144  # tcpdump's largest snapshot length
AUTO = scenario_mod.AUTO  # the algorithm a model chooses by size (labkit.model.autotune)


@dataclass(frozen=True)
class RunRequest:
    """What :func:`labkit.run` needs, resolved and checked (:func:`resolve_run`)."""

    scenario: Scenario  # at its rates, ``auto`` chosen, its own kinds expanded
    source: str  # the name its errors give it: its file, or "scenario <name>"
    topology: Topology
    policies: tuple[Policy, ...]
    controllers: dict[str, type]  # the users': the scenario's own and the caller's
    kinds: dict[str, type]  # the scenario's own traffic kinds
    rates: Rates | None  # how its rates were changed (None: as written)
    auto: AutoChoice | None  # what ``algo: auto`` chose (None: nothing to choose)
    pcap: PcapRequest | None  # the links to capture (None: none)


def loaded(scenario: str | Path | Scenario, source: str | None = None
           ) -> tuple[Scenario, str]:
    """The scenario as written (a file is parsed here), and the name its errors give it:
    ``source`` when given, else the file, else "scenario <name>"."""
    if isinstance(scenario, Scenario):
        return scenario, source or f"scenario {scenario.name}"
    return scenario_mod.load(scenario), source or str(scenario)


def rated(scenario: str | Path | Scenario, seed: int | None = None,
          source: str | None = None) -> tuple[Scenario, str, Rates | None]:
    """The scenario at the rates its ``emulation.rate_factor`` asks for (``seed`` in
    place of its own), its name for errors, and where the factor came from
    (:func:`resolve_rates`)."""
    sc, source = loaded(scenario, source)
    sc, rates = resolve_rates(sc if seed is None else replace(sc, seed=seed), source)
    return sc, source, rates


def resolve_rates(sc: Scenario, source: str) -> tuple[Scenario, Rates | None]:
    """``sc`` at the rates its ``emulation.rate_factor`` asks for, and where the factor
    came from (None: the rates as written). ``auto`` takes the best factor of the newest
    calibration of this scenario (its rate factor aside) recorded on this machine."""
    from labkit.analysis import calibration as cal

    factor = sc.emulation.rate_factor
    written = cal.as_written(sc)
    if factor == 1:
        return written, None
    found = None
    if isinstance(factor, str):  # auto, the only word the scenario's checker lets through
        key = "emulation.rate_factor"
        runs = paths.current().runs
        found = store.newest_calibration(written.to_dict(), runs)
        if found is None:
            raise ScenarioError(
                source, key, f"auto takes the rate `labkit calibrate` found for this scenario "
                f"on this machine, and {runs} holds no such calibration (one of "
                "this scenario, its path, seed and rate factor aside, recorded by this host; "
                "calibrations recorded before 2026-11-30 or with --out do not count): run "
                "`labkit calibrate` on it first (a few 8-second trials), or write a number")
        factor = found[1]["best_factor"]
        if factor is None:
            raise ScenarioError(source, key, f"the newest calibration ({found[0]}) found no "
                                f"rate this machine holds: {found[1]['advice']}; a number "
                                "below 1 still runs it, slower than written")
    if problem := lossless.headroom_problem(written.fabric, factor):
        chose = f"auto chose {factor:g} (the calibration {found[0]}): " if found else ""
        raise ScenarioError(source, "emulation.rate_factor",
                            f"{chose}at {factor:g} times its rates, {problem}")
    # the file's hash stays: the manifest's `rates` says how its rates were changed
    return replace(cal.scaled(written, factor), sha256=sc.sha256), Rates(
        factor=factor, calibration=str(found[0]) if found else None,
        bottleneck_rate_mbps=cal.bottleneck_rate(written) * factor,
        scale_factor=written.scale_factor / factor)


def can_run(sc: Scenario, algo: str, sizes: Sequence[int]) -> bool:
    """Whether the scenario's ranks can run ``algo`` at all (halving-doubling needs a power
    of two, the hierarchical one servers)."""
    from labkit.model.traffic import schedules

    if schedules.problem("all_reduce", algo, len(sc.ranks), sc.fabric.gpus_per_host):
        return False
    return algo != "hierarchical" or not scenario_mod.server_problem(sc.fabric, sc.ranks)


def model_key(sc: Scenario) -> str:
    """The key a tuning of ``sc`` keeps its model under: its fabric, rank count and GSO."""
    return autotune.model_key(sc.fabric, len(sc.ranks), sc.emulation.gso_packets)


def runnable(sc: Scenario, model: autotune.Model, sizes: Sequence[int]) -> list[str]:
    """The model's algorithms that ``sc``'s ranks can run."""
    return [a for a in model.algos if can_run(sc, a, sizes)]


def model_of(sc: Scenario, source: str) -> tuple[autotune.Model, Path]:
    """The newest model tuned for ``sc``'s fabric and ranks, and its file; ScenarioError
    when there is none yet."""
    found = store.newest_model(model_key(sc))
    if found is None:
        raise ScenarioError(source, "algo", f"auto chooses from a model of this fabric with "
                            f"{len(sc.ranks)} ranks, and there is none yet: run `labkit tune` "
                            "on this scenario first (it sweeps every algorithm here, a few "
                            "minutes)")
    return found


def resolve_auto(sc: Scenario, source: str) -> tuple[Scenario, AutoChoice | None]:
    """A scenario whose All-Reduce says ``algo: auto`` with the algorithm the fabric's model
    chooses at its size and the ranks in ring order, and what was chosen and why (None
    when there is nothing to choose)."""
    ar = sc.allreduce
    if ar is None or ar.algo != AUTO:
        return sc, None
    model, path = model_of(sc, source)
    choice = model.choose(ar.size_bytes, runnable(sc, model, [ar.size_bytes]))
    ranks = autotune.ring_order(Topology(sc.fabric), ar.ranks)
    return (replace(sc, jobs=(replace(ar, algo=choice.algo, ranks=ranks),)),
            AutoChoice(algo=choice.algo, reason=choice.reason, model=str(path),
                       ranks=tuple(ranks)))


def check_sweep(sc: Scenario, op: str, algo: str, sizes: Sequence[int], iters: int) -> None:
    """Raise :class:`ScenarioError` if the scenario's ranks cannot sweep ``op`` this way."""
    from labkit.model.traffic import schedules

    source = f"scenario {sc.name}"
    if not sizes:
        raise ScenarioError(source, "sizes", "give at least one message size")
    if algo == AUTO:
        if op != "all_reduce":
            raise ScenarioError(source, "algo", f"auto chooses All-Reduce algorithms, not {op}")
        model, _ = model_of(sc, source)
        allowed = runnable(sc, model, sizes)
        for each in sorted({model.choose(size, allowed).algo for size in sizes}):
            check_sweep(sc, op, each, sizes, iters)
        return
    if reason := schedules.problem(op, algo, len(sc.ranks), sc.fabric.gpus_per_host):
        raise ScenarioError(source, "algo", reason)
    if algo == "hierarchical" and (problem := scenario_mod.server_problem(sc.fabric, sc.ranks)):
        raise ScenarioError(source, "algo", problem)
    if iters < 1:
        raise ScenarioError(source, "iters", f"must be at least 1, got {iters}")


def user_controllers(sc: Scenario, source: str, given: Mapping[str, str | type]
                     ) -> dict[str, type]:
    """The scenario's own controllers and those ``given``, loaded and checked."""
    from labkit import control

    out = {}
    named: list[tuple[str, str, str | type]] = [
        (f"control.controllers.{n}", n, spec) for n, spec in sc.control.controllers]
    named += [(f"controllers.{n}", n, spec) for n, spec in given.items()]
    for key, name, spec in named:
        if problem := scenario_mod.name_problem(name):
            raise ScenarioError(source, key, problem)
        try:
            if isinstance(spec, str):
                out[name] = control.load(spec)
            else:
                control.check(spec)
                out[name] = spec
        except ValueError as exc:
            raise ScenarioError(source, key, str(exc)) from None
    return out


def policies_of(sc: Scenario, source: str, policies: str | Sequence[str] | None,
                controllers: Sequence[str]) -> tuple[Policy, ...]:
    """The policies asked for (default: the scenario's own), checked; ``controllers``
    names the users' controllers a policy may name."""
    names = [policies] if isinstance(policies, str) else list(policies or sc.policies)
    return scenario_mod.check_policies(names, source, list(controllers), sc)


def resolve_run(scenario: str | Path | Scenario, policies: str | Sequence[str] | None = None,
                *, source: str | None = None, seed: int | None = None,
                duration: float | None = None,
                controllers: Mapping[str, str | type] | None = None,
                pcap: str | Sequence[str] = (), pcap_snaplen: int = 0,
                telemetry: bool = True) -> RunRequest:
    """What a run of ``scenario`` under ``policies`` needs, with :func:`labkit.run`'s
    overrides (``seed``, ``duration``, ``controllers``, ``pcap``, ``pcap_snaplen``,
    ``telemetry``): every resolving and checking step, in order; ScenarioError at the
    first that fails. ``source`` is the name errors give the scenario (:func:`loaded`).
    Loads the users' classes (their code runs); touches no kernel."""
    from labkit.kernel.pcap import PcapRequest, check_links
    from labkit.traffic import commands, programs

    sc, source, rates = rated(scenario, seed, source)
    sc, auto = resolve_auto(sc, source)
    sc, kinds = scenario_mod.with_user_kinds(sc)
    users = user_controllers(sc, source, controllers or {})
    links = [pcap] if isinstance(pcap, str) else list(pcap)
    pols = policies_of(sc, source, policies, list(users))
    if duration is not None and (problem := scenario_mod.LIMITS["duration_s"].problem(duration)):
        raise ScenarioError(source, "duration", f"{problem} (seconds)")
    for i, event in enumerate(sc.events):
        if duration is not None and event.at_s >= duration:
            raise ScenarioError(source, f"events[{i}].at_s", f"{event.at_s:g} s is when each "
                                f"policy's run of {duration:g} s (duration) has ended: the "
                                "event would never happen")
    if not 0 <= pcap_snaplen <= MAX_SNAPLEN:
        raise ScenarioError(source, "pcap_snaplen", f"must be 0 (whole packets) to "
                            f"{MAX_SNAPLEN} bytes, got {pcap_snaplen}")
    commands.check_installed(sc)
    topology = Topology(sc.fabric)
    for program in sc.programs:
        programs.check(program, topology, source)
    steered = [p.name for p in pols if p.controller]
    if not telemetry and steered:
        raise ScenarioError(source, "telemetry", f"policy {steered[0]} steers its valves from "
                            "telemetry; leave the policy out or keep telemetry on")
    learning = [p.name for p in pols if p.layout in ("job-priority", "interleave")]
    if not telemetry and learning:
        raise ScenarioError(source, "telemetry", f"policy {learning[0]} learns each job's "
                            "bytes at the bottleneck from the queue probe; leave the policy "
                            "out or keep telemetry on")
    try:
        check_links(topology, links)
    except KeyError as exc:
        raise ScenarioError(source, "pcap", exc.args[0]) from None
    return RunRequest(sc, source, topology, pols, users, kinds, rates, auto,
                      PcapRequest(tuple(links), pcap_snaplen) if links else None)
