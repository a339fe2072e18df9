"""labkit: emulate, measure and relieve the network bottleneck of AI training.

The API, imported on first use (``import labkit`` stays light for notebooks without root):

* ``labkit.run(scenario, policies=None, out=None, seed=None, duration=None,
  on_progress=None)`` runs a scenario and returns the recorded :class:`Run`;
* ``labkit.sweep(scenario, op, algo, sizes, iters)`` measures a collective across message
  sizes as nccl-tests does and returns the recorded :class:`Sweep`;
* ``labkit.tune(scenario, sizes, iters)`` sweeps every All-Reduce algorithm on the
  scenario's fabric and keeps the model ``algo: auto`` chooses by (a :class:`Tuning`);
* ``labkit.calibrate(scenario, policies=None, seconds=8)`` finds the highest link rate
  this machine emulates the scenario at faithfully and returns the :class:`Calibration`;
* ``labkit.shell(scenario, policy)`` builds a scenario's fabric without traffic and opens
  Mininet's command line in it;
* ``labkit.run_batch(grid, executor="local", out=None)`` runs every point of a grid file
  (scenario keys x policies x seeds) here or as Slurm jobs and returns the recorded
  :class:`Batch`;
* ``labkit.load_run(path)`` reads a recorded run back (``labkit.load_tuning(path)`` a
  :class:`Tuning`); ``labkit.load_runs(paths)`` reads
  many runs (or a batch) as one polars frame, a row per run and policy
  (``labkit.load_jobs(paths)``: per run, policy and job, for runs of several jobs);
* ``labkit.load_scenario(path)`` and ``labkit.load_grid(path)`` parse and check a
  scenario or a grid file;
* ``labkit.sample(name)`` finds a shipped recorded run (``data/sample/<name>``; sweeps and
  tunings too: ``"sweeps/ring"``, ``"tune"``) and ``labkit.scenario_file(name)`` a shipped
  scenario (``topologies/<name>.yaml``), wherever a notebook runs (:mod:`labkit.model.paths`,
  which also holds where labkit writes: ``labkit.model.paths.use`` hands in others).

The package's folders are its layers, bottom to top: ``model``, ``kernel``, ``traffic``,
``control``, ``analysis``, ``runs``, ``ui`` (docs/architecture.md). ``labkit.torch`` is
imported by users' training jobs under that name and stays here.

Module paths from before the folders (``labkit.rundir``, ``labkit.scenario``,
``python -m labkit.labs``, ...) still import, until the next release, as the module at
the new path, with a DeprecationWarning naming it: :data:`_MOVED` lists them, and the
finder below (first on ``sys.meta_path``) serves them. ``labkit.analysis.<name>`` (the
module ``labkit/analysis.py`` then) is served by ``labkit/analysis/__init__.py``.
"""

import sys
import warnings
from importlib import import_module
from importlib._abc import Loader  # importlib.abc's (which imports tempfile, lzma, ...)
from importlib.machinery import ModuleSpec
from importlib.util import find_spec
from types import FrameType

_RUNNER, _RUNDIR, _BATCH = "labkit.runs.runner", "labkit.runs.rundir", "labkit.runs.batch"
_API = {"run": _RUNNER, "sweep": _RUNNER, "shell": _RUNNER, "calibrate": _RUNNER,
        "Calibration": "labkit.analysis.calibration", "tune": _RUNNER, "Tuning": _RUNDIR,
        "load_tuning": _RUNDIR, "Progress": _RUNNER, "Sweep": _RUNNER, "NotReady": _RUNNER,
        "RunFailed": _RUNNER, "Run": _RUNDIR, "load_run": _RUNDIR, "RunDataError": _RUNDIR,
        "ScenarioError": "labkit.model.scenario", "load_scenario": "labkit.model.scenario",
        "run_batch": _BATCH, "load_runs": _BATCH, "load_jobs": _BATCH, "Batch": _BATCH,
        "load_grid": "labkit.model.grid", "GridError": "labkit.model.grid",
        "sample": "labkit.model.paths", "scenario_file": "labkit.model.paths",
        "SampleNotFound": "labkit.model.paths"}
