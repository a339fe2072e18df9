"""The foundation's acceptance run: `labkit run topologies/bottleneck.yaml` with its
defaults but for the ring's iterations (:data:`ITERATIONS` of its 40: the figures checked
are medians and ratios of medians, p99s over every rank's ops, rates and fractions).

One real run of the three policies (about 20 seconds), checked against the
issue's done-when figures, then a check that nothing was left behind.
"""

import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import labkit
from labkit.analysis import ports
from labkit.runs import experiment, rundir
from tests.leaks import assert_no_leaks, labkit_objects, without_leftovers_note

REPO = Path(__file__).resolve().parents[2]
LABKIT = [sys.executable, "-m", "labkit.ui.cli"]
ITERATIONS = 10


@pytest.fixture(scope="module")
def bottleneck_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "bottleneck"
    t0 = time.monotonic()
    proc = subprocess.run([*LABKIT, "run", str(REPO / "topologies/bottleneck.yaml"), "--set",
                           f"traffic[kind=allreduce].iterations={ITERATIONS}", "--out",
                           str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return rundir.load_run(out), elapsed, proc.stdout


def test_three_policies_within_a_minute(fabric_ready, bottleneck_run):
    run, elapsed, stdout = bottleneck_run
    assert set(run.summary.policies) == {"isolated", "fifo", "priority"}
    assert elapsed <= 60, f"took {elapsed:.0f} s"
    assert "fifo" in stdout and "slowdown" in stdout


def test_bottleneck_is_real_and_lanes_fix_it(fabric_ready, bottleneck_run):
    run, _, _ = bottleneck_run
    p = run.summary.policies
    link = p["isolated"].bottleneck.rate_mbps
    assert p["fifo"].workload.slowdown_p99 >= 2.0
    assert p["priority"].workload.slowdown_p99 <= 1.25
    assert p["priority"].bottleneck.utilization >= 0.90
    assert p["isolated"].workload.busbw_mbps >= 0.8 * link
    assert all(q.workload.wrong == 0 for q in p.values())
    assert p["priority"].bottleneck.lanes.vip.drops == 0
    assert p["fifo"].storage.goodput_mbps > 0
    assert all(not q.cpu_bound for q in p.values())


def test_the_ranks_start_once_storage_has_built_the_queue(fabric_ready, bottleneck_run):
    """Storage starts first; the ranks once the bottleneck's backlog (HTB's own, over
    netlink) has stopped growing: into a queue near its peak, well before a fixed
    second (experiment.STORAGE_WARMUP_S) has passed."""
    run, _, _ = bottleneck_run
    backlog = ports.backlog_series(run["queue"], "fifo", "spine1-eth0", 0, 2**63 - 1)
    first_op = run["collectives"].filter(pl.col("policy") == "fifo")["start_ns"].min()
    flows = run["flows"].filter(pl.col("policy") == "fifo")
    storage_on = flows.filter(pl.col("bytes") > 0)["t_ns"].min()
    at_start = backlog.filter(pl.col("t_ns") <= first_op)["backlog_bytes"]
    assert at_start[-1] >= 0.7 * backlog["backlog_bytes"].max(), at_start.tail(10)
    assert (first_op - storage_on) / 1e9 < 0.8 * experiment.STORAGE_WARMUP_S


def test_every_policy_says_whether_its_links_kept_time(fabric_ready, bottleneck_run):
    run, _, _ = bottleneck_run
    for name in ("fifo", "priority"):  # where the bottleneck queued
        fid = run.summary.policies[name].fidelity
        d = fid.dequeue["spine1-eth0"]
        assert d.pairs > 100 and 0 <= d.p50 <= d.p90 <= d.p99, d
        assert fid.links_kept_time == (not any(x.flagged for x in fid.dequeue.values()))
    gaps = run["gaps"]
    assert gaps.height > 0 and (gaps["gap_ns"] > 0).all()


def test_the_fabric_keeps_each_flow_in_order(fabric_ready, bottleneck_run):
    """Alone on the fabric nothing drops a ring packet, so a gap at a receiver can only be
    a reordered flow (veths not receiving through NAPI did that: NAKs in every run)."""
    run, _, _ = bottleneck_run
    alone = run["transport"].filter(pl.col("policy") == "isolated")
    assert alone.height == 8
    assert alone["out_of_order"].sum() == 0 and alone["naks"].sum() == 0


def test_tables_and_manifest(fabric_ready, bottleneck_run):
    run, _, _ = bottleneck_run
    m = run.manifest
    assert m.status == "complete" and m.scenario["name"] == "bottleneck"
    prov = m.provenance
    assert set(prov.bpf_objects) >= {"classifier.bpf.o", "queues.bpf.o"}
    assert prov.kernel and prov.labkit_revision and m.seed == 1
    assert m.start_time <= m.end_time
    assert prov.packages["polars"] == pl.__version__ and "plotly" in prov.packages
    assert len(prov.requirements_lock) == 64
    coll = run["collectives"]
    assert coll.filter(coll["policy"] == "fifo")["op"].n_unique() == ITERATIONS
    q = run["queue"].filter(run["queue"]["policy"] == "priority")
    per_port = q.group_by("port", "classid").len()
    span_s = (q["t_ns"].max() - q["t_ns"].min()) / 1e9
    assert per_port["len"].min() / span_s >= 100, "bottleneck classes sampled at >= 100 Hz"
    assert set(q["lane"]) == {"vip", "normal", "low"}


def test_lanes_cut_the_time_in_the_queue(fabric_ready, bottleneck_run):
    run, _, _ = bottleneck_run
    p = run.summary.policies
    fifo = p["fifo"].bottleneck.lanes
    prio = p["priority"].bottleneck.lanes
    assert prio.vip.sojourn_p99_us <= fifo.vip.sojourn_p99_us / 5
    assert prio.low.sojourn_p50_us >= prio.vip.sojourn_p50_us
    assert prio.low.sojourn_p99_us >= prio.vip.sojourn_p99_us
    assert fifo.vip.latency_p99_us > prio.vip.latency_p99_us
    for q in p.values():
        assert q.telemetry.events_lost == 0
        assert q.fidelity.links_at_rate and not q.fidelity.cpu_bound


def test_one_way_latency_is_never_below_sojourn(fabric_ready, bottleneck_run):
    run, _, _ = bottleneck_run
    key = ["policy", "stamp_ns", "seq"]

    def once(frame: pl.DataFrame) -> pl.DataFrame:
        # a packet seen more than once (rare: 1 in ~60k under fifo) cannot be paired
        return frame.filter(pl.len().over(key) == 1)

    joined = once(run["sojourn"].filter(pl.col("stamp_ns") > 0)).join(once(run["latency"]),
                                                                        on=key)
    assert joined.height > 100
    assert joined.filter(pl.col("latency_ns") < pl.col("sojourn_ns")).height == 0


def test_lane_counters_add_up(fabric_ready, bottleneck_run):
    """The classifier and the qdisc see every packet; the tracepoint programs nearly all.

    Exact: alone on the fabric (one lane, no GSO, nothing dropped) what the classifier
    sent to a port is what the port's HTB class took, counted by the kernel itself; the
    last rows are read after the traffic ended. Bounded: the tracepoint counters never
    exceed what the classifier sent, and fall short by at most 2 % per lane: this kernel
    does not run BPF programs on the qdisc and kfree_skb tracepoints for some of their hits
    in softirq context (bpf/queues.bpf.c). Over 528 lanes of the suite's runs the
    shortfall's median was 0.19 %, its largest 1.21 % (6 lanes past 1 %)."""
    run, _, _ = bottleneck_run
    lanes = run["lanes"].sort("t_ns").group_by("policy", "port", "lane").last()
    classes = run["queue"].sort("t_ns").group_by("policy", "port", "classid").last()
    alone_offered = lanes.filter(pl.col("policy") == "isolated").group_by("port").agg(
        pl.col("offered_packets").sum())
    alone_taken = classes.filter(pl.col("policy") == "isolated").group_by("port").agg(
        (pl.col("packets") + pl.col("drops") + pl.col("backlog_packets")).sum().alias("taken"))
    both = alone_offered.join(alone_taken, on="port")
    assert both.height == 2 and (both["offered_packets"] == both["taken"]).all(), both
    assert both["offered_packets"].min() > 750 * ITERATIONS

    unseen = lanes.with_columns((pl.col("offered_packets") - pl.col("enqueued_packets")
                                 - pl.col("dropped_packets")).alias("unseen"))
    assert (unseen["unseen"] >= 0).all(), unseen.filter(pl.col("unseen") < 0)
    # + 2: a lane of a few hundred packets (ACKs, ARP) may miss one or two
    too_many = unseen.filter(pl.col("unseen") > 0.02 * pl.col("offered_packets") + 2)
    assert too_many.height == 0, too_many
    policies = run.summary.policies
    for policy, counts in unseen.group_by("policy").agg(pl.col("unseen").sum()).iter_rows():
        assert policies[policy].telemetry.tracepoint_unseen == counts


def test_nothing_left_behind(fabric_ready, bottleneck_run):
    assert_no_leaks()


@pytest.mark.untimed
def test_bad_scenario_exits_2_and_creates_nothing(fabric_ready, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "topologies/bottleneck.yaml").read_text().replace(
        "rate_mbps: 100", "rate_mbps: -1"))
    before = labkit_objects()
    proc = subprocess.run([*LABKIT, "run", str(bad)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    lines = without_leftovers_note(proc.stderr.strip().splitlines())
    assert len(lines) == 1
    assert "bad.yaml: defaults.link.rate_mbps: must be between 1 and" in lines[0]
    assert labkit_objects() == before


@pytest.mark.untimed
def test_a_second_run_waits_for_nobody_and_names_the_first(fabric_ready, tmp_path):
    from labkit.kernel.registry import RunLock

    with RunLock("someone-elses-run"):
        proc = subprocess.run([*LABKIT, "run", str(REPO / "topologies/bottleneck.yaml"),
                               "--out", str(tmp_path / "r")], capture_output=True, text=True,
                              cwd=REPO, timeout=60)
    assert proc.returncode == 1
    assert "someone-elses-run" in proc.stderr and "in progress" in proc.stderr
    assert_no_leaks()


def test_the_python_api_runs_a_scenario_and_reports_progress(fabric_ready, tmp_path):
    seen: list[labkit.Progress] = []
    run = labkit.run(REPO / "topologies/bottleneck.yaml", ["fifo"], duration=3,
                     out=tmp_path / "api", on_progress=seen.append)
    assert run.path == tmp_path / "api" and run.manifest.status == "complete"
    assert list(run.summary.policies) == ["fifo"]
    assert run["collectives"].height > 0
    stages = [p.stage for p in seen]
    assert stages[0] == "building" and stages[-1] == "done" and "running" in stages
    done = [p.done for p in seen if p.stage == "running"]
    # op by op as the first rank finishes each; "done" counts the ops any rank recorded
    assert done == sorted(done) and 0 < done[-1] <= seen[-1].done
    assert_no_leaks()
