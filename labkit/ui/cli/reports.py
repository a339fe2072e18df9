"""The terminal reports: a run's summary as tables (workload, bottleneck, valves, queues,
TCP flows, pauses, a user's program), a scenario's fabric (``labkit inspect``), a grid's
points and a batch's results, a calibration's trials, and what ``rate_factor`` did."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from labkit.analysis.calibration import Calibration
from labkit.model.manifest import Rates
from labkit.model.summary import Program, Summary
from labkit.ui.cli.output import console, fmt


def print_summary(summary: Summary) -> None:
    from labkit.analysis import frames

    # fidelity first: a figure the emulation did not hold is read with that in mind
    for policy, p in summary.policies.items():
        for note in p.fidelity.notes:
            console.print(f"[yellow]fidelity ({policy}):[/] {note}", highlight=False)
    flows = any(p.tcp and p.tcp.flows for p in summary.policies.values())
    t = Table(title=f"{summary.scenario} · run {summary.run_id}",
              caption=f"times in ms; rates in emulated Mbit/s (1 emulated Mbit/s stands for "
                      f"{summary.scale_factor:g} real Mbit/s); bneck: the bottleneck port"
                      + (f"; {first_job}'s ops (every job's: the jobs table below)"
                         if (first_job := _first_job(summary)) else "")
                      + ("; storage: the scenario's storage entries (its TCP flows: the "
                         "flows table below)" if flows else ""),
              caption_justify="left")
    frame = frames.summary_frame(summary)
    jobs = frame.height > 0 and frame["busbw_mbps"].is_null().all()
    middle = (("iters", "p50", "p99", "slowdown\np50 / p99", "exposed", "bubbles",
               "MB/iter\nat bneck") if jobs else
              ("ops", "p50", "p99", "slowdown\np50 / p99", "busbw"))
    for col in ("policy", *middle, "storage", "bneck\nutil.", "drops\nvip / low",
                "CPU-\nbound"):
        t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in frame.iter_rows(named=True):
        times = (fmt(r["p50_ms"], ".0f"), fmt(r["p99_ms"], ".0f"),
                 f"{fmt(r['slowdown_p50'])} / {fmt(r['slowdown_p99'])}")
        cells: tuple[str, ...]
        if jobs:
            cells = (str(r["ops"]), *times, fmt(r["exposed_comm"], ".0%"),
                     fmt(r["bubbles"], ".0%"), fmt(r["bottleneck_mb_per_iter"], ".2f"))
        else:
            cells = (str(r["ops"]), *times, fmt(r["busbw_mbps"], ".1f"))
        t.add_row(r["policy"], *cells, fmt(r["storage_mbps"], ".1f"),
                  fmt(r["bottleneck_used"], ".0%"), f"{r['vip_drops']} / {r['low_drops']}",
                  "yes" if r["cpu_bound"] else "no")
    console.print(t)
    _print_program(summary)
    named = {p.bottleneck.port for p in summary.policies.values()}
    d = Table(title="at the bottleneck port, p99 in microseconds", title_justify="left",
              caption="the port differs between rows: this run was recorded before labkit "
                      "named one bottleneck port per run (each policy's busiest)"
              if len(named) > 1 else None, caption_justify="left")
    for col in ("policy", "port", "vip sojourn", "low sojourn", "vip one-way latency",
                "max backlog KiB"):
        d.add_column(col, justify="left" if col in ("policy", "port") else "right", no_wrap=True)
    for policy, p in summary.policies.items():
        lanes = p.bottleneck.lanes
        d.add_row(policy, p.bottleneck.port, fmt(lanes.vip.sojourn_p99_us, ".0f"),
                  fmt(lanes.low.sojourn_p99_us, ".0f"), fmt(lanes.vip.latency_p99_us, ".0f"),
                  fmt(max(v.max_backlog_bytes for v in lanes.values()) / 1024, ".0f"))
    console.print(d)
    controlled = {k: (p.controller, p.bottleneck.lanes) for k, p in summary.policies.items()
                  if p.controller}
    if controlled:
        c = Table(title="valves: storage through the hosts' valves, marks and drops (low lane)",
                  title_justify="left")
        for col in ("policy", "decisions", "low Mbit/s", "CE marked", "dropped",
                    "ECN marks at bneck", "prediction error ms"):
            c.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for policy, (ctl, lanes) in controlled.items():
            c.add_row(policy, str(ctl.decisions), fmt(ctl.mean_rate_mbps.low, ".1f"),
                      str(ctl.ce_marked.low), str(ctl.dropped.low),
                      str(sum(v.ecn_marks for v in lanes.values())),
                      fmt(ctl.prediction_error_ms, ".1f"))
        console.print(c)
    _print_queues(summary)
    _print_flows(summary)
    _print_delays(summary)
    _print_jobs(summary)
    _print_culprits(summary)
    _print_reroutes(summary)
    paused = {k: (p.lossless, p.transport) for k, p in summary.policies.items() if p.lossless}
    if paused:
        lossless_lanes = ", ".join(next(iter(paused.values()))[0].lanes)
        x = Table(title=f"lossless ({lossless_lanes}; one queue per port under fifo): pauses, "
                        "and how fast they acted, in microseconds", title_justify="left")
        for col in ("policy", "pauses", "paused ms", "reaction p50", "p99", "max",
                    "one frame", "go-back-N resends"):
            x.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for policy, (ll, transport) in paused.items():
            reaction = ll.reaction_us
            x.add_row(policy, str(ll.pauses),
                      fmt(sum(v.ms for v in ll.paused_ms.values()), ".0f"),
                      fmt(reaction.p50, ".0f"), fmt(reaction.p99, ".0f"),
                      fmt(reaction.max, ".0f"), fmt(ll.packet_us, ".0f"),
                      str(transport.retransmits) if transport else "—")
        console.print(x)


def _print_program(summary: Summary) -> None:
    """A user's program: where its times came from, its collectives per policy, its CPU."""
    from labkit.analysis import frames

    programs = {k: p.workload for k, p in summary.policies.items()
                if isinstance(p.workload, Program)}
    if not programs:
        return
    first = next(iter(programs.values()))
    source = {"lines": "as it reported them (labkit's line protocol)",
              "hook": "timed by labkit from outside its code (it reported none)",
              "traffic": "from its traffic as the kernel saw it (it reported none)"}
    said = " / ".join(source.get(s, s) for s in dict.fromkeys(p.source for p in programs.values()))
    t = Table(title=f"your program {first.name}: its collectives, {said}"
                    f"; the first {first.warmup} iteration(s) left out",
              title_justify="left", caption="compute and exposed: mean per iteration and "
              "rank; CPU: what its ranks' cgroups used", caption_justify="left")
    for col in ("policy", "op", "count", "p50", "p99", "slowdown\np50 / p99", "busbw",
                "compute", "exposed", "CPU s"):
        t.add_column(col, justify="left" if col in ("policy", "op") else "right", no_wrap=True)
    for r in frames.program_ops_frame(summary).iter_rows(named=True):
        p = programs[r["policy"]]
        t.add_row(r["policy"], r["op"], str(r["count"]), fmt(r["p50_ms"], ".0f"),
                  fmt(r["p99_ms"], ".0f"),
                  f"{fmt(r['slowdown_p50'])} / {fmt(r['slowdown_p99'])}",
                  fmt(r["busbw_mbps"], ".1f"), fmt(p.compute_ms, ".0f"),
                  fmt(p.exposed_comm_ms, ".0f"), fmt(p.cpu_s, ".1f"))
    for policy, p in programs.items():  # no times: say so, in the table
        if p.unmeasured:
            t.add_row(policy, "not measurable from its traffic", "—", "—", "—", "— / —", "—",
                      "—", "—", fmt(p.cpu_s, ".1f"))
    console.print(t)


