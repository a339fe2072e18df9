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
  tuning); ``labkit.load_runs(paths)`` reads
  many runs (or a batch) as one polars frame, a row per run and policy;
* ``labkit.load_scenario(path)`` and ``labkit.load_grid(path)`` parse and check a
  scenario or a grid file.

The package's folders are its layers, bottom to top: ``model``, ``kernel``, ``traffic``,
``control``, ``analysis``, ``runs``, ``ui`` (docs/architecture.md). ``labkit.torch`` is
imported by users' training jobs under that name and stays here.
"""

from importlib import import_module

_RUNNER, _RUNDIR, _BATCH = "labkit.runs.runner", "labkit.runs.rundir", "labkit.runs.batch"
_API = {"run": _RUNNER, "sweep": _RUNNER, "shell": _RUNNER, "calibrate": _RUNNER,
        "Calibration": "labkit.analysis.calibration", "tune": _RUNNER, "Tuning": _RUNNER,
        "load_tuning": _RUNDIR, "Progress": _RUNNER, "Sweep": _RUNNER, "NotReady": _RUNNER,
        "RunFailed": _RUNNER, "Run": _RUNDIR, "load_run": _RUNDIR, "RunDataError": _RUNDIR,
        "ScenarioError": "labkit.model.scenario", "load_scenario": "labkit.model.scenario",
        "run_batch": _BATCH, "load_runs": _BATCH, "Batch": _BATCH,
        "load_grid": "labkit.model.grid", "GridError": "labkit.model.grid"}
_NAMED_THERE = {"load_scenario": "load", "load_grid": "load"}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'labkit' has no attribute {name!r}")
    return getattr(import_module(_API[name]), _NAMED_THERE.get(name, name))
