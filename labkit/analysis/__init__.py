"""The analysis layer: computes from tables and touches nothing.

A run's summary: :mod:`.summarize` (from :mod:`.windows`, :mod:`.workloads`,
:mod:`.ports`, :mod:`.fidelity` and each feature's :mod:`.sections`); the figures' and
notebooks' frames: :mod:`.frames`; a program's unmarked ops: :mod:`.jobtiming`;
:mod:`.nccltests` (a sweep's figures in nccl-tests' format), :mod:`.calibration`
(scaled scenarios, a recorded run's faults) and :mod:`.describe` (a fabric as plain data).

Until the next release ``labkit.analysis.<name>`` and ``labkit.analysis.metrics.<name>``
still give the names of the old module ``metrics``, with a DeprecationWarning.
"""

import warnings
from importlib import import_module

_MODULES = ("metrics", "windows", "workloads", "ports", "fidelity", "sections", "summarize",
            "frames", "jobtiming", "nccltests", "calibration", "describe")


def __getattr__(name: str):
    if not name.startswith("_") and name not in _MODULES:
        homes = import_module(f"{__name__}.metrics")._HOMES
        if name in homes:
            warnings.warn(f"labkit.analysis.{name} is now labkit.analysis.{homes[name]}.{name}; "
                          "the old path goes in the next release", DeprecationWarning,
                          stacklevel=2)
            globals()[name] = getattr(import_module(f"{__name__}.{homes[name]}"), name)
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
