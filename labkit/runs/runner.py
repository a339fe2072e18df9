"""The one way to run labkit: :func:`run` a scenario, :func:`sweep` a collective.

Both take a scenario (a file or a parsed :class:`~labkit.model.scenario.Scenario`), check the
request (:mod:`labkit.runs.resolve`) and the machine before touching the kernel, record
everything in a new run directory, and return what was recorded: :func:`run` the
:class:`~labkit.runs.rundir.Run` that :func:`~labkit.runs.rundir.load_run` reads back,
:func:`sweep` a :class:`Sweep`. The CLI, the notebooks' live panel, the benchmarks and
the tier-2 tests all call them::

    import labkit
    run = labkit.run("topologies/bottleneck.yaml", policies=["fifo"], duration=5)
    run.summary.policies["fifo"].workload.slowdown_p99  # a labkit.model.summary.Summary

Exceptions: :class:`~labkit.model.scenario.ScenarioError` (bad scenario or argument: which
file or parameter, and why), :class:`NotReady` (this machine cannot run it, and the
fix), ``FileExistsError`` (``out`` exists: labkit never overwrites a run),
:class:`~labkit.kernel.registry.RunLockedError` (another run holds the machine),
:class:`RunFailed` (the run started and failed; its partial data are kept) and
``KeyboardInterrupt``; in every case whatever the run built in the kernel is torn down.
No signal handler is installed here: the CLI turns SIGTERM into ``KeyboardInterrupt``.

``resolve_rates``, ``resolve_auto``, ``model_key`` and ``runnable`` are
:mod:`labkit.runs.resolve`'s; importing them from here still works until the next release,
with a DeprecationWarning.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Generic, TypeVar

import polars as pl

from labkit.analysis.calibration import TRIAL_SECONDS, Calibration
from labkit.analysis.nccltests import Row
from labkit.kernel import bpf
from labkit.kernel.registry import Registry, RunLock, RunLockedError, work_dir
from labkit.model import autotune, paths
from labkit.model.manifest import (
    AutoChoices,
    BatchRef,
    CalibrationManifest,
    Choice,
    KeptObject,
    Manifest,
    RunManifest,
    SweepManifest,
    TuneManifest,
    UserClass,
)
from labkit.model.scenario import Scenario, ScenarioError
from labkit.model.topo import Topology
from labkit.runs import moved, resolve, rundir, store
from labkit.runs.provenance import provenance, sha256_file
from labkit.runs.resolve import AUTO, check_sweep
from labkit.runs.rundir import Run, RunWriter, Tuning
from labkit.traffic import hotpath

WITHOUT_ROOT = ("Without root you can still analyse recorded runs: `labkit report DIR`, "
                "`labkit runs` and the notebooks.")
ROOT_HINT = ("running a scenario needs root: it builds network namespaces and loads eBPF "
             f"programs. {WITHOUT_ROOT}")


class NotReady(RuntimeError):
    """This machine cannot run a scenario now; the message says why and what fixes it."""


class RunFailed(RuntimeError):
    """A run started and failed; ``partial`` is the directory that keeps what it recorded."""

    def __init__(self, message: str, partial: Path):
        self.partial = partial
        super().__init__(message)


@dataclass(frozen=True)
class Progress:
    """Where a run is: ``stage`` is "building" (the policy's fabric), "running" (``done``
    of ``total`` ops or iterations finished on the first rank; ``total`` None: a program
    that does not say how many it will run) or "done"."""

    policy: str
    stage: str
    done: int
    total: int | None


@dataclass(frozen=True)
class Sweep:
    """A recorded sweep: its directory and one row per message size (``rows`` as
    :class:`labkit.analysis.nccltests.Row`, ``table`` as the frame written to sweep.parquet)."""

    path: Path
    rows: list[Row]
    table: pl.DataFrame


def not_ready(sc: Scenario | None = None, euid: int | None = None) -> str | None:
    """Why this machine cannot build a scenario's fabric (``sc``: this one's: a routed
    fabric needs FRR) now, with the fix (None: it can)."""
    from labkit.kernel import frr

    if problem := _machine_problem(euid):
        return problem
    if sc is not None and sc.fabric.routing == "bgp":
        return frr.problem()
    return None


def _machine_problem(euid: int | None) -> str | None:
    """What any scenario needs of this machine and it lacks, with the fix."""
    if (os.geteuid() if euid is None else euid) != 0:
        return ROOT_HINT
    if shutil.which("mnexec") is None:
        return "Mininet is not installed: run `make setup` as root (see `labkit doctor`)"
    if not os.path.ismount("/sys/fs/bpf"):
        return "bpffs is not mounted at /sys/fs/bpf: run `make setup` (see `labkit doctor`)"
    missing = [n for n in bpf.object_names() if not bpf.object_path(n).exists()]
    if missing:
        return (f"the eBPF objects {', '.join(missing)} are not built: run `make bpf` "
                "(see `labkit doctor`)")
    if problem := hotpath.stale():
        return problem
    return None


def _running(tell: Callable[[Progress], None], policy: str, total: int | None
             ) -> Callable[[int], None]:
    """What tells ``tell`` how many of ``total`` ops a policy's first rank has done."""
    return lambda done: tell(Progress(policy, "running", done, total))


