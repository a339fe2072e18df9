"""The labs (notebooks/labs/): each notebook and its script agree, its answers and live
cell tagged; its checks give the verdicts they should; the checks of the labs that need a
real run judge recorded runs; the plans' virtual time agrees with the textbook and the
recordings. Each lab run headless, blank and with the instructor's answers, is
test_handouts.py's grading; the live cells (real runs) are tests/tier2/test_labs_kernel.py's."""

import json
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from labkit.control import CONTROLLERS, Controller
from labkit.model.extend import load_class
from labkit.model.traffic import jobs, timeline
from labkit.runs.rundir import load_run
from labkit.ui.labs import FAIL, PASS, TODO, Verdict, notebook
from labkit.ui.labs import bottleneck as lab1
from labkit.ui.labs import controller as lab3
from labkit.ui.labs import lanes as lab2
from labkit.ui.labs import parallelism as lab4
from labkit.ui.labs import sharing as lab5
from labkit.ui.labs import straggler as lab6
from labkit.ui.labs.verdict import MIME, Wrong, check

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "notebooks/labs"
NAMES = ["lab1-find-the-bottleneck", "lab2-protect-the-collective",
         "lab3-write-a-controller", "lab4-pipeline-vs-tensor", "lab5-whose-allreduce-is-vip",
         "lab6-find-the-straggler"]
NO_LIVE_CELL = {NAMES[0], NAMES[5]}  # labs that read recorded runs only
SHARED = LABS / "shared-lane.yaml"
SOLVED_LANES = {"vip": [{"roce": True}], "low": [{"tcp_port": 4420}]}
IN_ORDER = ["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"]


@pytest.mark.parametrize("name", NAMES)
def test_the_pair_agrees_and_is_stripped_and_answers_and_live_cells_are_tagged(name):
    ipynb, script = (notebook.read(LABS / f"{name}{ext}") for ext in (".ipynb", ".py"))
    assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in ipynb.cells] == \
        [(c.cell_type, c.source, c.metadata.get("tags")) for c in script.cells]
    raw = json.loads((LABS / f"{name}.ipynb").read_text())
    assert all(not c.get("outputs") for c in raw["cells"] if c["cell_type"] == "code")
    assert notebook.tagged(ipynb, notebook.ANSWER)
    assert len(notebook.tagged(ipynb, notebook.LIVE)) == (0 if name in NO_LIVE_CELL else 1)


def test_a_solution_that_does_not_fit_its_lab_is_refused(tmp_path):
    (tmp_path / "lab.py").write_text('# %% tags=["answer"]\nX = ...\n\n# %%\nprint(X)\n')
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions/lab.py").write_text('# %% tags=["answer"]\nX = 1\n\n'
                                               '# %% tags=["answer"]\nY = 2\n')
    with pytest.raises(ValueError, match="has 2 answer cells, the lab 1"):
        notebook.fill(notebook.read(tmp_path / "lab.py"),
                      notebook.solution_for(tmp_path / "lab.py"))


def test_the_notebooks_test_does_not_pick_up_the_labs():
    from tests.tier0.test_notebooks import NOTEBOOKS

    assert NOTEBOOKS and not any("labs" in p.parts for p in NOTEBOOKS)


# --- the verdict ------------------------------------------------------------------------


def test_a_verdict_shows_in_a_notebook_and_a_terminal():
    v = Verdict("Lab x", FAIL, "not < 3", "try 2")
    bundle = v._repr_mimebundle_()
    assert bundle[MIME] == {"check": "Lab x", "status": FAIL, "message": "not < 3",
                            "hint": "try 2"}
    assert "not &lt; 3" in bundle["text/html"] and "try 2" in bundle["text/html"]
    assert str(v) == "✘ Lab x: not yet\n  not < 3\n  hint: try 2"
    assert not v.passed and Verdict("Lab x", PASS, "ok").passed


def test_whatever_goes_wrong_in_a_check_becomes_a_verdict():
    @check("Demo")
    def demo(answer):
        if answer == "wrong":
            raise Wrong("no", "yes")
        return {}[answer]

    assert demo("wrong") == Verdict("Demo", FAIL, "no", "yes")
    crashed = demo("key")
    assert crashed.status == FAIL and "KeyError" in crashed.message
    assert demo(1, 2, 3).status == FAIL  # even a wrong call