def _print_queues(summary: Summary) -> None:
    """The bottleneck ports' queues in packets and their CE marks (``transport``)."""
    queues = {k: p.queues for k, p in summary.policies.items() if p.queues}
    if not queues:
        return
    tcp = next((p.tcp.control for p in summary.policies.values() if p.tcp), "default")
    k = next(iter(queues.values())).k_packets
    q = Table(title=f"transport: TCP {tcp}, "
                    f"{'marking past K = ' + str(k) + ' packets' if k else 'no marking'}: "
                    "the bottleneck ports' queues in full frames", title_justify="left")
    for col in ("policy", "port", "queue p50", "p99", "CE marked", "ECN-capable"):
        q.add_column(col, justify="left" if col in ("policy", "port") else "right",
                     no_wrap=True)
    for policy, ports in queues.items():
        for label, port in ports.ports.items():
            q.add_row(policy, label.rpartition("/")[2], fmt(port.queue_p50_packets, ".1f"),
                      fmt(port.queue_p99_packets, ".1f"), fmt(port.ce, "d"),
                      fmt(port.ect, "d"))
    console.print(q)


FLOWS_SHOWN = 10  # a policy's fastest lk_dctcp flows in the report


def _print_flows(summary: Summary) -> None:
    """Each policy's lk_dctcp flows that carried data, fastest first: the traffic that
    fills a transport run's port (``transport.tcp: dctcp``)."""
    flows = {k: sorted((f for f in p.tcp.flows.items() if f[1].mbps >= 0.05),
                       key=lambda f: -f[1].mbps)
             for k, p in summary.policies.items() if p.tcp and p.tcp.flows}
    if not any(flows.values()):
        return
    f = Table(title="TCP flows (lk_dctcp) that carried data, goodput over the measured "
                    "window, fastest first", title_justify="left")
    for col in ("policy", "host", "flow", "Mbit/s", "windows", "marked", "alpha",
                "cwnd p50"):
        f.add_column(col, justify="left" if col in ("policy", "host", "flow") else "right",
                     no_wrap=True)
    for policy, shown in flows.items():
        for name, flow in shown[:FLOWS_SHOWN]:
            f.add_row(policy, flow.host, name, f"{flow.mbps:.1f}", str(flow.windows),
                      f"{flow.marked_share:.0%}", f"{flow.alpha_mean:.2f}",
                      f"{flow.cwnd_p50:.0f}")
        if len(shown) > FLOWS_SHOWN:
            f.add_row(policy, "", f"and {len(shown) - FLOWS_SHOWN} more", "", "", "", "", "")
    console.print(f)


