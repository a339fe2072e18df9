"""plotly figure builders over a recorded run, in one theme.

Colours are the Okabe-Ito colour-blind-safe palette; every axis carries its
unit; every figure's title names the scenario, the run id and the scale factor,
so a figure lifted into a blog post still says where it came from.

The figures by family: :mod:`.runs` (a run's collective and queues), :mod:`.stages` (the
funnel and the three stages), :mod:`.jobs` (training jobs), :mod:`.shared` (jobs that
shared the fabric), :mod:`.comparisons` (runs side by side), :mod:`.sweeps` (sweeps and
tunings), :mod:`.fabric` (a scenario's fabric); the theme and titles they share in
:mod:`.theme`. Every name is served from here.
"""

from labkit.ui.plots.comparisons import DCTCP_COLORS, dctcp_queue, victim_io
from labkit.ui.plots.fabric import LINK_STYLES, NODE_COLORS, fabric_map
from labkit.ui.plots.jobs import job_timeline, parallelism, parallelism_comparison, stage_schedule
from labkit.ui.plots.runs import (
    collective_latency,
    lane_sojourn,
    op_time_cdf,
    queue_timeline,
    reroutes,
    valve_timeline,
)
from labkit.ui.plots.shared import (
    BURST_POLICIES,
    JOB_PALETTE,
    MARK_DASH,
    job_bursts,
    job_colors,
    job_iteration_cdfs,
)
from labkit.ui.plots.stages import (
    ABSENT_STAGE,
    BARS_PX,
    SOURCE_LABEL_PX,
    bottleneck_funnel,
    three_stages,
)
from labkit.ui.plots.sweeps import (
    SWEEP_PALETTE,
    sweep_busbw,
    sweep_colors,
    sweep_time,
    tuning_model,
)
from labkit.ui.plots.theme import (
    EM,
    EM_LOWER,
    EM_OTHER,
    FONT,
    FONT_PX,
    HEIGHT,
    LANE_COLORS,
    LANE_DASH,
    PHASE_COLORS,
    PHASE_LABELS,
    POLICY_COLORS,
    PORT_DASH,
    SUB_LINE_PX,
    SUB_PX,
    TITLE_PX,
    TITLE_X_PX,
    WIDTH,
    policy_color,
    recorded_by,
    runs_subtitle,
    subtitle,
    sweep_subtitle,
    text_px,
    tuning_subtitle,
    wrap,
)

__all__ = [
    "ABSENT_STAGE", "BARS_PX", "BURST_POLICIES", "DCTCP_COLORS", "EM", "EM_LOWER", "EM_OTHER",
    "FONT", "FONT_PX", "HEIGHT", "JOB_PALETTE", "LANE_COLORS", "LANE_DASH", "LINK_STYLES",
    "MARK_DASH", "NODE_COLORS", "PHASE_COLORS", "PHASE_LABELS", "POLICY_COLORS", "PORT_DASH",
    "SOURCE_LABEL_PX", "SUB_LINE_PX", "SUB_PX", "SWEEP_PALETTE", "TITLE_PX", "TITLE_X_PX",
    "WIDTH", "bottleneck_funnel", "collective_latency", "dctcp_queue", "fabric_map",
    "job_bursts", "job_colors", "job_iteration_cdfs", "job_timeline", "lane_sojourn",
    "op_time_cdf", "parallelism", "parallelism_comparison", "policy_color", "queue_timeline",
    "recorded_by", "reroutes", "runs_subtitle", "stage_schedule", "subtitle", "sweep_busbw",
    "sweep_colors", "sweep_subtitle", "sweep_time", "text_px", "three_stages", "tuning_model",
    "tuning_subtitle", "valve_timeline", "victim_io", "wrap",
]
