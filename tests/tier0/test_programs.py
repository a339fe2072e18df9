"""A user's own program as the workload (kind: program): the entry, the ranks' environment
and command lines, the line protocol, and what is derived from lines or traffic."""

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from ipaddress import ip_address, ip_network
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
import yaml

from labkit.analysis import frames, jobtiming, windows, workloads
from labkit.kernel import cgroups
from labkit.kernel.jobmark import BurstRow
from labkit.model import scenario, topo
from labkit.model.scenario import ScenarioError
from labkit.model.summary import ProgramRank, Summary
from labkit.model.summary_meta import ProgramReport
from labkit.model.tables import OpRow
from labkit.model.traffic import lines
from labkit.model.traffic.rhythm import Rhythm
from labkit.traffic import programs

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "topologies"


@pytest.fixture
def doc():
    return yaml.safe_load((TOPOLOGIES / "pytorch-ddp.yaml").read_text())


def parse(doc, file=str(TOPOLOGIES / "x.yaml")):
    return scenario.parse(doc, file)


def test_the_shipped_job_is_the_workload(doc):
    sc = parse(doc)
    assert sc.allreduce is None and sc.job is None and sc.workload is sc.program
    p = sc.program
    assert p.ranks == tuple(f"g{i}" for i in range(1, 9)) and p.iterations == 40
    assert p.cwd == str(TOPOLOGIES) and p.python == scenario.DEFAULT_PYTHON
    assert p.imports == ("torch",) and p.warmup == 1
    assert sc.ranks == p.ranks and sc.iterations == 40
    first = sc.lanes[0]  # the program's DSCP leads the vip lane, once
    assert first.lane == "vip" and first.dscp == scenario.JOB_DSCP
    assert sum(r.dscp == scenario.JOB_DSCP for r in sc.lanes) == 1


def test_a_program_needs_no_labkit_collective_and_runs_alone(doc):
    doc["traffic"] = [doc["traffic"][0]]
    assert parse(doc).program and not parse(doc).storage


def _error(doc) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse(doc)
    return info.value


@pytest.mark.parametrize("change, key, reason", [
    ({"run": "{python} t.py {gpu9}"}, "traffic[0].run", "not a host of this fabric"),
    ({"ranks": ["g1"]}, "traffic[0].ranks", "at least 2 ranks"),
    ({"name": "Big Job"}, "traffic[0].name", "must be a label"),
    ({"iterations": 0}, "traffic[0].iterations", "between 1 and"),
    ({"warmup": 40}, "traffic[0].warmup", "leaves no iteration"),
    ({"dscp": 64}, "traffic[0].dscp", "between 1 and 63"),
    ({"quiet_ms": 0.01}, "traffic[0].quiet_ms", "between 0.1 and 1000"),
    ({"duration_s": 1e9}, "traffic[0].duration_s", "at most"),
    ({"env": {"1BAD": "x"}}, "traffic[0].env.1BAD", "environment variable"),
    ({"env": {"A": [1]}}, "traffic[0].env.A", "string or a number"),
    ({"imports": ["torch;rm"]}, "traffic[0].imports[0]", "not a Python module"),
    ({"master_port": 80}, "traffic[0].master_port", "between 1024"),
    ({"colour": "red"}, "traffic[0].colour", "unknown key"),
])
def test_bad_program_entries_name_key_and_reason(doc, change, key, reason):
    doc["traffic"][0].update(change)
    err = _error(doc)
    assert err.key == key and reason in err.reason, err


def test_a_second_program_on_the_same_hosts_is_refused(doc):
    doc["traffic"].append({**doc["traffic"][0], "name": "second"})
    err = _error(doc)
    assert err.key == "traffic[3].ranks" and "hosts of its own" in err.reason


def test_a_rule_that_puts_the_jobs_dscp_elsewhere_is_refused(doc):
    doc["lanes"]["low"].append({"dscp": 26})
    err = _error(doc)
    assert err.key == "lanes.low[1]" and "DSCP 26" in err.reason


def test_a_program_cannot_be_rate_scaled(doc):
    doc["emulation"] = {"rate_factor": 2}
    assert _error(doc).key == "emulation.rate_factor"


def test_a_host_named_like_a_template_is_refused(doc):
    doc["fabric"]["hosts"]["gpu"]["leaf1"][0] = "rank"
    doc["traffic"][0]["ranks"] = ["rank", "g2"]
    doc["traffic"][1]["clients"] = ["g2"]
    doc["traffic"][2]["serve"]["host"] = "g2"
    doc["traffic"][2]["run"] = "iperf3 -c {g2}"
    assert "template" in _error(doc).reason


def test_relative_interpreters_are_the_scenarios(doc):
    doc["traffic"][0]["python"] = "../venv/bin/python"
    assert parse(doc).program.python == str(REPO / "venv/bin/python")