def _print_delays(summary: Summary) -> None:
    """How the delay line kept each delayed link direction's time (``delay_ms``)."""
    delays = {k: p.delays for k, p in summary.policies.items() if p.delays}
    if not delays:
        return
    t = Table(title="propagation delay: how far the delay line's sends were from their "
                    "deadlines, in microseconds (negative: early)", title_justify="left")
    for col in ("policy", "hop", "delay ms", "frames", "p50", "p99", "latest", "kept time"):
        t.add_column(col, justify="left" if col in ("policy", "hop") else "right", no_wrap=True)
    for policy, hops in delays.items():
        for hop, d in hops.items():
            delay = f"{d.delay_ms:g}" + (f" ± {d.jitter_ms:g}" if d.jitter_ms else "")
            t.add_row(policy, hop, delay, str(d.frames), fmt(d.late_p50_us, ".0f"),
                      fmt(d.late_p99_us, ".0f"), f"{d.late_max_us:.0f}",
                      "[red]no[/]" if d.flagged else "yes")
    console.print(t)


def _first_job(summary: Summary) -> str | None:
    """The first job's name, in a run of several (its ops are the main table's)."""
    return next((next(iter(p.jobs.each)) for p in summary.policies.values() if p.jobs), None)


def _print_jobs(summary: Summary) -> None:
    """Several jobs sharing the fabric: one row per policy and job."""
    from labkit.analysis import frames

    jobs = frames.jobs_frame(summary)
    if jobs.is_empty():
        return
    t = Table(title="the jobs sharing the fabric, each over the time all of them ran",
              caption="iteration times in ms; slowdown: against the job alone (isolated), "
                      "and the jobs together without storage (together); GPU util.: the "
                      "compute share of an iteration, and the policy's over all jobs "
                      "weighted by GPUs (Crux's metric); share: of the jobs' bytes at the "
                      "bottleneck port", caption_justify="left")
    for col in ("policy", "job", "GPUs", "iters", "p50", "p99", "slowdown\np50 / p99",
                "vs together\np99", "GPU util.\njob / all", "bneck\nshare", "drops",
                "sojourn\np99 µs"):
        t.add_column(col, justify="left" if col in ("policy", "job") else "right",
                     no_wrap=True)
    for r in jobs.iter_rows(named=True):
        t.add_row(r["policy"], r["job"], str(r["gpus"]), str(r["iterations"]),
                  fmt(r["p50_ms"], ".0f"), fmt(r["p99_ms"], ".0f"),
                  f"{fmt(r['slowdown_p50'])} / {fmt(r['slowdown_p99'])}",
                  fmt(r["together_slowdown_p99"]),
                  f"{fmt(r['gpu_utilization'], '.0%')} / {fmt(r['gpu_utilization_all'], '.0%')}",
                  fmt(r["bottleneck_share"], ".0%"), fmt(r["bottleneck_drops"], "d"),
                  fmt(r["sojourn_p99_us"], ".0f"))
    console.print(t)


