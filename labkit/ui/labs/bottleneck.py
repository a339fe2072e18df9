"""Lab 1, find the bottleneck: predict from a scenario file where the queue forms, then
check the prediction against a recorded run (data only, no root).

Ports are named the way a student reads the fabric: the node and the neighbour it sends
to, ``("spine1", "leaf1")`` or ``"spine1->leaf1"``; labkit's own name (``"spine1-eth0"``,
see :mod:`labkit.model.topo`) is accepted too.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from labkit.model import scenario
from labkit.model.paths import REPO_ROOT
from labkit.model.scenario import AllReduceSpec
from labkit.model.topo import Port, Topology
from labkit.model.traffic import jobs, schedules
from labkit.runs.rundir import load_run
from labkit.ui.labs.verdict import Wrong, check, require

SCENARIO = REPO_ROOT / "topologies" / "bottleneck.yaml"
SAMPLE = REPO_ROOT / "data" / "sample" / "bottleneck"
WAIT_TOLERANCE = 0.15  # of the computed time: an estimate from the file may be this far off


def links(path: Path = SCENARIO) -> pl.DataFrame:
    """Every link of the scenario's fabric: its two ends, rate and buffer per port."""
    sc = scenario.load(path)
    return pl.DataFrame([{"a": link.a, "b": link.b, "rate_mbps": link.rate_mbps,
                          "buffer_kb": link.buffer_kb} for link in sc.fabric.links])


def flows(sc: scenario.Scenario) -> list[tuple[str, str, str, float]]:
    """(label, source, destination, offered Mbit/s) of the scenario's collective or job and
    its storage: a rank sends to each peer its plan names at most its NIC's rate (split
    among them); a storage entry offers ``offered_load`` x the first bottleneck's rate,
    split among its clients."""
    topo = Topology(sc.fabric)
    out = []
    work = sc.allreduce or sc.job
    if work is not None:
        n = len(sc.ranks)
        for r, host in enumerate(sc.ranks):
            if isinstance(work, AllReduceSpec):
                algo = "ring" if work.algo == "auto" else work.algo  # auto: the ring's, a guess
                plan = schedules.collective_plan("all_reduce", algo, n, r, work.size_bytes,
                                                 sc.fabric.gpus_per_host)
            else:
                plan = jobs.plan(work.as_dict(), n, r)
            peers = sorted({m.peer for s in plan.steps for m in s.send})
            nic = topo.ports[host][0].link.rate_mbps
            out += [(f"{work.kind} {host}->{sc.ranks[p]}", host, sc.ranks[p], nic / len(peers))
                    for p in peers]
    a, b = sc.fabric.bottlenecks[0]
    bottleneck_mbps = topo.port_towards(a, b).link.rate_mbps
    for st in sc.storage:
        each = st.offered_load * bottleneck_mbps / len(st.clients)
        for client in st.clients:
            src, dst = (st.server, client) if st.pattern == "read" else (client, st.server)
            out.append((f"{st.name} {src}->{dst}", src, dst, each))
    return out


def port_traffic(path: Path = SCENARIO) -> pl.DataFrame:
    """Per router port (egress), what the scenario's senders would send through it if
    nothing slowed them on the way, against its rate."""
    sc = scenario.load(path)
    topo = Topology(sc.fabric)
    crossing: dict[str, list] = {}
    for label, src, dst, mbps in flows(sc):
        nodes = topo.path(src, dst)
        for a, b in zip(nodes, nodes[1:], strict=False):
            crossing.setdefault(topo.port_towards(a, b).ifname, []).append((label, mbps))
    rows = []
    for port in topo.router_ports():
        through = crossing.get(port.ifname, [])
        offered = sum(m for _, m in through)
        rows.append({"port": f"{port.node}->{port.peer}", "name": port.ifname,
                     "rate_mbps": port.link.rate_mbps, "offered_mbps": round(offered, 1),
                     "more_than_it_sends": offered > port.link.rate_mbps,
                     "flows": ", ".join(label for label, _ in through)})
    return pl.DataFrame(rows).sort("offered_mbps", descending=True)


def _port(topo: Topology, answer) -> Port:
    """The egress port an answer names, or :class:`Wrong` saying how to write one."""
    how = 'write it as ("spine1", "leaf1"): the node, then the neighbour it sends to'
    if isinstance(answer, str) and "->" not in answer:
        for node_ports in topo.ports.values():
            for port in node_ports:
                if port.ifname == answer:
                    return port
        raise Wrong(f"there is no port called {answer!r} in this fabric", how)
    parts = answer.split("->") if isinstance(answer, str) else answer
    if not isinstance(parts, (list, tuple)) or len(parts) != 2:
        raise Wrong(f"{answer!r} does not name a port", how)
    node, peer = (str(p).strip() for p in parts)
    if node not in topo.ports:
        raise Wrong(f"there is no node {node!r} in this fabric", how)
    try:
        return topo.port_towards(node, peer)
    except KeyError:
        raise Wrong(f"{node} has no link to {peer}",
                    f"{node}'s neighbours: {', '.join(p.peer for p in topo.ports[node])}") \
            from None


