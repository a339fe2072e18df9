"""Each controller reacts on a real fabric: valve rates fall within 50 ms of a queue
build-up (reactive), of a burst it predicted or saw (proactive), or of the phase the
job published (state-aware)."""

from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from labkit.analysis import windows
from labkit.kernel import capture
from labkit.model import scenario
from labkit.runs import rundir
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "topologies/checkpoint-burst.yaml"
MS = 1_000_000
POLL_MS = capture.POLL_MS
REACTION_NS = 50 * MS


def _labkit_run(scenario: Path, policies: list[str], seconds: int, out: Path) -> rundir.Run:
    return labkit.run(scenario, policies, duration=seconds, out=out)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _labkit_run(SCENARIO, ["reactive", "proactive", "state-aware"], 6,
                       tmp_path_factory.mktemp("control") / "run")


def _of(run, table: str, policy: str) -> pl.DataFrame:
    return run.tables[table].filter(pl.col("policy") == policy).sort("t_ns")


def _op_starts(run, policy: str) -> list[int]:
    ops = windows.op_times(run.tables["collectives"]).filter(pl.col("policy") == policy)
    return ops["start_ns"].to_list()


def test_reactive_cuts_storage_within_50_ms_of_a_queue_building(fabric_ready, run):
    spec = scenario.load(SCENARIO).control
    target_bytes = spec.target_us * 1e-6 * 100e6 / 8  # vip delay target at 100 Mbit/s
    vip_arrived = (_of(run, "lanes", "reactive").filter(pl.col("lane") == "vip")
                   .sort("t_ns").with_columns(
                       vip_new=pl.col("offered_bytes").diff().over("port").fill_null(0))
                   .select("t_ns", "port", "vip_new"))
    q = (_of(run, "queue", "reactive").group_by(["t_ns", "port"])
         .agg(pl.col("backlog_bytes").sum())
         .join(vip_arrived, on=["t_ns", "port"], how="left").sort("t_ns"))
    cuts = _of(run, "controller", "reactive").filter(
        pl.col("new_mbps").is_not_null() & (pl.col("old_mbps").is_null()
                                            | (pl.col("new_mbps") < pl.col("old_mbps"))))
    cut_times = cuts["t_ns"].to_list()
    ops = windows.op_times(run.tables["collectives"]).filter(pl.col("policy") == "reactive")
    spans = list(zip(ops["start_ns"], ops["end_ns"], strict=True))
    # build-ups that vip packets met, while the collectives run: storage's own queue keeps
    # no vip packet waiting, and the controller leaves it alone by design
    # a build-up whose next sample came more than 3 periods later is left out: the poller
    # was stalled around it (this 2-core VM's softirqs and the ranks took the CPU when a
    # burst began; the sample that showed it reached the feed late, and the controller
    # stalled too), which says nothing of the controller's reaction to what it was shown
    builds, unseen = [], 0
    for _, per_port in q.group_by("port"):
        over = ((per_port["backlog_bytes"] > target_bytes)
                & (per_port["vip_new"].fill_null(0) > 0)).to_list()
        t = per_port["t_ns"].to_list()
        for i in range(1, len(t)):
            if over[i] and not over[i - 1] and any(a <= t[i] <= b for a, b in spans):
                if i + 1 < len(t) and t[i + 1] - t[i] > 3 * POLL_MS * MS:
                    unseen += 1
                else:
                    builds.append(t[i])
    assert len(builds) >= 3, (len(builds), unseen)
    decisions = _of(run, "controller", "reactive").filter(pl.col("new_mbps").is_not_null())
    floors = dict(decisions.group_by("valve").agg(pl.col("new_mbps").min()).iter_rows())

    def at_floor(t: int) -> bool:
        """Every sender already held at its floor: there is nothing left to cut (a queue
        can still build then, from the ring itself or what the hold sent on)."""
        last = decisions.filter(pl.col("t_ns") <= t).group_by("valve").agg(
            pl.col("new_mbps").last())
        return last.height == len(floors) and all(
            m <= floors[v] for v, m in last.iter_rows())

    late = [b for b in builds
            if not any(b - 40 * MS <= c <= b + REACTION_NS for c in cut_times)
            and not at_floor(b)]
    assert len(late) <= len(builds) // 10, (len(late), len(builds), unseen)


def test_proactive_holds_storage_before_or_just_as_a_burst_starts(fabric_ready, run):
    st1 = _of(run, "controller", "proactive").filter(pl.col("valve") == "st1")
    idle = st1["new_mbps"].max()  # idle_share of its fair share: released
    starts = _op_starts(run, "proactive")[3:]  # after it has learned the rhythm
    assert starts

    def held_at(t: int) -> bool:
        last = st1.filter(pl.col("t_ns") <= t)
        return last.height > 0 and last["new_mbps"][-1] < idle

    # at most one op in ten missed (a CI run on a loaded 2-core machine missed one of 37)
    missed = [s for s in starts if not held_at(s + REACTION_NS)]
    assert len(missed) <= len(starts) // 10, (len(missed), len(starts))
    # ... and lets storage have the bottleneck again between bursts
    assert not all(held_at(s - 100 * MS) for s in starts)
    error_ms = run.summary.policies["proactive"].controller.prediction_error_ms
    assert error_ms is not None and error_ms < 100


def test_state_aware_relays_the_published_phase_to_storage_hosts(fabric_ready, run):
    relays = _of(run, "controller", "state-aware").filter(
        (pl.col("valve") == "st1") & pl.col("busy_from_ns").is_not_null())
    for s in _op_starts(run, "state-aware")[1:]:
        known = relays.filter(pl.col("t_ns") <= s + REACTION_NS)
        assert known.height, "no window relayed before the op"
        last = known.row(-1, named=True)
        assert last["busy_from_ns"] <= s + REACTION_NS < last["busy_until_ns"]
    assert_no_leaks()


def test_dcqcn_senders_get_cnps_for_marked_packets_and_slow_down(fabric_ready, tmp_path):
    """With ``control.dcqcn`` on, ring packets are ECN-capable; the bottleneck ports'
    valves mark them CE past their threshold, receivers answer with CNPs, and the
    senders cut their rate (each CNP received is counted)."""
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["control"]["dcqcn"] = True
    lab = tmp_path / "dcqcn.yaml"
    lab.write_text(yaml.safe_dump(doc))
    dcqcn = _labkit_run(lab, ["isolated", "reactive"], 4, tmp_path / "run")
    reactive = dcqcn.summary.policies["reactive"]
    assert reactive.bottleneck.lanes.vip.ecn_marks > 0
    assert reactive.controller.cnps > 0
    ranks = dcqcn.tables["transport"].filter(pl.col("policy") == "reactive")
    assert ranks["cnps"].sum() == reactive.controller.cnps
    assert dcqcn.summary.policies["isolated"].workload.busbw_mbps > \
        reactive.workload.busbw_mbps  # slowed by its own rate cuts, too
    ops = dcqcn.tables["collectives"].filter(pl.col("policy") == "reactive")
    assert ops.height and ops["wrong"].sum() == 0
    assert_no_leaks()
