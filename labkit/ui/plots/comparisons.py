"""Runs of one scenario side by side: the I/O completion times of a storage entry (a
victim of congestion spreading, lossy against lossless) and the queue under DCTCP against
TCP, with what the DCTCP paper's analysis predicts."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.analysis import frames
from labkit.analysis.frames import propagation_rtt_ms
from labkit.analysis.ports import backlog_series
from labkit.analysis.windows import op_times, windows
from labkit.model.summary import Bottleneck
from labkit.runs.rundir import Run
from labkit.ui.plots.theme import PORT_DASH, policy_color, policy_of, runs_subtitle, themed


def victim_io(runs: dict[str, Run], entry: str = "victim", policy: str = "fifo") -> go.Figure:
    """CDFs of one storage entry's I/O completion times under ``policy``, one line per run
    (``runs``: a name for each, e.g. lossy and lossless): congestion spreading, as the
    victim of a paused fabric sees it."""
    spans = {name: windows(op_times(run["collectives"]))[policy]
             for name, run in runs.items()}
    cdfs = frames.io_latency_cdfs({name: run["ios"] for name, run in runs.items()}, spans,
                                  entry, policy)
    fig = go.Figure()
    for i, (name, (x, y)) in enumerate(cdfs.items()):
        fig.add_scatter(x=x, y=y, mode="lines", name=name,
                        line={"shape": "hv", "dash": PORT_DASH[i % len(PORT_DASH)],
                              "color": policy_color(policy)})
    return themed(fig, f"I/O completion time of {entry} under {policy}", runs_subtitle(runs),
                  "I/O completion time (ms)", "fraction of I/Os")


DCTCP_COLORS = ("#0072B2", "#D55E00", "#009E73")  # one per run


def _packets_in_flight(run: Run, bottleneck: Bottleneck, frame: int,
                       senders: list[str]) -> float:
    """C·RTT: full frames the bottleneck port sends over its flows' mean propagation round
    trip (0: a run recorded before links had delays)."""
    links = run.manifest.scenario["fabric"]["links"] if run.manifest else []
    node = bottleneck.port.partition("-")[0]
    a, _, b = bottleneck.link.partition("-")
    far = b if a == node else a
    rtts = [propagation_rtt_ms(links, s, far) for s in senders]
    rtt_s = sum(rtts) / len(rtts) / 1e3 if rtts else 0.0
    return bottleneck.rate_mbps * 1e6 / (frame * 8) * rtt_s


def dctcp_queue(runs: dict[str, Run], policy: str = "fifo",
                seconds: tuple[float, float] = (1.0, 7.0), zoom_s: float = 0.5) -> go.Figure:
    """The queue at each run's busiest bottleneck port in full frames (``runs``: a name for
    each, e.g. DCTCP and TCP): above, all of them over ``seconds`` of their ops (from
    their start); below, the run that marks at K over its first ``zoom_s`` of them, with
    what the DCTCP paper's analysis predicts for its N lk_dctcp flows: the queue peaks at
    ``Q_max = K + N`` and swings ``A = ½·√(2N(C·RTT + K))`` below it (C·RTT: the packets
    the port sends in one propagation round trip from its flows' senders, from the links'
    ``delay_ms``; 0 on links without one)."""
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.14,
                        subplot_titles=("all runs", "the run that marks at K, closer"))
    marking: tuple[int, int, float] | None = None  # the marking run's K, N and C·RTT
    for i, (name, run) in enumerate(runs.items()):
        p = policy_of(run, policy)
        port = p.bottleneck.port
        ports = p.queues.ports if p.queues else {}
        frame = next((q.frame_bytes for label, q in ports.items() if label.endswith(f"/{port}")),
                     1514)  # a standard frame, for a run recorded without transport
        start = windows(op_times(run["collectives"]))[policy][0]
        spans = [seconds]
        if p.queues and p.queues.k_packets and p.tcp:
            spans.append((seconds[0], seconds[0] + zoom_s))
            senders = [f.host for f in p.tcp.flows.values() if f.windows >= 100]
            marking = (p.queues.k_packets, len(senders),
                       _packets_in_flight(run, p.bottleneck, frame, senders))
        for row, (a, b) in enumerate(spans, start=1):
            q = backlog_series(run["queue"], policy, port, start + int(a * 1e9),
                               start + int(b * 1e9))
            fig.add_scatter(x=((q["t_ns"] - start) / 1e9).to_list(),
                            y=(q["backlog_bytes"] / frame).to_list(), mode="lines",
                            name=name, showlegend=row == 1, row=row, col=1,
                            line={"width": 1.5, "color": DCTCP_COLORS[i % len(DCTCP_COLORS)]})
    if marking:
        k, n, bdp = marking
        q_max, amplitude = k + n, 0.5 * (2 * n * (bdp + k)) ** 0.5
        fig.add_hrect(y0=q_max - amplitude, y1=q_max, line_width=0, fillcolor="#0072B2",
                      opacity=0.12, row=2, col=1, annotation_position="top left",
                      annotation_text=f"Q_max = K + N = {q_max}, A = {amplitude:.1f}"
                      + (f" (C·RTT = {bdp:.1f})" if bdp else ""))
        fig.add_hline(y=k, line={"dash": "dot", "color": "#555555"}, row=2, col=1,
                      annotation_text=f"K = {k}", annotation_position="bottom right")
    fig = themed(fig, "The queue at the bottleneck port", runs_subtitle(runs), "", "")
    fig.update_xaxes(title_text="time since the first op (s)", row=2, col=1)
    fig.update_yaxes(title_text="queue (full frames)")
    return fig.update_layout(height=620)