# --- lab 1: find the bottleneck ---------------------------------------------------------


@pytest.mark.parametrize(("answer", "status", "words"), [
    (("spine1", "leaf1"), PASS, "1024 KiB"),
    ("spine1->leaf1", PASS, "spine1-eth0"),
    ("spine1-eth0", PASS, "its whole"),
    (("leaf1", "spine1"), FAIL, "wrong direction"),
    (("g1", "leaf1"), FAIL, "host's own NIC"),
    (("leaf1", "g2"), FAIL, "not among the ports the recording watched"),
    (("leaf1", "st1"), FAIL, "no link to st1"),
    (..., TODO, "QUEUE_AT"),
])
def test_lab1_queue_port(answer, status, words):
    v = lab1.check_queue_port(answer)
    assert v.status == status and words in v.message, v


def test_lab1_the_traffic_table_shows_the_funnel():
    row = lab1.port_traffic().filter(pl.col("port") == "spine1->leaf1").row(0, named=True)
    assert row["offered_mbps"] == 220 and row["more_than_it_sends"]
    assert "allreduce g8->g1" in row["flows"] and "dataset st1->g4" in row["flows"]


@pytest.mark.parametrize(("ms", "status", "hint"), [
    (83.9, PASS, ""), (80, PASS, ""), (10.5, FAIL, "bits"), (0.0839, FAIL, "units"),
    (40, FAIL, "bits / (bits per second)"), ("soon", FAIL, "number"), (None, TODO, "")])
def test_lab1_full_queue_wait(ms, status, hint):
    v = lab1.check_full_queue_wait(ms)
    assert v.status == status and hint in v.hint, v


@pytest.mark.parametrize(("lane", "status"), [("low", PASS), (" LOW ", PASS), ("vip", FAIL),
                                              ("normal", FAIL), ("blue", FAIL), (..., TODO)])
def test_lab1_waiting_lane(lane, status):
    assert lab1.check_waiting_lane(lane).status == status


# --- lab 2: protect the collective ------------------------------------------------------


@pytest.mark.parametrize(("lanes", "status", "words"), [
    (SOLVED_LANES, PASS, "storage data from st1 (NVMe/TCP) -> low"),
    ({"vip": [{"udp_dport": 4791}]}, PASS, "rides normal"),
    ({"vip": [{"tcp_port": 4420}, {"roce": True}]}, FAIL, "still shares the vip lane"),
    ({"low": [{"tcp_port": 4420}]}, FAIL, "not in vip"),
    ({"vip": [{"roce": True}], "low": [{"tcp_prot": 4420}]}, FAIL, "lanes.low[0].tcp_prot"),
    ([SOLVED_LANES], FAIL, "must be a dict"),
    (..., TODO, "LANES"),
])
def test_lab2_lane_rules(lanes, status, words):
    v = lab2.check_lane_rules(lanes, SHARED)
    assert v.status == status and words in v.message, v


def test_lab2_the_classifier_logic_first_match_wins():
    rules = lab2.with_lanes(SHARED, {"low": [{"tcp_dport": 4420}], "vip": [{"tcp_port": 4420}]})
    to_server = {"proto": "tcp", "sport": 50000, "dport": 4420, "dscp": 0, "roce": False}
    from_server = {**to_server, "sport": 4420, "dport": 50000}
    assert lab2.lane_of(rules.lanes, to_server) == "low"
    assert lab2.lane_of(rules.lanes, from_server) == "vip"
    assert lab2.lane_of(rules.lanes, {**to_server, "proto": "udp"}) == "normal"