SHOWN_CULPRITS = 3  # a policy's slow phases printed: those that lost the most time


def _print_culprits(summary: Summary) -> None:
    """Each policy's slow phases that lost the most time, and what they are blamed on."""
    found = {k: p.culprits for k, p in summary.policies.items() if p.culprits}
    if not found:
        return
    t = Table(title="slow phases of the job, and what labkit's telemetry blames for each",
              caption="ops: the phase's; slowdown: its median op against the job's usual "
                      "(lower quartile); lost: its ops' time beyond the usual; evidence: "
                      "what the ranks and the bottleneck port recorded (never the "
                      "scenario's events)", caption_justify="left")
    for col in ("policy", "ops", "slowdown", "lost ms", "culprit", "evidence"):
        t.add_column(col, justify="right" if col in ("slowdown", "lost ms") else "left",
                     no_wrap=col != "evidence")
    for policy, phases in found.items():
        worst = sorted(phases, key=lambda c: c.lost_ms, reverse=True)[:SHOWN_CULPRITS]
        for c in sorted(worst, key=lambda c: c.from_op):
            what = {"rank": f"rank on {c.name}", "link": f"{c.name}'s link",
                    "path": f"path {c.name}"}.get(c.kind, f"bottleneck {c.name}")
            t.add_row(policy, f"{c.from_op}–{c.to_op}", f"{c.slowdown:.2f}x",
                      f"{c.lost_ms:.0f}", what, c.evidence)
    console.print(t)


def _print_reroutes(summary: Summary) -> None:
    """How a routed fabric's routes moved off each link that went down, and back."""
    found = {k: p.reroutes for k, p in summary.policies.items() if p.reroutes}
    if not found:
        return
    t = Table(title="links down, and the routes BGP moved off them (fabric.routing: bgp)",
              caption="at: when it went down, in the policy's window; moved: when the "
                      "first router's kernel route changed, converged: the last's (ms "
                      "after it went down); back: when the last moved route came back "
                      "after it came up (ms); from each router's kernel routes",
              caption_justify="left")
    for col in ("policy", "link", "at s", "routers", "moved ms", "converged ms", "back ms"):
        t.add_column(col, justify="left" if col in ("policy", "link") else "right")

    def ms(x: float | None) -> str:
        return "—" if x is None else f"{x:.0f}"
    for policy, rows in found.items():
        for r in rows:
            t.add_row(policy, r.link, f"{r.at_s:.2f}", str(r.routers), ms(r.moved_ms),
                      ms(r.converged_ms), ms(r.restored_ms))
    console.print(t)


def rates_line(rates: Rates) -> str:
    """What ``emulation.rate_factor`` did to a run, in a sentence."""
    where = (f"the newest calibration, {rates.calibration}" if rates.calibration
             else "emulation.rate_factor")
    return (f"rates x{rates.factor:g} ({where}): the bottleneck at "
            f"{rates.bottleneck_rate_mbps:g} Mbit/s, 1 emulated Mbit/s stands for "
            f"{rates.scale_factor:g} real")


def _delay_text(link: dict) -> str:
    """A link's propagation delay (and jitter) for the fabric's table, or nothing."""
    if not link.get("delay_ms"):
        return ""
    jitter = f" ± {link['jitter_ms']:g}" if link.get("jitter_ms") else ""
    return f", {link['delay_ms']:g}{jitter} ms"