_NAMED_THERE = {"load_scenario": "load", "load_grid": "load"}
__all__ = sorted(_API)

_MOVED = {  # old module path -> new (issue 29: the folders are the layers), for one release
    **{f"labkit.{m}": f"labkit.model.{m}" for m in
       ("abi", "autotune", "extend", "grid", "lossless", "scenario", "schema", "topo")},
    **{f"labkit.traffic.{m}": f"labkit.model.traffic.{m}" for m in
       ("configs", "jobs", "lines", "nvme", "roce", "schedules", "timeline", "wire")},
    **{f"labkit.{m}": f"labkit.kernel.{m}" for m in
       ("bpf", "capture", "cgroups", "fabric", "interrupts", "jobmark", "lanes", "loss",
        "netns", "pauser", "pcap", "registry", "tc", "telemetry")},
    **{f"labkit.control.{m}": f"labkit.kernel.{m}" for m in ("feed", "gates", "valve")},
    "labkit.agents": "labkit.traffic.agents",
    **{f"labkit.{m}": f"labkit.analysis.{m}" for m in ("calibration", "describe", "nccltests")},
    **{f"labkit.{m}": f"labkit.runs.{m}" for m in ("batch", "experiment", "rundir", "runner")},
    **{f"labkit.{m}": f"labkit.ui.{m}" for m in
       ("cli", "doctor", "figures", "labs", "plots", "widgets")},
}


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(_API[name]), _NAMED_THERE.get(name, name))
    if f"labkit.{name}" in _MOVED:  # labkit.rundir without importing it first, as before
        return import_module(f"labkit.{name}")
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")


def _new_path(name: str) -> str | None:
    """Where old module path ``name`` is now (a moved package's modules moved with it)."""
    if name.startswith("labkit."):
        for old, new in _MOVED.items():
            if name == old or name.startswith(old + "."):
                return new + name[len(old):]
    return None


def _warn(old: str, new: str) -> None:
    """The DeprecationWarning, attributed to the code that named ``old``: past this file
    and importlib (warnings itself skips importlib's bootstrap frames as it counts)."""
    level = 2
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if file == __file__ or file.endswith(("importlib/__init__.py", "importlib/util.py")):
            level += 1
        elif not ("importlib" in file and "_bootstrap" in file):
            break
        frame = frame.f_back
    warnings.warn(f"{old} is now {new}; the old path goes in the next release",
                  DeprecationWarning, stacklevel=level)


class _OldPaths(Loader):
    """A meta path finder and loader: an old module path imports as the module at its new
    path (the same object, in ``sys.modules`` under both names); ``python -m`` with an old
    path runs the new module's code."""

    def find_spec(self, name, path=None, target=None):
        new = _new_path(name)
        real = find_spec(new) if new else None
        if real is None:
            return None
        spec = ModuleSpec(name, self, origin=real.origin, loader_state={"new": new},
                          is_package=real.submodule_search_locations is not None)
        if real.submodule_search_locations is not None:
            spec.submodule_search_locations = list(real.submodule_search_locations)
        return spec

    def create_module(self, spec):
        module = import_module(spec.loader_state["new"])
        spec.loader_state["spec"] = module.__spec__  # the import system sets spec on it
        return module

    def exec_module(self, module):
        old = module.__spec__
        module.__spec__ = old.loader_state["spec"]
        _warn(old.name, module.__name__)

    def get_code(self, name):  # runpy: python -m <old path>
        from importlib.abc import InspectLoader

        new = _new_path(name)
        real = find_spec(new) if new else None
        if new is None or real is None or not isinstance(real.loader, InspectLoader):
            raise ImportError(f"no code for {name!r}", name=name)  # find_spec served it
        if not name.endswith(".__main__"):  # a package's: its import has warned
            _warn(name, new)
        return real.loader.get_code(new)


sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != __name__]  # reloaded
sys.meta_path.insert(0, _OldPaths())