def test_lab2_a_run_that_meets_the_bar_passes_and_one_that_does_not_fails():
    run = load_run(lab2.SAMPLE_BOTTLENECK)
    p99 = {name: f"{p.workload.slowdown_p99:.2f}" for name, p in run.summary.policies.items()}
    good = lab2.check_protected(run)  # priority: 1.00 when recorded
    assert good.status == PASS and p99["priority"] in good.message
    bad = lab2.check_protected(lab2.SAMPLE_BOTTLENECK, policy="fifo")  # 2.9 when recorded
    assert bad.status == FAIL and p99["fifo"] in bad.message and "dropped" in bad.message
    assert lab2.check_protected(None).status == TODO
    assert "no proactive policy" in lab2.check_protected(run, "proactive").message
    prio = run.summary.policies["priority"]
    run.summary = replace(run.summary, policies={**run.summary.policies, "priority": replace(
        prio, workload=replace(prio.workload, slowdown_p99=None))})
    assert "no isolated policy" in lab2.check_protected(run).message


def test_lab2_a_blank_or_refused_rule_set_runs_nothing(capsys):
    assert lab2.run_with_lanes(SHARED, ...) is None
    assert lab2.run_with_lanes(SHARED, {"vip": [{"nope": 1}]}) is None
    assert "Not run: the scenario refuses these lanes" in capsys.readouterr().out


# --- lab 3: write a controller ----------------------------------------------------------


def test_lab3_a_run_where_the_controller_beats_reactive_passes():
    run = load_run(lab3.SAMPLE)
    p99 = {name: f"{p.workload.slowdown_p99:.2f}" for name, p in run.summary.policies.items()}
    assert float(p99["proactive"]) < float(p99["reactive"]) < float(p99["fifo"])
    assert lab3.check_beats(run, mine="proactive").status == PASS
    worse = lab3.check_beats(run, mine="fifo")
    assert worse.status == FAIL and p99["fifo"] in worse.message
    assert p99["reactive"] in worse.message
    assert "no mine policy" in lab3.check_beats(run).message
    assert lab3.check_beats(None).status == TODO
    run.summary = replace(run.summary, policies={  # without isolated: it compares p99 ms
        name: replace(p, workload=replace(p.workload, slowdown_p99=None))
        for name, p in run.summary.policies.items()})
    assert " ms under proactive" in lab3.check_beats(run, mine="proactive").message


def test_lab3_rehearsal_tells_a_quick_controller_from_reactive():
    calm = load_class(f"{REPO / 'docs/examples/controller.py'}:Calm", Controller, "step")
    assert lab3.check_rehearsal(calm).status == PASS
    assert lab3.check_rehearsal(CONTROLLERS["proactive"]).status == PASS
    slow = lab3.check_rehearsal(CONTROLLERS["reactive"])
    assert slow.status == FAIL and "held only after" in slow.message
    reactive = lab3.rehearse(CONTROLLERS["reactive"])
    assert all(ms > lab3.REACT_MS for ms in reactive.held_after_ms)  # it halves, step by step


class Todo(Controller):
    def step(self, now_ns):
        raise NotImplementedError


class Broken(Controller):
    def step(self, now_ns):
        return 1 / 0


class Miser(Controller):
    def step(self, now_ns):
        self.hold(self.plant.spec.busy_share, "always")


class Idle(Controller):
    def step(self, now_ns):
        pass


@pytest.mark.parametrize(("cls", "status", "words"), [
    (Todo, TODO, "not written yet"), (Broken, FAIL, "ZeroDivisionError"),
    (Miser, FAIL, "starves"), (Idle, FAIL, "never"), (Controller, TODO, "not written"),
    (int, FAIL, "not a controller class"), (..., TODO, "blank")])
def test_lab3_rehearsal_verdicts(cls, status, words):
    v = lab3.check_rehearsal(cls)
    assert v.status == status and words in v.message, v


def test_lab3_a_class_that_fails_its_rehearsal_is_not_run(capsys):
    assert lab3.run_against(Todo) is None and lab3.run_against(Broken) is None
    assert "ZeroDivisionError" in capsys.readouterr().out


# --- lab 4: pipeline vs tensor parallelism ----------------------------------------------


