"""The analysis layer: computes from tables and touches nothing.

:mod:`.metrics` (a run's tables into its summary and its figures' frames),
:mod:`.nccltests` (a sweep's figures in nccl-tests' format), :mod:`.calibration`
(scaled scenarios, a recorded run's faults) and :mod:`.describe` (a fabric as plain data).
"""