def test_each_rank_gets_torchruns_environment(doc):
    doc["fabric"]["gpus_per_host"] = 2  # servers of two GPUs: local ranks 0, 1
    sc = parse(doc)
    t = topo.Topology(sc.fabric)
    env = programs.rank_env(sc.program, t, 3, "g4-eth0", base={"PATH": "/bin"})
    assert env["RANK"] == "3" and env["WORLD_SIZE"] == "8"
    assert env["LOCAL_RANK"] == "1" and env["LOCAL_WORLD_SIZE"] == "2"
    assert env["GROUP_RANK"] == "1" and env["MASTER_ADDR"] == t.host_ip("g1")
    assert env["MASTER_PORT"] == "29500" and env["GLOO_SOCKET_IFNAME"] == "g4-eth0"
    assert env["NCCL_SOCKET_IFNAME"] == "g4-eth0" and env["OMP_NUM_THREADS"] == "1"
    # labkit's start-up hook first (timing: auto), then labkit's checkout
    assert env["PYTHONPATH"].split(":")[:2] == [str(REPO / "labkit/traffic/startup"),
                                                str(REPO)] and env["PATH"] == "/bin"
    without = replace(sc.program, timing="traffic")
    assert programs.rank_env(without, t, 3, "g4-eth0")["PYTHONPATH"].split(":")[0] == str(REPO)


def test_the_entrys_env_wins_over_the_defaults_not_over_the_ranks(doc):
    doc["traffic"][0]["env"] = {"OMP_NUM_THREADS": 2, "RANK": "99"}
    sc = parse(doc)
    env = programs.rank_env(sc.program, topo.Topology(sc.fabric), 5, "g6-eth0", base={})
    assert env["OMP_NUM_THREADS"] == "2" and env["RANK"] == "5"


def test_run_is_filled_in_per_rank(doc):
    doc["traffic"][0]["run"] = ("{python} t.py --rank {rank} --of {world_size} --peer {g5} "
                                "--at {master_addr}:{master_port} --steps {iterations}")
    sc = parse(doc)
    t = topo.Topology(sc.fabric)
    argv = programs.rank_argv(sc.program, t, 2, "g3-eth0")
    assert argv == ["/usr/bin/python3", "t.py", "--rank", "2", "--of", "8", "--peer",
                    t.host_ip("g5"), "--at", f"{t.host_ip('g1')}:29500", "--steps", "40"]


def test_a_missing_script_is_found_before_the_run(doc, tmp_path):
    doc["traffic"][0]["run"] = "{python} nowhere.py"
    sc = parse(doc, str(tmp_path / "s.yaml"))
    with pytest.raises(ScenarioError) as info:
        programs.check(sc.program, topo.Topology(sc.fabric), "s.yaml")
    assert info.value.key == "traffic[0].run" and "nowhere.py does not exist" in info.value.reason


def test_a_missing_interpreter_is_found_before_the_run(doc):
    doc["traffic"][0]["python"] = "/nonexistent/python"
    sc = parse(doc)
    with pytest.raises(ScenarioError) as info:
        programs.check(sc.program, topo.Topology(sc.fabric), "s.yaml")
    assert info.value.key == "traffic[0].python"