@pytest.mark.parametrize("schedule", jobs.PIPELINE_SCHEDULES)
def test_plans_in_virtual_time_idle_as_the_textbook_says(schedule):
    for p, m in [(2, 1), (4, 3), (8, 8), (8, 16)]:
        job = {"parallelism": "pipeline", "microbatches": m, "activation_bytes": 4096,
               "stage_compute_ms": 5, "schedule": schedule}
        run = timeline.simulate([jobs.plan(job, p, r) for r in range(p)])
        assert run.idle_fraction == pytest.approx((p - 1) / (m + p - 1))
        assert run.makespan_ns == pytest.approx((m + p - 1) * 15e6)
        assert all(sum(b - a for a, b in spans) == pytest.approx(m * 15e6)
                   for spans in run.busy_ns)


def test_plans_with_wire_times_match_the_recorded_tensor_job():
    """The tensor job's plans, each message at 100 Mbit/s, last as long as the recorded
    job's iterations alone (413.6 ms against a median of 412.7 ms)."""
    sc = lab4.scenario.load(lab4.TENSOR)
    run = timeline.simulate(lab4._plans(sc), lab4.wire_time(sc))
    recorded = load_run(lab4.SAMPLES / "tensor-parallel").summary.policies["isolated"]
    assert run.makespan_ns / 1e6 == pytest.approx(
        recorded.workload.p50_ms, rel=0.05)


def test_plans_that_wait_for_a_message_never_sent_are_refused():
    from labkit.model.traffic.schedules import Msg, Plan, Step

    lonely = Plan([Step(recv=[Msg(1, 0, 10)]), Step()], 1, {}, {})
    with pytest.raises(ValueError, match="deadlock"):
        timeline.simulate([lonely, Plan([Step()], 0, {}, {})])


@pytest.mark.parametrize(("fn", "status", "words"), [
    (lambda p, m: (p - 1) / (m + p - 1), PASS, "15 cases"),
    (lambda p, m: (p - 1) / m, FAIL, "labkit's plans idle 0.5000"),
    (lambda p, m: 1 / 0, FAIL, "ZeroDivisionError"),
    (lambda p, m: ..., TODO, "blank"),
    (lambda p, m: "half", FAIL, "'half'"),
    (3, FAIL, "not a function"),
])
def test_lab4_bubble_formula(fn, status, words):
    v = lab4.check_bubble_formula(fn)
    assert v.status == status and words in v.message, v


@pytest.mark.parametrize(("m", "placement", "status", "words"), [
    (8, IN_ORDER, PASS, "512 KiB across"),
    (4, ["g1", "g2", "g5", "g6", "g7", "g8", "g3", "g4"], PASS, "could cut the uplink"),
    (16, IN_ORDER, FAIL, "no longer the textbook's bubble"),
    (8, list(lab4.START[1]), FAIL, "no fewer bytes"),
    (2, IN_ORDER, FAIL, "no smaller"),
    (*lab4.START, TODO, "starting point"),
    (0, IN_ORDER, FAIL, "whole number"),
    (8, IN_ORDER[:-1] + ["g1"], FAIL, "each GPU host once"),
])
def test_lab4_pipeline_choice(m, placement, status, words):
    v = lab4.check_pipeline_choice(m, placement)
    assert v.status == status and words in v.message, v


def test_lab4_uplink_question_and_its_figures():
    assert lab4.check_more_uplink("tensor").status == PASS
    assert lab4.check_more_uplink("pipeline").status == FAIL
    start, best = lab4.compare([lab4.START, (8, IN_ORDER)]).iter_rows(named=True)
    assert start["uplink_kib"] == 7 * best["uplink_kib"] == 7 * 512  # 7 boundaries vs 1
    assert start["bubble_free_messages"] == start["textbook"] == pytest.approx(7 / 9, abs=1e-3)
    assert len(lab4.schedule_figure(4, IN_ORDER).data) == 8  # one row of bars per stage
    assert lab4.measured(None).startswith("no live run")
    assert lab4.measured(lab4.SAMPLES / "pipeline-parallel")["uplink_kib_one_way"][0] == 256


def test_lab4_a_blank_or_invalid_choice_runs_nothing(capsys):
    assert lab4.run_choice(..., IN_ORDER) is None
    assert lab4.run_choice(0, IN_ORDER) is None
    assert "whole number" in capsys.readouterr().out