@contextmanager
def _claimed(label: str) -> Iterator[str]:
    """The machine's run lock, then the id of a run of ``label`` chosen under it (no two
    runs can choose one id, and a run that cannot start has recorded nothing)."""
    with RunLock(label) as lock:
        run_id = rundir.new_run_id(label)
        lock.rename(run_id)
        yield run_id


M = TypeVar("M", bound=Manifest)


class Recording(Generic[M]):
    """A recording under way (:func:`_recording`): its run id, its scratch directory and
    its writer, each made when first used, and the manifest it started with."""

    manifest: M

    def __init__(self, run_id: str, out: str | Path | None, stack: ExitStack):
        self.run_id, self._out, self._stack = run_id, out, stack

    @cached_property
    def work(self) -> Path:
        """The run's scratch directory (:func:`~labkit.kernel.registry.work_dir`), removed
        when the recording ends."""
        return self._stack.enter_context(work_dir(self.run_id))

    @cached_property
    def writer(self) -> RunWriter:
        """The run directory's writer, in ``out`` (default data/runs/<run-id>);
        FileExistsError when it exists."""
        return RunWriter(Path(self._out) if self._out is not None
                         else paths.current().runs / self.run_id)


@contextmanager
def _recording(label: str, out: str | Path | None, manifest: Callable[[Recording[M]], M],
               *, freeze: bool = True) -> Iterator[Recording[M]]:
    """The recording ``run``, ``sweep``, ``tune`` and ``calibrate`` share: the machine and
    a run id for ``label`` (:func:`_claimed`); the manifest ``manifest(rec)`` makes,
    written first; then the body, whose end :func:`_recorded` marks in the manifest if it
    did not finish (``freeze``: the caller's objects kept from the garbage collector
    meanwhile). The scratch directory and the writer are made when first used, so
    ``manifest`` may run a check in the scratch before it touches the writer: a check
    that fails has recorded nothing."""
    with _claimed(label) as run_id, ExitStack() as stack:
        rec: Recording[M] = Recording(run_id, out, stack)
        rec.manifest = manifest(rec)
        rec.writer.write_manifest(rec.manifest)
        with _recorded(rec.writer), _caller_objects_frozen() if freeze else nullcontext():
            yield rec


