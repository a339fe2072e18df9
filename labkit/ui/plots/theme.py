"""The look every labkit figure shares, and its title block: the Okabe-Ito colours by
policy, lane and phase; the canvas, fonts and text widths; the theme and titles applied to
a figure, with a subtitle that says where its data came from (scenario, run, scale factor,
labkit's revision and the machine); the workload and policy a run's titles name."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.model.manifest import Provenance
from labkit.model.summary import Job, PolicySummary, Program
from labkit.runs.rundir import Run, Sweep, Tuning

POLICY_COLORS = {"isolated": "#009E73", "fifo": "#D55E00", "priority": "#0072B2",
                 "reactive": "#56B4E9", "proactive": "#CC79A7", "state-aware": "#000000",
                 # several jobs' policies (a run has these, rarely controllers too)
                 "together": "#E69F00", "fair": "#56B4E9", "job-priority": "#0072B2",
                 "job-weights": "#CC79A7", "interleave": "#000000"}
LANE_COLORS = {"vip": "#0072B2", "normal": "#999999", "low": "#E69F00", "all": "#CC79A7"}
LANE_DASH = {"vip": "solid", "normal": "dot", "low": "dash", "all": "dashdot"}
PHASE_COLORS = {"compute": "#009E73", "sending": "#56B4E9", "wire_wait": "#0072B2",
                "bubble": "#E69F00"}
PHASE_LABELS = {"compute": "compute", "sending": "sending/other", "wire_wait": "data on the wire",
                "bubble": "bubble"}
PORT_DASH = ("solid", "dash", "dot", "dashdot")
PORT_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7")  # ports told apart by colour
FONT = "Inter, Helvetica, Arial, sans-serif"


def policy_color(policy: str) -> str:
    """A policy's colour; ``priority+reactive`` takes its controller's."""
    return POLICY_COLORS.get(policy.rpartition("+")[2], "#999999")


WIDTH, HEIGHT = 960, 540  # the canvas labkit figures draws on (SVG and PNG)
FONT_PX = 13
TITLE_PX, SUB_PX = FONT_PX * 1.4, FONT_PX * 1.4 * 0.7  # plotly: title 1.4 x font, <sup> 0.7 x
TITLE_X_PX = WIDTH * 0.05  # the theme's title.x
SUB_LINE_PX = 24  # what each further subtitle line adds to the top margin
# Advance widths in em of DejaVu Sans, where Chromium falls back to for the theme's fonts
# on Debian, the widest of them: a text's width estimated before plotly.js draws it.
EM = {**dict.fromkeys("0123456789", .636), **dict.fromkeys(" .,·", .318),
      **dict.fromkeys("fjilI", .28), **dict.fromkeys("rt:;/()[]-", .39),
      **dict.fromkeys("mwMW%", .95), **dict.fromkeys("=+<>~", .84)}
EM_LOWER, EM_OTHER = .6, .72  # other lower-case letters; capitals and the rest


def text_px(text: str, size: float) -> float:
    """Estimated width in pixels of one line of plain ``text`` at font ``size``."""
    return size * sum(EM.get(c, EM_LOWER if c.islower() else EM_OTHER) for c in text)


def wrap(text: str, size: float, width_px: float, sep: str = " · ") -> list[str]:
    """``text`` in lines at most ``width_px`` wide, broken only after a ``sep``."""
    lines: list[str] = []
    for part in text.split(sep):
        if lines and text_px(lines[-1] + sep + part, size) <= width_px:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def themed(fig: go.Figure, title: str, sub: str, x: str, y: str) -> go.Figure:
    subs = wrap(sub, SUB_PX, WIDTH - 2 * TITLE_X_PX)
    fig.update_layout(
        template="plotly_white", font={"family": FONT, "size": FONT_PX},
        title={"text": "<br>".join([title, *(f"<sup>{s}</sup>" for s in subs)])},
        xaxis_title=x, yaxis_title=y, legend_title_text="",
    )
    return top_margin(fig, 80)


def top_margin(fig: go.Figure, px: int) -> go.Figure:
    """The top margin ``px`` for a title of one subtitle line, and room for the others."""
    return fig.update_layout(margin_t=px + SUB_LINE_PX * (fig.layout.title.text.count("<br>")
                                                           - 1))


def say_empty(fig: go.Figure, why: str) -> go.Figure:
    """A figure with nothing to draw says ``why`` where its plot would be, axes hidden."""
    fig.add_annotation(text=why, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 15, "color": "#555555"})
    return fig.update_xaxes(visible=False).update_yaxes(visible=False)


def titled(fig: go.Figure, run: Run, title: str, x: str, y: str) -> go.Figure:
    return themed(fig, title, subtitle(run), x, y)


def subtitle(run: Run) -> str:
    """Where a figure's data came from: scenario, run id, scale factor, the labkit
    revision and the machine that recorded it (:func:`recorded_by`); and the policies
    whose links did not keep time (``fidelity.links_kept_time``), if any."""
    s = run.summary
    late = [p for p, v in s.policies.items() if not v.fidelity.links_kept_time]
    return (f"{s.scenario} · run {s.run_id} · 1 emulated Mbit/s = "
            f"{s.scale_factor:g} real Mbit/s · {recorded_by(run.manifest.provenance)}"
            + (f" · links did not keep time under {', '.join(late)}" if late else ""))


def sweep_subtitle(sweep: Sweep) -> str:
    """Where a sweep's figures came from (:func:`subtitle` for a run)."""
    m = sweep.manifest
    if m is None:
        return f"{sweep.path.name} · recorded before sweeps kept a manifest"
    return (f"{m.scenario.get('name')} · sweep {m.run_id} · {m.op} ({m.algo}), {m.iters} "
            f"timed ops per size · {recorded_by(m.provenance)}")


def tuning_subtitle(tuning: Tuning) -> str:
    """Where a tuning's figures came from (:func:`subtitle` for a run)."""
    m = tuning.manifest
    return (f"{m.scenario.get('name')} · tuning {m.run_id} · fabric {tuning.model.fabric_key}"
            f" · {m.iters} timed ops per size · {recorded_by(m.provenance)}")


def runs_subtitle(runs: dict[str, Run]) -> str:
    """Where a figure drawn from several runs of one scenario came from (:func:`subtitle`
    for one run)."""
    first = next(iter(runs.values()))
    return (f"{first.summary.scenario} · runs "
            f"{', '.join(r.summary.run_id for r in runs.values())} · 1 emulated Mbit/s = "
            f"{first.summary.scale_factor:g} real Mbit/s · "
            f"{recorded_by(first.manifest.provenance)}")


def recorded_by(p: Provenance) -> str:
    """labkit's revision (12 digits, ``-dirty`` kept) and the machine: CPUs and kernel."""
    rev, dash, state = p.labkit_revision.partition("-")
    cpus = f"{p.cpus} CPU{'s' if p.cpus != 1 else ''}, " if p.cpus else ""
    return f"labkit {rev[:12]}{dash}{state} · {cpus}Linux {p.kernel}"


def workload_of(run: Run) -> str:
    """What the collective lanes carry in this run: a training job, the user's program or
    the All-Reduce."""
    w = next(iter(run.summary.policies.values())).workload
    if isinstance(w, Job):
        return f"{w.parallelism}-parallel job"
    return f"your program {w.name}" if isinstance(w, Program) else "All-Reduce"


def policy_of(run: Run, policy: str) -> PolicySummary:
    policies = run.summary.policies
    if policy not in policies:
        raise ValueError(f"{run.path}: no policy {policy!r} in this run "
                         f"(it has {', '.join(policies)})")
    return policies[policy]