# --- lab 5: whose All-Reduce is vip -----------------------------------------------------


def test_lab5_intensity_from_the_plans_is_the_ring_formula_and_what_job_priority_learned():
    """2(n-1)/n x size each way per iteration, and the learned intensities in the
    recording within a few percent of it (94.0 and 266.4 ns/B against 95.4 and 270.2)."""
    jobs = lab5.jobs()
    sent = lab5.bottleneck_bytes()
    for job in jobs.iter_rows(named=True):
        n = job["gpus"]
        assert sent[job["job"]] == 2 * (n - 1) * job["size_bytes"] // n
    want = lab5.intensity()
    learned = {r["job"]: r["intensity_ns_per_byte"]
               for r in lab5.rankings(lab5.SAMPLE).iter_rows(named=True)}
    assert set(learned) == set(want)
    for job, value in learned.items():
        assert value == pytest.approx(want[job], rel=0.05)
    assert lab5.favoured(lab5.SAMPLE) == max(want, key=want.__getitem__) == "light"


@pytest.mark.parametrize(("best", "pays", "status", "words"), [
    ("job-priority", "heavy", PASS, "recording agrees"),
    (" Job-Priority ", "HEAVY", PASS, "heavy paid"),
    ("job-priority", "light", FAIL, "not light that pays"),
    ("fair", "heavy", FAIL, "fair is not"),
    ("interleave", "light", FAIL, "interleave is not"),
    ("priority", "heavy", FAIL, "is not one of"),
    ("job-priority", "medium", FAIL, "is not one of"),
    (..., "heavy", TODO, "BEST_POLICY"),
    ("job-priority", ..., TODO, "WHO_PAYS"),
])
def test_lab5_prediction(best, pays, status, words):
    v = lab5.check_prediction(best, pays)
    assert v.status == status and words in v.message, v


HEAVY, LIGHT = 300e6 / (1.5 * 2**21), 425e6 / (1.5 * 2**20)


@pytest.mark.parametrize(("answer", "status", "words"), [
    ({"heavy": HEAVY, "light": LIGHT}, PASS, "job-priority learned"),
    ({"heavy": 100, "light": 283}, PASS, "ns/B"),  # ms per MiB: within the tolerance
    ({"heavy": HEAVY * 1.5, "light": LIGHT}, FAIL, "2(n-1) chunks of size/n"),
    ({"heavy": HEAVY * 2, "light": LIGHT}, FAIL, "not (n-1)/n"),
    ({"heavy": HEAVY / 2, "light": LIGHT}, FAIL, "count it once"),
    ({"heavy": HEAVY / 4, "light": LIGHT}, FAIL, "not 2(n-1) buffers"),
    ({"heavy": HEAVY / 8, "light": LIGHT}, FAIL, "bytes or bits"),
    ({"heavy": HEAVY * 1e-6, "light": LIGHT}, FAIL, "units"),
    ({"heavy": 1 / HEAVY, "light": LIGHT}, FAIL, "not bytes per unit of compute"),
    ({"heavy": HEAVY, "light": 999}, FAIL, "light: 999"),
    ({"heavy": HEAVY, "light": "a lot"}, FAIL, "not a number"),
    ({"heavy": HEAVY}, FAIL, "one number per job"),
    ([HEAVY, LIGHT], FAIL, "one number per job"),
    ({"heavy": ..., "light": ...}, TODO, "INTENSITY['heavy']"),
    (..., TODO, "INTENSITY"),
])
def test_lab5_intensity(answer, status, words):
    v = lab5.check_intensity(answer)
    assert v.status == status and (words in v.message or words in v.hint), v


@pytest.mark.parametrize(("answer", "status"), [("light", PASS), ("Light ", PASS),
                                                ("heavy", FAIL), ("storage", FAIL),
                                                (..., TODO)])
def test_lab5_favoured(answer, status):
    assert lab5.check_favoured(answer).status == status