def run(scenario: str | Path | Scenario, policies: Sequence[str] | None = None, *,
        out: str | Path | None = None, seed: int | None = None,
        duration: float | None = None, on_progress: Callable[[Progress], None] | None = None,
        controllers: Mapping[str, str | type] | None = None,
        pcap: Sequence[str] = (), pcap_snaplen: int = 0, telemetry: bool = True,
        argv: Sequence[str] | None = None, batch: BatchRef | None = None,
        source: str | None = None) -> Run:
    """Run ``scenario`` (a file, or a scenario already parsed) under ``policies``
    (default: the scenario's own), each on a fresh fabric, and record it in ``out``
    (default data/runs/<run-id>).

    ``seed`` overrides the scenario's; ``duration`` caps each policy's traffic (seconds);
    ``on_progress`` receives a :class:`Progress` at every step; ``controllers`` adds
    controllers a policy may name, besides the built-in ones and the scenario's own
    (name -> a :class:`labkit.control.Controller` subclass, or "file.py:Class"); ``pcap``
    names links to capture (``pcap_snaplen`` bytes per packet, 0 = whole);
    ``telemetry=False`` leaves the probes out (only to measure what they cost); ``argv`` is
    the command line recorded in the manifest (the CLI passes its own); ``batch`` (the
    batch's id, the point's index and parameters) is recorded in it too, for
    :func:`labkit.load_runs`; ``source`` is the name errors give the scenario (default:
    its file, or "scenario <name>" for a parsed one: the CLI names the file it parsed).
    Returns the recorded run."""
    from labkit.analysis.summarize import summarize
    from labkit.control import CONTROLLERS
    from labkit.kernel import cgroups
    from labkit.runs import experiment

    req = resolve.resolve_run(scenario, policies, source=source, seed=seed, duration=duration,
                              controllers=controllers, pcap=pcap, pcap_snaplen=pcap_snaplen,
                              telemetry=telemetry)
    sc, source, topology, users = req.scenario, req.source, req.topology, req.controllers
    if problem := not_ready(sc) or (cgroups.problem() if sc.programs else None):
        raise NotReady(problem)
    tell = on_progress or (lambda _: None)
    results = []
    kept: Path | None = None

    def manifest(rec: Recording[RunManifest]) -> RunManifest:
        nonlocal kept
        program = _classifier_program(sc, source, rec.work)  # a bad one records nothing
        tmp = rec.writer.tmp
        kept = _keep_program(tmp, sc, program)
        return RunManifest(
            run_id=rec.run_id, scenario=sc.to_dict(), scenario_sha256=sc.sha256,
            policies=tuple(p.name for p in req.policies), seed=sc.seed, duration_s=duration,
            start_time=rundir.now_iso(), argv=tuple(argv) if argv else None, batch=batch,
            controllers=_keep_sources(tmp, "controllers", users),
            kinds=_keep_sources(tmp, "kinds", req.kinds),
            classifier=KeptObject(object=str(kept.relative_to(tmp)),
                                  sha256=sha256_file(kept)) if kept else None,
            auto=req.auto, rates=req.rates, provenance=provenance())

    with _recording(sc.name, out, manifest) as rec:
        writer, registry = rec.writer, Registry(rec.run_id)
        for pol in req.policies:
            policy, total = pol.name, sc.iterations
            tell(Progress(policy, "building", 0, total))
            result = experiment.run_policy(
                sc, topology, pol, registry, writer.agents_dir / policy,
                duration_s=duration, pcap=req.pcap, pcap_dir=writer.tmp / policy,
                progress=_running(tell, policy, total),
                telemetry=telemetry, controllers={**CONTROLLERS, **users},
                classifier_object=kept)
            results.append(result)
            tell(Progress(policy, "done", len({o.op for o in result.collectives}), total))
        tables = rundir.tables_from(results)
        summary = summarize(tables, experiment.summary_meta(sc, topology, rec.run_id, results))
    writer.write_manifest(replace(rec.manifest, fidelity={p: s.fidelity.to_json() for p, s
                                                          in summary.policies.items()},
                                  notes=tuple(registry.held.values()) or None))
    return rundir.load_run(writer.finish(tables, summary))


def shell(scenario: str | Path | Scenario, policy: str = "fifo",
          controllers: Mapping[str, str | type] | None = None,
          interact: Callable | None = None, *, source: str | None = None) -> tuple[str, ...]:
    """Build ``scenario``'s fabric as a run of ``policy`` would (lanes, probes, valves),
    start no traffic, and hand it to ``interact`` (default: Mininet's command line) until
    it returns; then tear everything down, as after a run. Nothing is recorded.
    ``source``: as :func:`run`'s. Returns what the teardown left to processes labkit did
    not start (a namespace a background job of the shell's user still holds)."""
    from labkit.control import CONTROLLERS
    from labkit.runs import experiment

    sc, source, _ = resolve.rated(scenario, source=source)
    users = resolve.user_controllers(sc, source, controllers or {})
    (pol,) = resolve.policies_of(sc, source, policy, list(users))
    if problem := not_ready(sc):
        raise NotReady(problem)
    with _claimed(f"shell-{sc.name}") as run_id, work_dir(run_id) as build:
        program = _classifier_program(sc, source, build)
        registry = Registry(run_id)
        with experiment.PolicyFabric(
                sc, Topology(sc.fabric), pol, registry,
                controllers={**CONTROLLERS, **users}, classifier_object=program) as pf:
            pf.start(recording=False)  # its controller, a lossless fabric's pauses, no probe
            try:
                (interact or (lambda pf: pf.fabric.interact()))(pf)
            finally:
                pf.stop()
    return tuple(registry.held.values())


