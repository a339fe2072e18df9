"""Deprecated: this module was split along the data flow. A run's summary is
:mod:`labkit.analysis.summarize` (from :mod:`.windows`, :mod:`.workloads`, :mod:`.ports`,
:mod:`.fidelity` and :mod:`.sections`); the figures' and notebooks' frames are
:mod:`labkit.analysis.frames`. Until the next release ``labkit.analysis.metrics.<name>``
still gives each name from its new home, with a DeprecationWarning."""

import warnings
from importlib import import_module

# each public name of the old module: the module of labkit.analysis it lives in now
_HOMES = {
    **dict.fromkeys(("op_times", "windows", "counter_delta", "cdf"), "windows"),
    **dict.fromkeys(("allreduce", "job", "op_instances", "program", "with_slowdowns",
                     "program_notes"), "workloads"),
    **dict.fromkeys(("utilizations", "port_utilization", "busiest_port", "lane_rates",
                     "bottleneck_lanes", "backlog_series", "max_backlog",
                     "congested_windows"), "ports"),
    **dict.fromkeys(("CPU_BOUND_BUSY", "cpu_busy", "AT_RATE", "AT_RATE_WINDOWS",
                     "LATE_OF_SOJOURN", "LATE_SHARE_LIMIT", "SLOW_LIMIT", "GAP_MIN_PAIRS",
                     "dequeue_fidelity", "late_reason", "fidelity"), "fidelity"),
    **dict.fromkeys(("goodput_mbps", "storage", "transport", "lossless", "late_pauses",
                     "controller", "tcp", "queues", "command_notes"), "sections"),
    "summarize": "summarize",
    **dict.fromkeys(("part_of_windows", "lane_sojourns", "watched_ports",
                     "PORT_BACKLOG_COLUMNS", "port_backlogs", "allowed_storage",
                     "SUMMARY_COLUMNS", "summary_frame", "FIDELITY_COLUMNS", "fidelity_frame",
                     "latency_cdfs", "job_breakdown", "PROGRAM_OP_COLUMNS",
                     "program_ops_frame", "port_senders", "STAGES", "stage_of", "stage_frame",
                     "PHASES", "SPAN_PHASES", "iteration_phases", "phase_spans",
                     "summed_spans", "SWEEP_COLUMNS", "sweep_frame", "pick_sweeps",
                     "placement_frame", "auto_frame", "LOSSLESS_COLUMNS", "lossless_frame",
                     "pause_frame", "io_latency_cdfs"), "frames"),
}


def __getattr__(name: str):
    if (home := _HOMES.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"labkit.analysis.metrics.{name} is now labkit.analysis.{home}.{name}; "
                  "the old path goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(import_module(f"labkit.analysis.{home}"), name)


def __dir__() -> list[str]:
    return sorted(_HOMES)
