"""The analysis layer: computes from tables and touches nothing.

:mod:`.metrics` (a run's tables into its summary and its figures' frames),
:mod:`.nccltests` (a sweep's figures in nccl-tests' format), :mod:`.calibration`
(scaled scenarios, a recorded run's faults) and :mod:`.describe` (a fabric as plain data).

Until the next release ``labkit.analysis.<name>`` still gives :mod:`.metrics`' names (this
package was the module ``labkit/analysis.py``), with a DeprecationWarning.
"""

import warnings
from importlib import import_module

_MODULES = ("metrics", "nccltests", "calibration", "describe")


def __getattr__(name: str):
    if not name.startswith("_") and name not in _MODULES:
        metrics = import_module(f"{__name__}.metrics")
        if hasattr(metrics, name):
            warnings.warn(f"labkit.analysis.{name} is now labkit.analysis.metrics.{name}; "
                          "the old path goes in the next release", DeprecationWarning,
                          stacklevel=2)
            globals()[name] = getattr(metrics, name)  # warned once, as an old module path
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