def sweep(scenario: str | Path | Scenario, op: str = "all_reduce", algo: str | None = None,
          sizes: Sequence[int] = (), iters: int = 10, *, out: str | Path | None = None,
          on_row: Callable | None = None, argv: Sequence[str] | None = None) -> Sweep:
    """Measure ``op`` (``algo``; left out: the op's first, as ``labkit sweep`` without
    ``--algo``: ring, direct, pairwise) at every message size in ``sizes`` over the
    scenario's ranks and fabric, ``iters`` timed ops per size (nccl-tests' figures, one
    :class:`labkit.analysis.nccltests.Row` per size, each passed to ``on_row`` as it is done), and
    record the sweep in ``out`` (default data/runs/<run-id>)."""
    from labkit.model.traffic import schedules
    from labkit.runs import experiment

    sc, source, rates = resolve.rated(scenario)
    if algo is None:
        if op not in schedules.ALGOS:
            raise ScenarioError(f"scenario {sc.name}", "op",
                                f"no op {op!r} (known: {', '.join(schedules.OPS)})")
        algo = schedules.ALGOS[op][0]
    check_sweep(sc, op, algo, sizes, iters)
    ranks = sc.ranks
    algos: str | dict[int, str] = algo
    auto: AutoChoices | None = None
    if algo == AUTO:
        model, path = resolve.model_of(sc, source)
        ranks = autotune.ring_order(Topology(sc.fabric), sc.ranks)
        allowed = resolve.runnable(sc, model, sizes)
        choices = {size: model.choose(size, allowed) for size in sizes}
        algos = {size: c.algo for size, c in choices.items()}
        auto = AutoChoices(model=str(path), ranks=tuple(ranks),
                           choices={str(size): Choice(algo=c.algo, reason=c.reason)
                                    for size, c in choices.items()})
    if problem := not_ready(sc):
        raise NotReady(problem)
    notes: list[str] = []
    with _recording(f"sweep-{sc.name}", out, lambda rec: SweepManifest(
            run_id=rec.run_id, scenario=sc.to_dict(), scenario_sha256=sc.sha256, op=op,
            algo=algo, sizes=tuple(sizes), iters=iters, start_time=rundir.now_iso(),
            auto=auto, rates=rates, argv=tuple(argv) if argv else None,
            provenance=provenance())) as rec:
        rows = experiment.run_sweep(sc, op, algos, list(sizes), iters, Registry(rec.run_id),
                                    rec.work, on_row=on_row, ranks=ranks, notes=notes)
        if notes:
            rec.writer.write_manifest(replace(rec.manifest, notes=tuple(notes)))
    path = rundir.finish_sweep(rec.writer, rows)
    return Sweep(path, rows, pl.read_parquet(path / "sweep.parquet").drop("run_id"))


TUNE_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20)