def test_a_module_the_interpreter_lacks_is_found_before_the_run(doc, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("")
    doc["traffic"][0].update(run="{python} job.py", python=sys.executable,
                             imports=["no_such_module_here"])
    sc = parse(doc, str(tmp_path / "s.yaml"))
    with pytest.raises(ScenarioError) as info:
        programs.check(sc.program, topo.Topology(sc.fabric), "s.yaml")
    assert info.value.key == "traffic[0].imports"
    assert "cannot import no_such_module_here" in info.value.reason


def test_a_module_installed_after_a_failed_check_is_found_the_next_time(doc, tmp_path):
    """A failed import check is not remembered; a passed one is, for the same interpreter
    and search path (a notebook's reruns do not pay the import again)."""
    (tmp_path / "job.py").write_text("")
    site = tmp_path / "site"
    site.mkdir()
    doc["traffic"][0].update(run="{python} job.py", python=sys.executable,
                             imports=["labkit_late_module"], env={"PYTHONPATH": str(site)})
    sc = parse(doc, str(tmp_path / "s.yaml"))
    where = topo.Topology(sc.fabric)
    with pytest.raises(ScenarioError):
        programs.check(sc.program, where, "s.yaml")
    (site / "labkit_late_module.py").write_text("")
    programs.check(sc.program, where, "s.yaml")
    assert any("labkit_late_module" in seen[2] for seen in programs._IMPORTED)


# --- the line protocol --------------------------------------------------------------------


def test_lines_round_trip_among_other_output():
    text = "\n".join([
        "epoch 1 starting", lines.op_line("all_reduce", 100, 180, 2048, 0),
        lines.iteration_line(0, 50, 200, 80), '{"labkit": "iteration", "start_ns": 300}',
        '{"labkit": "nonsense"', lines.iteration_line(1, 210, 400), "done"])
    iterations, ops, bad = lines.parse(text)
    assert iterations == [lines.Iteration(0, 50, 200, 80), lines.Iteration(1, 210, 400, None)]
    assert ops == [lines.Op(0, "all_reduce", 2048, 100, 180)]
    assert bad == 2


@pytest.mark.parametrize("line", [
    '{"labkit": "iteration", "start_ns": 5, "end_ns": 4}',
    '{"labkit": "iteration", "start_ns": 5, "end_ns": 9, "exposed_ns": 10}',
    '{"labkit": "op", "start_ns": true, "end_ns": 9}',
    '{"labkit": "step", "start_ns": 1, "end_ns": 9}',
    '{"labkit": ["iteration"], "start_ns": 1, "end_ns": 9}'])
def test_bad_lines_are_counted_not_kept(line):
    assert lines.parse(line)[2] == 1


def test_the_torch_helper_prints_the_protocol_without_torch():
    from labkit.torch import Steps

    out = io.StringIO()
    steps = Steps(out=out, phase_fd=-1)
    steps.phase.update = None  # no map here: it announces nothing
    for _ in range(2):
        with steps.step():
            with steps.comm("all_reduce", 1024):
                pass
    iterations, ops, bad = lines.parse(out.getvalue())
    assert [it.i for it in iterations] == [0, 1] and not bad
    assert [(o.i, o.op, o.bytes) for o in ops] == [(i, "all_reduce", 1024) for i in (0, 1)]
    assert all(it.exposed_ns >= o.end_ns - o.start_ns
               for it, o in zip(iterations, ops, strict=True))


class _Phase:
    """The host's phase map as the kernel leaves it after each step: the step's first
    burst across a bottleneck ``offset_ms`` after its start (the test's stand-in for the
    map; tier 2 runs the real one)."""

    def __init__(self, offsets_ms):
        self.offsets, self.announced, self.start = list(offsets_ms), [], 0

    def clear_crossing(self):
        self.start = time.monotonic_ns()

    def read(self):
        offset = self.offsets.pop(0)  # None: the step did not cross
        cross = self.start + int(offset * 1e6) if offset is not None else 0
        until = self.announced[-1][1] if self.announced else 0
        return (0, until, 0, 0, 0, cross, cross + 1 if cross else 0)

    def announce(self, start_ns, end_ns, phase):
        self.announced.append((start_ns, end_ns, phase))


def test_the_first_step_teaches_the_forecast_nothing_and_the_second_is_held():
    from labkit.torch import SOON, WINDOW_NS, Steps

    steps = Steps(out=io.StringIO(), phase_fd=-1)
    steps.phase = _Phase([400, 20, 30])  # the first step's set-up crossed 400 ms in
    for _ in range(3):
        with steps.step():
            pass
    assert [round(o / 1e6) for o in steps.offsets] == [20, 30]  # from the second step on
    (hold, *known) = steps.phase.announced
    assert hold[1] - hold[0] > 0 and hold[2] == SOON  # the second step: held from its start
    assert len(known) == 2 and all(end - start == WINDOW_NS and phase == SOON
                                   for start, end, phase in known)
    ring = Steps(out=io.StringIO(), phase_fd=-1)  # a rank that crosses only in set-up
    ring.phase = _Phase([400, None, None])
    for i in range(3):
        with ring.step():
            time.sleep(0.05 if i == 0 else 0)  # its hold: up to 100 ms past this step
    assert [a[2] for a in ring.phase.announced] == [SOON, 0]  # its hold ends, once


def test_a_crossing_ranks_communication_holds_until_its_step_ends():
    """Once a step's collective begins, a rank whose last step crossed holds storage back
    until the step ends (announcing the next), whatever the job's stalls inside it; once
    per step; a rank that did not cross holds nothing."""
    from labkit.torch import SOON, WINDOW_NS, Steps

    steps = Steps(out=io.StringIO(), phase_fd=-1)
    steps.phase = _Phase([400, 20, 30, 25])
    for _ in range(4):
        with steps.step():
            time.sleep(0.01)
            for _ in range(2):  # two collectives: one hold
                with steps.comm("all_reduce", 8):
                    pass
    kinds = [("hold" if end - start != WINDOW_NS else "next") for start, end, _ in
             steps.phase.announced]
    # step 0 holds nothing (nothing learned); its end holds the second step whole; then
    # each step's collective holds, and its end announces the next step's window
    assert kinds[0] == "hold" and kinds[1:] == ["hold", "next", "hold", "next", "hold", "next"]
    holds = steps.phase.announced[1::2]
    assert all(phase == SOON and end - start >= 2e7 for start, end, phase in holds)
    alone = Steps(out=io.StringIO(), phase_fd=-1)  # crosses only in set-up
    alone.phase = _Phase([400, None, None])
    for i in range(3):
        with alone.step():
            # its holds: up to 100 ms past the first step (twice it), so the second ends
            # inside the one its collective announced (a hold already over is not ended)
            time.sleep(0.05 if i == 0 else 0)
            with alone.comm("all_reduce", 8):
                pass
    # its set-up crossed: the second step is held, its collective too; then nothing
    assert [a[2] for a in alone.phase.announced] == [SOON, SOON, 0]



def test_the_hooks_first_op_ends_the_set_up_step_and_the_rhythm_the_rest(tmp_path):
    """An unmodified job's ops, as labkit's start-up hook sees them without DDP: its first
    op ends the first step (set-up), so the second step is held whole from its end; from
    then on the job's rhythm (one all_reduce here) ends each step, and each step's end
    announces the next window."""
    from labkit.torch import SOON, WINDOW_NS
    from labkit.traffic.torchhook import Hook

    hook = Hook(io.StringIO())
    hook.steps.phase = _Phase([400, 150, 150, 150])
    t = time.monotonic_ns() - 10**10  # before the stand-in map clears its note: crossed
    for _ in range(4):
        hook.starting(t + 100)
        hook.ended("all_reduce", 8, t + 100, t + 200)
        t += 1000
    assert hook.steps.index == 4  # a step per op, the first one included
    announced = [(a[1] - a[0], a[2]) for a in hook.steps.phase.announced]
    assert announced[0] == (200, SOON)  # the second step held: twice the first, from its end
    assert announced[-1] == (WINDOW_NS, SOON)  # then a learned window for the next
    assert hook.out.getvalue().count('"all_reduce"') == 4


def test_an_mpi_jobs_phase_is_announced_from_the_shims_files(tmp_path):
    """Open MPI's ranks cannot reach their host's phase map: labkit follows the op starts
    and ops the shim appends, whole lines only, in time order, and announces for each
    rank as the hook would: each op's start holds the window of a rank whose steps cross,
    each step's end announces the next."""
    from labkit.model.traffic.lines import op_line
    from labkit.torch import SOON, WINDOW_NS
    from labkit.traffic.opsteps import Follower

    follower = Follower(str(tmp_path), {0: -1})
    steps = follower.ranks[0].steps
    steps.phase = _Phase([400, 150, 150, 150])
    follower.follow(0)  # nothing written yet
    t = time.monotonic_ns() - 10**10  # before the stand-in map clears its note: crossed
    ops = "".join(op_line("all_reduce", t + k * 10**9, t + k * 10**9 + 10**8, 8) + "\n"
                  for k in range(4))
    (tmp_path / "rank0.starts").write_text("".join(f"{t + k * 10**9}\n" for k in range(4)))
    (tmp_path / "rank0.ops").write_text(ops[:-20])  # the last line half written
    follower.follow(0)
    assert steps.index == 3
    with open(tmp_path / "rank0.ops", "a") as f:
        f.write(ops[-20:])
    follower.follow(0)
    assert steps.index == 4
    kinds = ["next" if end - start == WINDOW_NS else "hold"
             for start, end, _ in steps.phase.announced]
    assert kinds == ["hold", "hold", "next", "hold", "next", "hold", "next"], kinds
    assert all(phase == SOON for _, _, phase in steps.phase.announced)
    follower.start()
    follower.stop()  # its thread ends, and so does each rank's window
    assert not follower.is_alive() and steps.phase.announced[-1] == (0, 0, 0)


# --- what is derived -----------------------------------------------------------------------


def burst(host, start_ms, end_ms, nbytes=1_000_000):
    return BurstRow(host, int(start_ms * 1e6), int(end_ms * 1e6), nbytes, nbytes // 9000)


def ring(starts_ms, hosts=("g1", "g2"), op_ms=40.0, steps=2, step_gap_ms=2.0):
    """Bursts of a job whose ops start at ``starts_ms``: each host sends ``steps`` bursts
    per op, ``step_gap_ms`` apart (a ring's steps), ``op_ms`` in all."""
    step = (op_ms - (steps - 1) * step_gap_ms) / steps
    return [burst(h, s + k * (step + step_gap_ms) + j * 0.5, s + k * (step + step_gap_ms)
                  + step + j * 0.5)
            for s in starts_ms for j, h in enumerate(hosts) for k in range(steps)]


def test_bursts_make_ops_across_hosts_and_chatter_is_left_out():
    bursts = ring([0, 200, 400, 600, 800]) + [burst("g1", 100, 100.1, 66)]
    seen = jobtiming.ops_from_traffic(bursts, {"g1": 0, "g2": 1}, iterations=5)
    assert seen.unmeasured is None
    assert [(o.iteration, o.host) for o in seen.ops][:4] == [
        (0, "g1"), (0, "g2"), (1, "g1"), (1, "g2")]
    assert {o.op for o in seen.ops} == {"burst"} and len(seen.ops) == 10
    # the gaps inside an op (2 ms) and between ops (160 ms) are told apart, learned
    assert 2e6 < seen.split_ns < 160e6
    assert seen.ops[0].start_ns == 0 and seen.ops[1].end_ns == pytest.approx(40.5e6)


def test_traffic_whose_op_gaps_are_as_long_as_its_compute_is_not_measurable():
    # under contention a collective's own steps wait as long as the compute between them
    bursts = ring([0, 300, 600, 900, 1200, 1500], op_ms=250, steps=3, step_gap_ms=90)
    seen = jobtiming.ops_from_traffic(bursts, {"g1": 0, "g2": 1}, iterations=6)
    assert seen.ops == [] and "6 iterations" in seen.unmeasured
    unsteady = ring([0, 100, 500, 560, 1400, 1450])
    seen = jobtiming.ops_from_traffic(unsteady, {"g1": 0, "g2": 1})
    assert seen.ops == [] and "no steady rhythm" in seen.unmeasured
    few = jobtiming.ops_from_traffic(ring([0, 200]), {"g1": 0, "g2": 1})
    assert few.ops == [] and "too few" in few.unmeasured


def test_iterations_from_ops_run_end_to_end():
    ops = [OpRow(0, "g1", None, "burst", 10, s, e)
           for s, e in ((100, 300), (400, 600), (700, 900))]
    its = jobtiming.iterations_from_ops(ops)
    assert [(it.start_ns, it.end_ns, it.exposed_ns) for _, _, it in its] == [
        (100, 300, 200), (300, 600, 200), (600, 900, 200)]


def test_ops_without_iterations_are_cut_by_the_jobs_rhythm():
    # a preamble's broadcast, then two all_reduces of different sizes per iteration
    names = [("broadcast", 4)] + [("all_reduce", 8), ("all_reduce", 16)] * 4
    ops = [OpRow(0, "g1", None, n, b, 100 * k, 100 * k + 50) for k, (n, b) in enumerate(names)]
    its = jobtiming.iterations_from_ops(ops)
    assert [(it.start_ns, it.end_ns) for _, _, it in its] == [
        (0, 50), (50, 250), (250, 450), (450, 650), (650, 850)]


def test_a_running_programs_iterations_are_told_as_they_end():
    its = [lines.Iteration(0, 0, 100, 30), lines.Iteration(1, 100, 250, None)]
    assert jobtiming.ended_so_far(its, []) == [(0, 70), (1, 150)]
    ops = [lines.Op(None, "all_reduce", 8, s, s + 20) for s in (100, 300, 500)]
    # the ops make three iterations; the last may still gain an op, so it is not told
    assert jobtiming.ended_so_far([], ops) == [(0, 0), (1, 180)]


def test_progress_follows_what_rank_0_printed_else_what_the_hook_timed(tmp_path):
    job = programs.Programs(SimpleNamespace(), None, None, {}, tmp_path)
    out = tmp_path / "rank0.out"
    job.ranks = [programs.Rank(0, "g1", [], SimpleNamespace(), None, out, tmp_path / "e")]
    hooked = tmp_path / "rank0.ops"
    hooked.write_text("")  # the hook's file exists before anything is timed
    out.write_text("starting\n")
    assert job.progress() == 0
    out.write_text("starting\n" + lines.op_line("all_reduce", 1, 5, 8, 0) + "\n"
                   + lines.iteration_line(0, 1, 9, 4) + "\n")
    hooked.write_text(lines.op_line("all_reduce", 1, 5, 8) + "\n")
    assert job.progress() == 1 and job.heard[0] == [lines.Iteration(0, 1, 9, 4)]
    quiet = programs.Programs(SimpleNamespace(), None, None, {}, tmp_path / "q")
    (tmp_path / "q").mkdir()
    quiet.ranks = [programs.Rank(0, "g1", [], SimpleNamespace(), None, tmp_path / "q" / "o",
                                 tmp_path / "e")]
    (tmp_path / "q" / "rank0.ops").write_text(
        "".join(lines.op_line("all_reduce", s, s + 2, 8) + "\n" for s in (1, 5, 9)))
    assert quiet.progress() == 3 and len(quiet.heard[1]) == 3


def test_several_programs_are_waited_for_at_once():
    looked: list[str] = []

    def waiting(name, looks):
        def gen(duration_s, on_progress):
            for k in range(looks):
                looked.append(f"{name}{k}")
                if on_progress:
                    on_progress(k)
                yield
            looked.append(f"{name}-end")
        return SimpleNamespace(waiting=gen)

    shown, rounds = [], []
    programs.wait_all([(waiting("a", 1), None), (waiting("b", 3), 5.0)], shown.append,
                      lambda: rounds.append(len(looked)))
    assert looked == ["a0", "b0", "a-end", "b1", "b2", "b-end"]
    assert shown == [0] and rounds == [2, 4, 5, 6]


def test_a_rhythm_is_followed_online():
    for seq, cuts in (("AAAAA", ".||||"), ("ABABABAB", "...|.|.|"),
                      ("AABAABAABAAB", ".|..||..|..|")):
        r = Rhythm()
        assert "".join("|" if r.ended(c) else "." for c in seq) == cuts, seq


def test_ops_of_one_iteration_share_it():
    ops = [OpRow(0, "g1", 0, "all_reduce", 10, 100, 200),
           OpRow(0, "g1", 0, "all_reduce", 10, 110, 260),
           OpRow(0, "g1", 1, "all_reduce", 10, 400, 500)]
    its = jobtiming.iterations_from_ops(ops)
    assert [(it.i, it.start_ns, it.end_ns) for _, _, it in its] == [(0, 100, 260), (1, 260, 500)]


def test_op_instances_match_ranks_in_order_within_iterations():
    frame = pl.DataFrame(
        [(0, "g1", 0, "all_reduce", 10, 100, 300), (1, "g2", 0, "all_reduce", 10, 120, 320),
         (0, "g1", 0, "all_reduce", 10, 110, 330), (1, "g2", 0, "all_reduce", 10, 125, 340)],
        schema=["rank", "host", "iteration", "op", "bytes", "start_ns", "end_ns"], orient="row")
    inst = workloads.op_instances(frame)
    assert inst.height == 2 and inst["ranks"].to_list() == [2, 2]
    assert inst.sort("n")["start_ns"].to_list() == [100, 110]


def _program(scale: float):
    """A program's summary: 4 iterations of 500 ns x ``scale`` on 2 ranks, each with an
    All-Reduce of 2 MiB from 300 ns in."""
    coll = pl.DataFrame([{"policy": "p", "op": i, "rank": r, "host": f"g{r + 1}",
                          "start_ns": i * 1000, "end_ns": i * 1000 + int(500 * scale),
                          "wrong": 0, "compute_ns": 300, "exposed_ns": int(500 * scale) - 300,
                          "bubble_ns": 0} for i in range(4) for r in range(2)])
    ops = pl.DataFrame([{"rank": r, "host": f"g{r + 1}", "iteration": i, "op": "all_reduce",
                         "bytes": 2 << 20, "start_ns": i * 1000 + 300,
                         "end_ns": i * 1000 + int(500 * scale)}
                        for i in range(4) for r in range(2)])
    info = ProgramReport(name="job", source="lines", warmup=0, bad_lines=0, bursts_lost=0,
                         ranks=(ProgramRank(rank=0, host="g1", argv=("python3", "train.py"),
                                            exit=0, stopped_by_labkit=False, lingered=False,
                                            cpu_s=1.5, packets=10, bytes=1000),))
    return workloads.program(windows.op_times(coll), coll, ops, info, 2, 4e6)


def test_a_program_summary_and_its_slowdown():
    base = _program(1.0)
    assert base.iterations == 4 and base.p50_ms == pytest.approx(500 / 1e6)
    assert base.exposed_comm_fraction == pytest.approx(0.4)
    assert base.bottleneck_bytes_per_iteration == 1e6
    assert base.ops["all_reduce"].busbw_mbps is not None
    assert base.ranks[0].argv == ("python3", "train.py") and base.cpu_s == 1.5
    slow = workloads.with_slowdowns(_program(2.0), base)
    assert slow.slowdown_p50 == pytest.approx(2.0)
    assert slow.ops["all_reduce"].slowdown_p50 == pytest.approx(3.5)
    assert workloads.with_slowdowns(slow, None).slowdown_p50 is None
    ddp = Summary.from_json(json.loads((REPO / "data/sample/pytorch-ddp/summary.json")
                                       .read_text()))
    p = replace(ddp.policies["fifo"], workload=slow)
    row = frames.summary_frame(replace(ddp, policies={"x": p})).row(0, named=True)
    assert row["ops"] == 4 and row["busbw_mbps"] is None and row["exposed_comm"] > 0


def test_notes_say_where_times_came_from():
    p = replace(_program(1.0), source="traffic", bad_lines=2, ranks=(ProgramRank(
        rank=3, host="g4", argv=("train",), exit=None, stopped_by_labkit=True, lingered=True,
        cpu_s=0.0, packets=0, bytes=0),))
    notes = workloads.program_notes(p)
    assert any("bursts of its traffic" in n for n in notes)
    assert any("2 line(s)" in n for n in notes)
    assert any("rank(s) 3" in n and "had reported every iteration" in n for n in notes)


# --- where the fabric meets the job --------------------------------------------------------


def test_which_paths_cross_the_bottleneck(doc):
    t = topo.Topology(parse(doc).fabric)
    assert t.crosses_bottleneck("g8", "g1") and t.crosses_bottleneck("g4", "g5")
    assert not t.crosses_bottleneck("g1", "g2") and not t.crosses_bottleneck("g5", "g8")
    assert ("spine1", "leaf1") in t.hops("g8", "g1")


def test_ecmp_paths_are_all_counted():
    sc = scenario.load(TOPOLOGIES / "leaf-spine.yaml")
    t = topo.Topology(sc.fabric)
    a, b = sc.ranks[0], sc.ranks[-1]
    spines = {hop[1] for hop in t.hops(a, b) if hop[1].startswith("spine")}
    assert len(spines) == len([r for r in sc.fabric.routers if r.startswith("spine")])


def test_the_cgroup2_mount_is_found_where_the_machine_has_it():
    hybrid = ("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
              "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    pure = "26 21 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert cgroups.cgroup2_root(hybrid) == Path("/sys/fs/cgroup/unified")
    assert cgroups.cgroup2_root(pure) == Path("/sys/fs/cgroup")
    assert cgroups.cgroup2_root("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n") is None


def test_a_rank_that_fails_is_named_with_its_stderr(tmp_path):
    err = tmp_path / "rank1.err"
    err.write_text("\n".join(f"line {i}" for i in range(30)) + "\nValueError: boom\n")
    rank = programs.Rank(1, "g2", [], SimpleNamespace(), None, tmp_path / "o", err)
    tail = rank.tail()
    assert tail.endswith("ValueError: boom") and "line 18" not in tail


def test_the_ddp_example_reports_its_steps_through_the_comm_hook(tmp_path):
    """docs/examples/ddp.py with two ranks over loopback, in Debian's Python with Debian's
    torch (`make torch`): every step is an iteration line with the gradient buckets'
    all_reduce lines before it, and both ranks exit."""
    from tests.conftest import free_port, require

    python = scenario.DEFAULT_PYTHON
    found = subprocess.run([python, "-c", "import torch.distributed"], capture_output=True)
    require(found.returncode == 0, f"needs torch for {python} (make torch)")
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "USE_LIBUV": "0"}  # as labkit starts a job (programs.job_env: Debian 13's torch)
    ranks = [subprocess.Popen([python, str(REPO / "docs/examples/ddp.py"), "--steps", "3",
                               "--compute-ms", "5"], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [r.communicate(timeout=120) for r in ranks]
    assert [r.returncode for r in ranks] == [0, 0], outs[0][1][-2000:]
    iterations, ops, bad = lines.parse(outs[0][0])
    assert [it.i for it in iterations] == [0, 1, 2] and not bad
    assert {o.op for o in ops} == {"all_reduce"} and {o.i for o in ops} == {0, 1, 2}
    assert sum(o.bytes for o in ops if o.i == 2) == 2 * 256 * 1024 * 4  # 2 MiB of gradients
    assert all(0 < it.exposed_ns <= it.end_ns - it.start_ns for it in iterations)


# --- launcher: mpirun ---------------------------------------------------------------------


@pytest.fixture
def mpi_doc():
    return yaml.safe_load((TOPOLOGIES / "mpi-allreduce.yaml").read_text())


def test_the_shipped_mpi_job_is_started_by_mpirun(mpi_doc):
    p = parse(mpi_doc).program
    assert p.launcher == "mpirun" and p.imports == ("mpi4py",) and len(p.ranks) == 8
    assert parse(mpi_doc | {"traffic": [{**mpi_doc["traffic"][0], "launcher": "labkit"}]}
                 ).program.launcher == "labkit"


@pytest.mark.parametrize("change, key, reason", [
    ({"launcher": "srun"}, "traffic[0].launcher", "one of labkit, mpirun"),
    ({"run": "{python} t.py --rank {rank}"}, "traffic[0].run", "{rank} differs from rank"),
    ({"run": "{python} t.py --nic {ifname}"}, "traffic[0].run", "{ifname} differs"),
])
def test_what_mpirun_cannot_start_is_refused(mpi_doc, change, key, reason):
    mpi_doc["traffic"][0].update(change)
    err = _error(mpi_doc)
    assert err.key == key and reason in err.reason, err


def test_mpiruns_command_line_places_a_rank_per_host_and_keeps_their_output(mpi_doc, tmp_path):
    mpi_doc["traffic"][0]["env"] = {"MY_SETTING": 1}
    sc = parse(mpi_doc)
    t = topo.Topology(sc.fabric)
    argv = programs.mpirun_argv(sc.program, t, tmp_path)
    hosts = argv[argv.index("--host") + 1].split(",")
    assert hosts == [f"{t.host_ip(f'g{i}')}:1" for i in range(1, 9)]
    # mpirun under g1's address as its host name, in a UTS namespace of its own
    assert argv[:7] == ["unshare", "--uts", "--", "/bin/sh", "-c", programs.NAMED,
                        t.host_ip("g1")] and argv[7] == programs.MPIRUN
    assert argv[argv.index("-np") + 1] == "8"
    assert "--allow-run-as-root" in argv and programs.MPI_NET in argv
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {"PYTHONPATH", "MY_SETTING", "LABKIT_COMMAND"} <= exported
    shell = argv.index("/bin/sh", 7)
    assert argv[shell + 2] == programs.RANK_WRAPPER and argv[shell + 3] == str(tmp_path)
    assert argv[shell + 4:] == programs.rank_argv(sc.program, t, 5, "")
    env = programs.mpirun_env(tmp_path / "hosts", tmp_path / "g1")
    assert env["OMPI_MCA_plm_rsh_agent"] == env["PRTE_MCA_plm_ssh_agent"] == \
        str(programs.MPI_AGENT)
    nvlink = topo.Topology(parse(yaml.safe_load((TOPOLOGIES / "nvlink.yaml").read_text())
                                 ).fabric)  # the hosts' NICs only, never an NVLink port
    nics = {t.host_ip(h) for h in t.hosts} | {nvlink.host_ip(h) for h in nvlink.hosts}
    assert all(ip_address(ip) in ip_network(programs.MPI_NET) for ip in nics)
    assert not any(ip_address(p.ip) in ip_network(programs.MPI_NET)
                   for ports in nvlink.ports.values() for p in ports
                   if p.ip.startswith("10.2."))
    assert os.access(programs.MPI_AGENT, os.X_OK)


def test_a_rank_writes_its_output_where_labkit_reads_it(tmp_path):
    """The shell around each rank, as mpirun starts it (Open MPI sets the rank's number);
    without that number it refuses to run, rather than mix every rank's output."""
    argv = ["/bin/sh", "-c", programs.RANK_WRAPPER, str(tmp_path), "sh", "-c",
            "echo out; echo err >&2; exit 3"]
    done = subprocess.run(argv, env={"OMPI_COMM_WORLD_RANK": "4"}, capture_output=True)
    assert done.returncode == 3 and not done.stdout
    assert (tmp_path / "rank4.out").read_text() == "out\n"
    assert (tmp_path / "rank4.err").read_text() == "err\n"
    done = subprocess.run(argv, env={}, capture_output=True, text=True)
    assert done.returncode != 0 and "not started by Open MPI" in done.stderr


@pytest.mark.parametrize("said, named", [
    ("Primary job  terminated normally, but 1 process returned\na non-zero exit code.\n"
     "  Process name: [[8123,1],2]\n  Exit code:    7\n", (2, 7)),  # Open MPI 4.1
    ("  Process name: [prterun-vm-4321@1,5]\n  Exit code:    1\n", (5, 1)),  # 5.0
    ("MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 3.\n",
     (1, 3)),
    ("MPI_ABORT was invoked on rank 6 in communicator MPI_COMM_WORLD\n  Proc: [[1,1],6]\n"
     "  Errorcode: 4\n", (6, 4)),
    ("mpirun noticed that process rank 3 with PID 4321 on node 10.0.4.2 exited on signal 9 "
     "(Killed).", (3, None)),
    ("nothing that names a rank", None),
])
def test_the_rank_open_mpi_names_is_the_one_that_failed(said, named):
    assert programs.failed_rank(said) == named


def test_a_missing_mpirun_is_found_before_the_run(mpi_doc, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    sc = parse(mpi_doc)
    with pytest.raises(ScenarioError) as info:
        programs.check(sc.program, topo.Topology(sc.fabric), "s.yaml")
    assert info.value.key == "traffic[0].launcher" and "make mpi" in info.value.reason


def test_a_job_is_stuck_only_when_rank_0_falls_silent_well_past_its_rhythm():
    s = programs.Stall(least_s=5)
    assert not s.stuck(0, 0) and not s.stuck(0, 100 * 10**9)  # set-up: never stuck
    assert not s.stuck(1, 101 * 10**9)  # its first report
    assert not s.stuck(1, 105 * 10**9)  # 4 s of silence: under 5 s
    assert s.stuck(1, 106.5 * 10**9)  # 5.5 s
    slow = programs.Stall(least_s=5)
    slow.stuck(1, 0)
    slow.stuck(2, 3 * 10**9)  # its ops 3 s apart: stuck only past 30 s of silence
    assert not slow.stuck(2, 30 * 10**9) and slow.stuck(2, 34 * 10**9)
    assert slow.silent_s(34 * 10**9) == 31