def _max_backlog(run_dir: Path, policy: str) -> pl.DataFrame:
    """Per recorded port and lane, the largest backlog (bytes) under ``policy``."""
    queue = load_run(run_dir)["queue"].filter(pl.col("policy") == policy)
    return (queue.group_by("port", "lane").agg(pl.col("backlog_bytes").max())
            .sort("backlog_bytes", descending=True))


@check("Where the queue forms")
def check_queue_port(answer, run_dir: Path = SAMPLE, path: Path = SCENARIO) -> str:
    """Pass when ``answer`` names the port whose queue was longest under ``fifo``."""
    topo = Topology(scenario.load(path).fabric)
    port = _port(topo, require(answer, "QUEUE_AT"))
    per_port = _max_backlog(run_dir, "fifo").group_by("port").agg(pl.col("backlog_bytes").sum())
    recorded = dict(per_port.iter_rows())
    worst = max(recorded, key=recorded.__getitem__)
    if port.ifname == worst:
        others = ", ".join(f"{p} {b / 1024:.0f} KiB" for p, b in recorded.items() if p != worst)
        return (f"{port.node}->{port.peer} ({port.ifname}) held up to "
                f"{recorded[worst] / 1024:.0f} KiB under fifo, its whole "
                f"{port.link.buffer_kb} KiB buffer (the other watched port: {others}).")
    where = f"{port.node}->{port.peer}"
    if topo.roles[port.node] != "router":
        raise Wrong(f"{where} is a host's own NIC: a sender that outruns its NIC is simply "
                    "made to wait by its socket, so no queue builds there",
                    "look at the routers' ports, where traffic from several senders meets")
    if port.ifname in recorded:
        raise Wrong(f"right link, wrong direction: {where} never held more than "
                    f"{recorded[port.ifname] / 1024:.0f} KiB under fifo",
                    "which way does the storage data flow: from st1 to the GPUs, or back?")
    row = port_traffic(path).filter(pl.col("name") == port.ifname).row(0, named=True)
    raise Wrong(f"{where} was not among the ports the recording watched; the scenario "
                f"offers it {row['offered_mbps']:.0f} Mbit/s for its {row['rate_mbps']:.0f}",
                "follow st1's data from its start: which port on its way is the first that "
                "cannot send all that arrives? (ports after it only get what it let through)")


@check("Whose packets wait under priority")
def check_waiting_lane(answer, run_dir: Path = SAMPLE) -> str:
    """Pass when ``answer`` names the lane whose queue was longest under ``priority``."""
    lane = str(require(answer, "WHO_WAITS")).strip().lower()
    if lane not in scenario.LANES:
        raise Wrong(f"{answer!r} is not a lane", f"the lanes are {', '.join(scenario.LANES)}")
    backlog = _max_backlog(run_dir, "priority")
    worst = backlog.row(0, named=True)
    mine = backlog.filter((pl.col("port") == worst["port"]) & (pl.col("lane") == lane))
    most = mine["backlog_bytes"][0] if mine.height else 0
    if lane == worst["lane"]:
        return (f"the {lane} lane's queue at {worst['port']} held up to "
                f"{most / 1024:.0f} KiB under priority: storage waits, the ring does not.")
    raise Wrong(f"the {lane} lane's queue at {worst['port']} never held more than "
                f"{most / 1024:.0f} KiB under priority",
                "strict priority always sends the vip lane first: whose packets are left "
                "over? (the scenario's lanes: rules say which traffic goes where)")


@check("How long a full queue takes to drain")
def check_full_queue_wait(answer_ms, run_dir: Path = SAMPLE, path: Path = SCENARIO) -> str:
    """Pass when ``answer_ms`` is the time the bottleneck port needs to send a full
    buffer (within 15 %); the recorded collective's p99 time in that queue under fifo is
    shown beside it."""
    sc = scenario.load(path)
    a, b = sc.fabric.bottlenecks[0]
    link = Topology(sc.fabric).port_towards(a, b).link
    want_ms = link.buffer_kb * 1024 * 8 / (link.rate_mbps * 1e6) * 1e3
    value = require(answer_ms, "FULL_QUEUE_MS")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Wrong(f"{value!r} is not a number of milliseconds", "write a number, e.g. 12.5")
    fifo = load_run(run_dir).summary.policies["fifo"].bottleneck
    seen_ms = (fifo.lanes.vip.sojourn_p99_us or 0.0) / 1e3
    if abs(value - want_ms) <= WAIT_TOLERANCE * want_ms:
        return (f"{link.buffer_kb} KiB at {link.rate_mbps:g} Mbit/s takes {want_ms:.1f} ms to "
                f"send; the recording measured the ring's packets waiting up to "
                f"{seen_ms:.1f} ms (p99) at {fifo.port} under fifo.")
    if abs(value * 8 - want_ms) <= WAIT_TOLERANCE * want_ms:
        hint = "bytes or bits? link rates are in megabits per second, buffers in bytes"
    elif min(abs(value * k - want_ms) for k in (1e3, 1e-3)) <= WAIT_TOLERANCE * want_ms:
        hint = "check your units: the answer is in milliseconds"
    else:
        hint = ("the queue holds buffer_kb of the bottleneck link (defaults.link) and drains "
                "at the link's rate: time = bits / (bits per second)")
    raise Wrong(f"{value:g} ms is not what a full buffer at that port takes to drain", hint)