def tune(scenario: str | Path | Scenario, sizes: Sequence[int] = TUNE_SIZES, iters: int = 5,
         *, out: str | Path | None = None, on_row: Callable | None = None,
         argv: Sequence[str] | None = None, models: Path | None = None) -> Tuning:
    """Sweep every All-Reduce algorithm the scenario's ranks can run at ``sizes`` on its
    fabric (ranks in :func:`labkit.model.autotune.ring_order`), ``iters`` timed ops per size,
    fit the cost model ``algo: auto`` chooses by, and keep it for this fabric (in
    ``models``, default data/models). ``on_row(algo, row)`` sees each row as it is done.
    Recorded in ``out`` (default data/runs/<run-id>): ``tune.parquet`` (every algorithm's
    rows) and ``model.json``."""
    from labkit.runs import experiment

    sc, _, rates = resolve.rated(scenario)
    algos = [a for a in autotune.ALGOS if resolve.can_run(sc, a, sizes)]
    for algo in algos:
        check_sweep(sc, "all_reduce", algo, sizes, iters)
    if problem := not_ready(sc):
        raise NotReady(problem)
    ranks = autotune.ring_order(Topology(sc.fabric), sc.ranks)
    sweeps: dict[str, list[Row]] = {}
    notes: list[str] = []
    with _recording(f"tune-{sc.name}", out, lambda rec: TuneManifest(
            run_id=rec.run_id, scenario=sc.to_dict(), scenario_sha256=sc.sha256,
            algos=tuple(algos), sizes=tuple(sizes), iters=iters, ranks=tuple(ranks),
            start_time=rundir.now_iso(), rates=rates, argv=tuple(argv) if argv else None,
            provenance=provenance())) as rec:
        for algo in algos:
            sweeps[algo] = experiment.run_sweep(
                sc, "all_reduce", algo, list(sizes), iters, Registry(rec.run_id),
                rec.work / algo, on_row=partial(on_row, algo) if on_row else None,
                ranks=ranks, notes=notes)
        records = {a: rundir.sweep_records(rows) for a, rows in sweeps.items()}
        (rec.writer.tmp / "tune.json").write_text(json.dumps(records, indent=1) + "\n")
        # an algorithm with wrong values at all but one size cannot be fitted: left out
        fitted = {a: rows for a, rows in records.items()
                  if sum(1 for r in rows if not r["wrong"]) >= 2}
        if not fitted:
            raise RuntimeError("no algorithm ran without wrong values at two sizes: "
                               "nothing to fit (every row is kept in tune.json)")
        left_out = tuple(sorted(set(sweeps) - set(fitted)))
        rec.writer.write_manifest(replace(rec.manifest, not_fitted=left_out,
                                          notes=tuple(notes)))
        model = autotune.Model.fit(fitted, resolve.model_key(sc))
    path = rundir.finish_tune(rec.writer, sweeps, model)
    return Tuning(path, records, model, store.save_model(model, rec.run_id, models),
                  rundir.read_manifest(path, TuneManifest))


def calibrate(scenario: str | Path | Scenario, policies: Sequence[str] | None = None, *,
              seconds: float = TRIAL_SECONDS, out: str | Path | None = None,
              on_trial: Callable[[float, str], None] | None = None,
              on_progress: Callable[[Progress], None] | None = None,
              argv: Sequence[str] | None = None, source: str | None = None) -> Calibration:
    """Find the highest rate this machine holds ``scenario``'s fabric at (see
    :mod:`labkit.analysis.calibration`): trials of ``seconds`` of traffic per policy (``policies``,
    default the scenario's own), each recorded as a run; ``on_trial(factor, what)`` hears
    "running", then "held" or the trial's first fault; ``on_progress`` each trial's run
    progress. A trial whose run fails counts as not held. The
    :class:`~labkit.analysis.calibration.Calibration` is returned and recorded in ``out`` (default
    data/runs/<id>). ``source``: as :func:`run`'s."""
    from labkit.analysis import calibration as cal
    from labkit.kernel.capture import CpuSampler

    sc, source = resolve.loaded(scenario, source)
    sc = cal.as_written(sc)  # its own rate factor is what a calibration finds
    if sc.programs:
        raise ScenarioError(source, sc.programs[0].key, "a calibration scales compute times with "
                            "the links, and a program's compute is its own: calibrate a "
                            "scenario with labkit's All-Reduce or job on the same fabric")
    if seconds <= 0:
        raise ScenarioError(source, "seconds", f"must be > 0, got {seconds}")
    if policies:  # checked here, not by the first trial, which would be recorded as failed
        policies = [p.name for p in resolve.policies_of(
            sc, source, policies, list(resolve.user_controllers(sc, source, {})))]
    if problem := not_ready(sc):
        raise NotReady(problem)
    base_rate = cal.bottleneck_rate(sc)
    trials: list[cal.Trial] = []
    tell = on_trial or (lambda *_: None)

    def trial(factor: float) -> bool:
        found: tuple[str, ...]
        tell(factor, "running")
        try:
            done = run(cal.scaled(sc, factor), policies, duration=seconds,
                       on_progress=on_progress, argv=argv)
        except RunFailed as exc:  # most likely where the machine is overwhelmed
            found, path, busy = (f"the run failed: {exc.__cause__ or exc}",), exc.partial, 0.0
        else:
            found, path = tuple(cal.faults(done.summary)), done.path
            busy = max((p.cpu_busy or 0.0) for p in done.summary.policies.values())
        trials.append(cal.Trial(factor, base_rate * factor, str(path), found, busy))
        tell(factor, found[0] if found else "held")
        return not found

    busy_before = CpuSampler.busy_over(1.0)
    # the machine is the calibration's from its first trial to its last; each trial is a
    # run of its own, which keeps the caller's objects from the garbage collector itself
    with _recording(f"calibrate-{sc.name}", out, lambda rec: CalibrationManifest(
            run_id=rec.run_id, scenario=sc.to_dict(), scenario_sha256=sc.sha256,
            start_time=rundir.now_iso(), argv=tuple(argv) if argv else None,
            provenance=provenance()), freeze=False) as rec:
        cal.factors_to_try(trial)
    result = cal.Calibration(sc.name, base_rate, sc.scale_factor,
                             tuple(sorted(trials, key=lambda t: t.factor)), busy_before)
    rec.writer.finish({}, result.to_dict())
    return result


