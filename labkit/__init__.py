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
"""

from importlib import import_module

_API = {"run": "labkit.runner", "sweep": "labkit.runner", "shell": "labkit.runner",
        "calibrate": "labkit.runner", "Calibration": "labkit.calibration",
        "tune": "labkit.runner", "Tuning": "labkit.runner", "load_tuning": "labkit.rundir",
        "Progress": "labkit.runner",
        "Sweep": "labkit.runner", "NotReady": "labkit.runner", "RunFailed": "labkit.runner",
        "Run": "labkit.rundir", "load_run": "labkit.rundir", "RunDataError": "labkit.rundir",
        "ScenarioError": "labkit.scenario", "load_scenario": "labkit.scenario",
        "run_batch": "labkit.batch", "load_runs": "labkit.batch", "Batch": "labkit.batch",
        "load_grid": "labkit.grid", "GridError": "labkit.grid"}
_NAMED_THERE = {"load_scenario": "load", "load_grid": "load"}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'labkit' has no attribute {name!r}")
    return getattr(import_module(_API[name]), _NAMED_THERE.get(name, name))