def print_fabric(desc: dict) -> None:
    from labkit.analysis.describe import KIND_NAMES, kind_text, rate_text

    scale, nodes, links = desc["scale_factor"], desc["nodes"], desc["links"]
    factor, mtus = desc["rate_factor"], {k["mtu"] for k in links}
    count = Counter(n["role"] or n["kind"] for n in nodes)
    console.print(f"[bold]{desc['scenario']}[/] ({escape(desc['file'])})"
                  + (f": {escape(desc['description'])}" if desc["description"] else ""),
                  highlight=False, soft_wrap=True)
    console.print(", ".join(_plural(k, KIND_NAMES[name]) for name, k in count.items())
                  + f", {_plural(len(links), 'link')}; 1 emulated Mbit/s stands for {scale:g} "
                  "real Mbit/s" + ("" if factor == 1 else f"; links run at their rate × "
                                   f"{factor} (emulation.rate_factor)"), highlight=False)
    t = Table(title="nodes and their ports", title_justify="left")
    for col in ("node", "kind", "port", "address", "to", "link: rate, egress buffer"):
        t.add_column(col, no_wrap=col != "kind")
    by_name = {k["name"]: k for k in links}
    for n, after in zip(nodes, [*nodes[1:], None], strict=True):
        last = len(n["ports"]) > 1 or after is None or after["kind"] != n["kind"]
        for i, p in enumerate(n["ports"]):
            k = by_name[p["link"]]
            link = f"{k['rate_mbps']:g} Mbit/s, {k['buffer_kb']} KiB" + (
                "" if len(mtus) == 1 else f", MTU {k['mtu']}") + _delay_text(k)
            t.add_row(n["name"] if i == 0 else "", kind_text(n) if i == 0 else "", p["ifname"],
                      p["address"], p["peer_port"],
                      f"[red]{link} · bottleneck[/]" if k["bottleneck"] else link,
                      end_section=last and i == len(n["ports"]) - 1)
    console.print(t)
    if len(mtus) == 1:
        console.print(f"every link's MTU: {mtus.pop()}", highlight=False)
    if delays := sorted({k["delay_ms"] for k in links if k.get("delay_ms")}):
        console.print(f"propagation delays, each way, after the shaper: 1 emulated ms stands "
                      f"for {1e3 / scale:.3g} real µs at this scale ("
                      + ", ".join(f"{d:g} ms: {d * 1e3 / scale:.3g} µs" for d in delays) + ")",
                      highlight=False)
    r = Table(title="routes" if desc["routing"] == "static" else
              "routes (BGP with BFD, FRR in every router: these once it has converged; a "
              "failed link's move to the others)", title_justify="left")
    for col in ("node", "to", "next hops"):
        r.add_column(col)
    for node, routes in desc["routes"].items():
        groups: dict[tuple, list[str]] = {}
        for route in routes:
            if route["dst"] != "default":
                groups.setdefault(tuple(zip(route["via"], route["nexthops"], strict=True)),
                                  []).extend(route["hosts"])
        for i, (via, to) in enumerate(groups.items()):
            r.add_row(node if i == 0 else "", " ".join(to), ", ".join(
                f"{v} {ip}" for v, ip in via) + (" (ECMP)" if len(via) > 1 else ""))
    console.print(r)
    ways = max((p["ways"] for p in desc["paths"]), default=1)
    console.print("every host: default via its router, which reaches its own hosts directly; "
                  "ECMP: a next hop per equal-cost path; "
                  f"{len(desc['paths'])} host pairs, " + (
                      "one shortest path each" if ways == 1 else
                      f"up to {ways} equal-cost paths each"), highlight=False, soft_wrap=True)
    lanes = desc["lanes"]
    ll = Table(title="lanes (the first rule that matches decides)", title_justify="left")
    for col in ("#", "lane", "matches", "added by"):
        ll.add_column(col, justify="right" if col == "#" else "left")
    for i, rule in enumerate(lanes["rules"], 1):
        ll.add_row(str(i), rule["lane"], rule["text"], escape(rule["added_by"] or "the scenario"))
    ll.add_row("", lanes["default"], "everything else", "labkit")
    console.print(ll)
    classifier = lanes["classifier"] or "labkit's own (bpf/classifier.bpf.c)"
    console.print(f"classifier: {escape(classifier)}; under priority vip goes first, then "
                  "normal, then low; under isolated and fifo a port has one queue" + (
                      f"; lossless (paused, not dropped): {', '.join(lanes['lossless'])}"
                      if lanes["lossless"] else ""), highlight=False, soft_wrap=True)
    for b in desc["bottlenecks"]:
        ports = ", ".join(f"{p['ifname']} → {p['towards']}" for p in b["ports"])
        console.print(f"[red bold]bottleneck[/] {b['link']}: "
                      f"{rate_text(b['rate_mbps'], scale)}, MTU {b['mtu']}, buffer "
                      f"{b['buffer_kb']} KiB per egress port ({ports})"
                      + (f", loses {b['loss_percent']:g} %" if b["loss_percent"] else "")
                      + f"; on the shortest paths of {b['host_pairs']} of "
                      f"{len(desc['paths'])} host pairs", highlight=False, soft_wrap=True)


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "es" if what.endswith("ch") else "s")


