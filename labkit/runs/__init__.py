"""The run layer: :mod:`.runner` (``labkit.run``, ``.sweep``, ``.tune``, ``.calibrate``),
:mod:`.experiment` (one policy end to end), :mod:`.rundir` (run directories),
:mod:`.provenance` (what recorded a run), :mod:`.store` (the models kept, the calibrations
found) and :mod:`.batch` (grids of runs, here or on Slurm).

The folder is ``runs``, not ``run``: ``labkit.run`` is the API's function, and a
subpackage of that name would take its place as an attribute of :mod:`labkit`.
"""