def test_lab5_measurements_against_the_recording():
    run = load_run(lab5.SAMPLE)
    jobs = {p: run.summary.policies[p].jobs for p in lab5.SHARING}
    util = {p: j.gpu_utilization for p, j in jobs.items()}
    assert max(util, key=util.__getitem__) == "job-priority"  # as the prediction says
    rounded = {p: round(u, 2) for p, u in util.items()}
    good = lab5.check_utilization(rounded, run)
    assert good.status == PASS and f"{util['fair']:.1%}" in good.message
    percent = lab5.check_utilization({p: 100 * u for p, u in util.items()}, run)
    assert percent.status == FAIL and "not a percentage" in percent.hint
    one_job = lab5.check_utilization({**util, "fair": jobs["fair"].each["heavy"]
                                      .gpu_utilization}, run)
    assert one_job.status == FAIL and "one job's" in one_job.hint
    assert "has no interleave" in lab5.check_utilization(
        {p: u for p, u in util.items() if p != "interleave"}, run).message
    assert lab5.check_utilization({**util, "fair": ...}, run).status == TODO
    each = jobs["job-priority"].each
    p99 = each["light"].slowdown_p99
    tail = lab5.check_favoured_slowdown(round(p99, 2), run)
    assert tail.status == PASS and f"{p99:.2f}x" in tail.message
    assert p99 <= lab5.CRUX_BAR and "(within" in tail.message
    other = lab5.check_favoured_slowdown(each["heavy"].slowdown_p99, run)
    assert other.status == FAIL and "the other job's" in other.hint
    ms = lab5.check_favoured_slowdown(each["light"].iteration_p99_ms, run)
    assert ms.status == FAIL and "not milliseconds" in ms.hint
    assert lab5.check_favoured_slowdown(..., run).status == TODO
    assert lab5.check_utilization(util, None).status == TODO


def test_lab5_reads_the_recording_without_a_live_run_and_tabulates_it(capsys):
    source = lab5.source(None)
    assert source.path == lab5.SAMPLE and "no live run" in capsys.readouterr().out
    table = lab5.table(source)
    assert table["policy"].unique(maintain_order=True).to_list() == list(lab5.LIVE_POLICIES)
    assert table.height == 2 * len(lab5.LIVE_POLICIES)


# --- lab 6: find the straggler ----------------------------------------------------------


def test_lab6_the_truth_is_the_events_and_agrees_with_the_ranks_records():
    """g3 at twice its compute from 2 s for 3 s: the iterations whose compute on g3 began
    meanwhile, exactly those in which g3 computed twice its usual, and their cost what the
    event added to g3's compute, within a few percent of what the job lost (and of
    labkit's culprits, which never read the events)."""
    truth = lab6.truth()
    assert (truth.kind, truth.name, truth.change, truth.value) == ("rank", "g3", "slow", 2.0)
    assert truth.start_s == pytest.approx(1.9, abs=0.2)
    assert truth.end_s - truth.start_s == pytest.approx(3.0, abs=0.01)
    compute = lab6.per_rank(lab6.SAMPLE, "compute")
    doubled = compute.filter(pl.col("g3") > 1.5 * pl.col("g1"))["op"].to_list()
    assert doubled == truth.ops
    usual = compute.filter(~pl.col("op").is_in(truth.ops))
    assert truth.cost_ms == pytest.approx(len(truth.ops) * usual["g3"].median(), rel=0.01)
    (culprit,) = load_run(lab6.SAMPLE).summary.policies["isolated"].culprits
    assert (culprit.kind, culprit.name) == (truth.kind, truth.name)
    assert (culprit.from_op, culprit.to_op) == (truth.first_op, truth.last_op)
    assert culprit.lost_ms == pytest.approx(truth.cost_ms, rel=lab6.COST_TOLERANCE)