def print_points(g) -> None:
    t = Table(title=escape(f"{g.name}: {g.size} runs of {g.scenario_path}"),
              title_justify="left")
    for col in ("point", *[a.key for a in g.axes], "policies", "seed"):
        t.add_column(escape(col), no_wrap=True)  # key paths hold [...]: not markup
    for p in g.points:
        t.add_row(p.name, *[escape(str(v)) for v in p.parameters.values()],
                  ", ".join(p.policies), str(p.seed))
    console.print(t)


def print_batch(done) -> None:
    from labkit.runs.rundir import RunDataError

    try:
        frame = done.frame()
    except RunDataError as exc:  # a run damaged since: the batch's record still stands
        console.print(f"[yellow]cannot tabulate the batch:[/] {escape(str(exc))}; its record "
                      f"is in {done.path}", highlight=False)
        return
    params = [c for c in frame.columns if c not in ("run_id", "scenario", "batch", "point",
                                                    "seed", "path")
              and c not in _summary_columns()]
    t = Table(title=f"batch {done.manifest.run_id}", caption="times in ms; rates in "
              "emulated Mbit/s", caption_justify="left")
    for col in ("point", *params, "seed", "policy", "p99", "slowdown p99", "busbw",
                "storage", "CPU-bound"):
        t.add_column(escape(col), justify="left" if col in ("point", "policy") else "right",
                     no_wrap=True)
    for r in frame.iter_rows(named=True):
        t.add_row(f"p{r['point']:03d}", *[escape(str(r[c])) for c in params], str(r["seed"]),
                  r["policy"], fmt(r["p99_ms"], ".0f"), fmt(r["slowdown_p99"]),
                  fmt(r["busbw_mbps"], ".1f"), fmt(r["storage_mbps"], ".1f"),
                  "yes" if r["cpu_bound"] else "no")
    console.print(t)
    _print_batch_jobs(done.jobs())
    for p in done.points:
        if p.status != "complete":
            console.print(f"[yellow]{p.name} {p.status}:[/] {escape(str(p.error))}",
                          highlight=False)


def _print_batch_jobs(jobs) -> None:
    """A batch of runs whose jobs shared the fabric: a row per point, policy and job."""
    if jobs.is_empty():
        return
    t = Table(title="each job of each point", caption="times in ms; bus bandwidth in "
              "emulated Mbit/s", caption_justify="left")
    for col in ("point", "seed", "policy", "job", "busbw", "p50", "slowdown p50"):
        t.add_column(col, justify="left" if col in ("point", "policy", "job") else "right",
                     no_wrap=True)
    for r in jobs.iter_rows(named=True):
        t.add_row(f"p{r['point']:03d}", str(r["seed"]), r["policy"], r["job"],
                  fmt(r["busbw_mbps"], ".1f"), fmt(r["p50_ms"], ".0f"),
                  fmt(r["slowdown_p50"]))
    console.print(t)


def _summary_columns() -> set[str]:
    from labkit.analysis import frames

    return set(frames.SUMMARY_COLUMNS)


def print_calibration(result: Calibration) -> None:
    """A calibration's trials: each factor's rate, how busy the CPUs were, whether the
    emulation held and why not."""
    t = Table(title=f"calibration of {result.scenario} on this machine",
              caption=f"rates in emulated Mbit/s; the scenario's bottleneck: "
                      f"{result.bottleneck_rate_mbps:g} Mbit/s, scale factor "
                      f"{result.scale_factor:g}; each trial is a run in "
                      f"{Path(result.trials[0].run).parent if result.trials else 'data/runs'}",
              caption_justify="left")
    for col in ("factor", "bottleneck rate", "CPU busy", "held", "why not", "run"):
        t.add_column(col)
    for trial in result.trials:
        t.add_row(f"x{trial.factor:g}", f"{trial.rate_mbps:g}", f"{trial.cpu_busy:.0%}",
                  "yes" if trial.held else "[yellow]no[/]", "; ".join(trial.faults) or "—",
                  Path(trial.run).name)
    console.print(t)