def _classifier_program(sc: Scenario, source: str, build: Path) -> Path | None:
    """The scenario's own classifier object (compiled into ``build`` from a .bpf.c), loaded
    once to check it can stand in for the built-in one; None: the built-in one."""
    from labkit.kernel import lanes

    if sc.classifier is None:
        return None
    path = Path(sc.classifier)
    try:
        if path.name.endswith(".bpf.c"):
            path = bpf.compile_object(path, build / path.name.replace(".bpf.c", ".bpf.o"))
        lanes.check_object(path)
    except ValueError as exc:
        raise ScenarioError(source, "lanes.program", str(exc)) from None
    return path


def _keep_program(run_dir: Path, sc: Scenario, program: Path | None) -> Path | None:
    """Copy the user's classifier (its source too, if given) into ``programs/`` of the run;
    the kept object, which the run then loads."""
    if program is None or sc.classifier is None:
        return None
    (run_dir / "programs").mkdir()
    if sc.classifier.endswith(".bpf.c"):
        shutil.copy(sc.classifier, run_dir / "programs")
    return Path(shutil.copy(program, run_dir / "programs"))


def _keep_sources(run_dir: Path, folder: str, classes: Mapping[str, type]
                  ) -> dict[str, UserClass]:
    """Keep the source of each user class in ``<folder>/<name>.py`` of the run; what the
    manifest says of them."""
    from labkit.model.extend import source_of

    recorded = {}
    for name, cls in classes.items():
        text = source_of(cls)
        if text is not None:
            (run_dir / folder).mkdir(exist_ok=True)
            (run_dir / folder / f"{name}.py").write_text(text)
        recorded[name] = UserClass(
            qualname=cls.__qualname__,
            source=f"{folder}/{name}.py" if text is not None else None,
            sha256=hashlib.sha256(text.encode()).hexdigest() if text else None)
    return recorded


@contextmanager
def _caller_objects_frozen() -> Iterator[None]:
    """Keep the garbage collector off the objects that existed before the run. In a big
    process — a notebook's kernel, a test runner — a full collection over them took about
    half a second, measured, and stalled every thread of the run meanwhile: the queue
    poller, the CPU sampler and the controller went blind (one missed burst in a tier-2
    run). Collections during the run then scan only the run's own objects."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def _recorded(writer: RunWriter) -> Iterator[None]:
    """Say in the manifest how a run that did not finish ended, and keep its data."""
    try:
        yield
    except RunLockedError:
        writer.discard()  # nothing was recorded: the --out stays free for the retry
        raise
    except KeyboardInterrupt:
        writer.ended("interrupted")
        raise
    except Exception as exc:  # agents, the kernel, or a user's controller: recorded, kept
        writer.ended("incomplete", f"{type(exc).__name__}: {exc}")
        raise RunFailed(f"{exc}; partial data kept in {writer.tmp}", writer.tmp) from exc


__getattr__ = moved.forward(__name__, moved.to_module(
    "labkit.runs.resolve", "resolve_rates", "resolve_auto", "model_key", "runnable"))
