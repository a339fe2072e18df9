"""Capacity: the largest ring this machine emulates faithfully, and where each packet's
CPU goes.

The fabric is bottleneck.yaml's (two leaves, one 100 Mbit/s uplink, a 2 MiB ring
All-Reduce) with more GPU hosts, half behind each leaf; the All-Reduce runs alone
(``isolated``) for a few seconds at each size. ``capacity_ranks`` is the largest ring
whose bus bandwidth reaches 0.85 x the link rate on a machine that was not CPU-bound,
once with every packet on its own (``emulation.gso_packets: 1``, the default) and once with
runs of 8. Per packet sent by a rank, the machine's CPU is split into the rank agents'
Python (their user time), the orchestrator's (the run process, all its threads) and the
kernel's packet path: the agents' system time (their syscalls and the softirq work the
kernel charges to them: forwarding their packets through the fabric) plus whatever busy
time no process accounts for. The ranks run in engines, one per leaf (the default,
``emulation.engines: leaf``); at 32 ranks in runs of 8 the same ring also runs with one
process per rank (``engines: rank``), side by side, for what an engine saves.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import polars as pl
import yaml

import labkit
from labkit.model import scenario

REPO = Path(__file__).resolve().parent.parent
RANKS = (8, 16, 24, 32, 40, 48, 64, 80, 96, 128)
GSO = (1, 8)  # packets per run: each on its own, and runs of 8
SIDE_BY_SIDE = 32  # ranks, in runs of 8: one engine per leaf against one process per rank
SECONDS = 8.0
FAITHFUL_BUSBW = 0.85  # of the link rate
CPUS = os.cpu_count() or 1  # the split below counts CPU-seconds of the whole machine


def fabric_of(n: int, gso: int, engines: str = "leaf") -> scenario.Scenario:
    """bottleneck.yaml with ``n`` GPU hosts, its ring alone, ``gso`` packets per run,
    its ranks in ``engines``."""
    doc = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
    doc["name"] = f"capacity-{n}-gso{gso}-{engines}"
    doc["fabric"]["hosts"]["gpu"] = {"leaf1": [f"g{i}" for i in range(1, n // 2 + 1)],
                                     "leaf2": [f"g{i}" for i in range(n // 2 + 1, n + 1)]}
    doc["traffic"][1]["clients"] = [f"g{i}" for i in range(1, 5)]
    doc["policies"] = ["isolated"]
    doc["emulation"] = {"gso_packets": gso, "engines": engines}
    return scenario.parse(doc, str(REPO / "topologies/bottleneck.yaml"))


def measure(n: int, gso: int, out: Path, engines: str = "leaf") -> dict | None:
    """The ring of ``n`` alone, or None when its run failed (the machine gave out)."""
    try:
        run = labkit.run(fabric_of(n, gso, engines), out=out / f"{n}-{gso}-{engines}",
                         duration=SECONDS)
    except labkit.RunFailed as exc:
        print(f"  gso {gso} ranks {n:>2}: the run failed: {exc}", file=sys.stderr)
        return None
    p = run.summary.policies["isolated"]
    t = run["transport"]
    packets = int(t["packets_sent"].sum())
    user_s, sys_s = float(t["cpu_user_s"].sum()), float(t["cpu_sys_s"].sum())
    window = p.window_s
    machine_s = (p.cpu_busy or 0.0) * CPUS * window
    share = p.telemetry.orchestrator_cpu_share
    orchestrator_s = share * window
    unaccounted = max(machine_s - user_s - sys_s - orchestrator_s, 0.0)
    return {"ranks": n, "gso": gso, "engines": engines, "busbw": p.workload.busbw_mbps,
            "link": p.bottleneck.rate_mbps, "cpu_bound": p.fidelity.cpu_bound,
            "busy": p.cpu_busy or 0.0, "orchestrator_share": share,
            "agents_us": user_s / packets * 1e6,
            "orchestrator_us": orchestrator_s / packets * 1e6,
            "kernel_us": (sys_s + unaccounted) / packets * 1e6}


def faithful(m: dict) -> bool:
    return m["busbw"] >= FAITHFUL_BUSBW * m["link"] and not m["cpu_bound"]


def report(m: dict) -> None:
    print(f"  gso {m['gso']} ranks {m['ranks']:>3} ({m['engines']} engines): busbw "
          f"{m['busbw']:5.1f} of {m['link']:g}, busy {m['busy']:.0%}, CPU per packet: agents' "
          f"Python {m['agents_us']:.1f} us, orchestrator {m['orchestrator_us']:.1f}, kernel "
          f"{m['kernel_us']:.1f}", file=sys.stderr, flush=True)


def run() -> list[dict]:
    records, rows = [], []
    with tempfile.TemporaryDirectory(prefix="labkit-bench-capacity-") as tmp:
        side = Path(tmp) / "side-by-side"
        if (per_rank := measure(SIDE_BY_SIDE, 8, side, "rank")) and \
                (per_leaf := measure(SIDE_BY_SIDE, 8, side, "leaf")):
            report(per_rank)
            report(per_leaf)
            records.append({"name": f"engine_cpu_per_packet_ratio_{SIDE_BY_SIDE}r_gso8",
                            "value": (per_leaf["agents_us"] + per_leaf["kernel_us"])
                            / (per_rank["agents_us"] + per_rank["kernel_us"]),
                            "unit": "leaf/rank", "goal": "<= 0.8"})
        for gso in GSO:
            capacity = 0
            for n in RANKS:
                m = measure(n, gso, Path(tmp))
                if m is None:
                    break
                rows.append(m)
                report(m)
                if not faithful(m):
                    break
                capacity = n
            records.append({"name": f"capacity_ranks_gso{gso}", "value": capacity,
                            "unit": "ranks", "goal": ">= 80" if gso == 8 else ">= 40"})
            at32 = [m for m in rows if m["gso"] == gso and m["ranks"] == 32]
            if at32:
                records.append({"name": f"orchestrator_share_32_gso{gso}",
                                "value": at32[0]["orchestrator_share"], "unit": "of a core",
                                "goal": "<= 0.05"})
    frame = pl.DataFrame(rows)
    for gso in GSO:
        first = frame.filter(pl.col("gso") == gso).row(0, named=True)
        for part in ("agents_us", "orchestrator_us", "kernel_us"):
            records.append({"name": f"cpu_per_packet_{part[:-3]}_{first['ranks']}r_gso{gso}",
                            "value": first[part], "unit": "us", "goal": None})
    return records