def test_lab6_shows_the_scenario_without_its_fault_and_the_tables_it_is_found_in():
    given = lab6.setup()
    assert "events" not in given and "slow" not in given and "g3 computing" not in given
    assert "compute_ms: 50" in given and "[leaf1, spine1]" in given
    ops = lab6.iterations()
    assert ops.height == 24 and ops["op"].to_list() == list(range(24))
    for what in ("compute", "bubble", "wire"):
        table = lab6.per_rank(lab6.SAMPLE, what)
        assert table.columns == ["op", *(f"g{i}" for i in range(1, 9))] and table.height == 24
    with pytest.raises(ValueError, match="one of compute"):
        lab6.per_rank(lab6.SAMPLE, "gpu")
    port = lab6.bottleneck()
    assert port["drops"].sum() == 0 and port["port"].unique().to_list() == ["spine1-eth0"]
    assert lab6.culprits()["name"].to_list() == ["g3"]
    events = lab6.events()
    assert events["on"].to_list() == ["g3", "g3"] and events["state"].to_list() == ["start", "end"]


@pytest.mark.parametrize(("waits", "growth", "status", "words"), [
    ("others", "same", PASS, "recording agrees"),
    (" Others ", "SAME", PASS, "7 of the 8 ranks"),
    ("straggler", "same", FAIL, "7 of the 8 ranks grew"),
    ("neighbours", "same", FAIL, "not 'neighbours'"),
    ("others", "n times", FAIL, "right about the bubbles"),
    ("others", "less", FAIL, "not 'less'"),
    ("everyone", "same", FAIL, "is not one of"),
    (..., "same", TODO, "WHO_WAITS"),
    ("others", ..., TODO, "GROWTH"),
])
def test_lab6_prediction(waits, growth, status, words):
    v = lab6.check_prediction(waits, growth)
    assert v.status == status and words in v.message, v


def test_lab6_a_failed_prediction_does_not_give_the_straggler_away():
    assert "g3" not in str(lab6.check_prediction("straggler", "same"))


@pytest.mark.parametrize(("kind", "who", "status", "words"), [
    ("rank", "g3", PASS, "g3 computing 2x"),
    (" Rank", "G3 ", PASS, "it was g3"),
    ("rank", "g4", FAIL, "not g4"),
    ("link", "leaf1-g3", FAIL, "not a link"),
    ("bottleneck", "leaf1-spine1", FAIL, "the bottleneck did not do it"),
    ("gpu", "g3", FAIL, "is not one of"),
    (..., "g3", TODO, "KIND"),
    ("rank", ..., TODO, "WHO"),
])
def test_lab6_culprit(kind, who, status, words):
    v = lab6.check_culprit(kind, who)
    assert v.status == status and words in v.message, v


@pytest.mark.parametrize(("first", "last", "status", "words"), [
    (7, 13, PASS, "7 of them"),
    (6, 13, FAIL, "not slowed is in"),
    (7, 12, FAIL, "was left out"),
    (13, 7, FAIL, "no range"),
    (7.0, 13, FAIL, "not an iteration number"),
    (..., 13, TODO, "FIRST_OP"),
    (7, ..., TODO, "LAST_OP"),
])
def test_lab6_iterations(first, last, status, words):
    v = lab6.check_iterations(first, last)
    assert v.status == status and (words in v.message or words in v.hint), v


@pytest.mark.parametrize(("ms", "status", "words"), [
    (1050, PASS, "labkit's culprits say"), (950, PASS, "150 ms each"),
    (150, FAIL, "one iteration's"), (3200, FAIL, "whole time"),
    (8400, FAIL, "not per rank"), (1.05, FAIL, "milliseconds"),
    (500, FAIL, "the median of the others"), ("a second", FAIL, "not a number"),
    (..., TODO, "LOST_MS")])
def test_lab6_cost(ms, status, words):
    v = lab6.check_cost(ms)
    assert v.status == status and (words in v.message or words in v.hint), v


def test_lab6_checks_grade_against_the_events_of_the_run_given():
    """A run whose events name another fault (here link-faults': g3's link losing
    packets first) is graded against those: the answers for the straggler fail there."""
    faults = REPO / "data/sample/link-faults"
    truth = lab6.truth(faults)
    assert (truth.kind, truth.name) == ("link", "leaf1-g3") and truth.cost_ms > 0
    assert lab6.check_culprit("link", "g3-leaf1", faults).status == PASS
    assert lab6.check_culprit("rank", "g3", faults).status == FAIL
    assert "not a straggler" in lab6.check_prediction("others", "same", faults).message
    assert lab6.check_culprit("rank", "g3", None).status == TODO
