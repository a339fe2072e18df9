"""The collective agent's ops record their phases as spans: driven in virtual time on
in-memory plans (tests/spans.py), with no network."""

import pytest

from labkit.model.traffic import jobs, schedules, timeline
from labkit.model.traffic.results import OpResult
from labkit.model.traffic.schedules import Msg, Plan, Step
from labkit.traffic.collective import BUBBLE, COMPUTE, WIRE_WAIT, Op
from tests.spans import run_op
from tests.tier0.test_schedules import JOBS

MS = 1_000_000


def test_a_wait_is_a_bubble_until_the_message_left_then_a_wire_wait():
    plan = Plan([Step(recv=[Msg(1, 0, 100)]), Step(compute_ns=5)], 1, {}, {})
    op = Op(plan, 100)
    # step 0 starts and step 1 awaits its message: the wait begins at this look, as the
    # agent's loop may sleep until the message arrives
    assert op.step(100) == []
    op.step(110)
    assert op.arrived(1, 0, 7, sent_ns=130)
    op.step(150)  # the wait ends; the compute starts
    assert op.spans == [(BUBBLE, 100, 130), (WIRE_WAIT, 130, 150), (COMPUTE, 150, 155)]
    op.step(157)  # the compute ended at 155: 2 ns of other work
    assert op.received_all()
    row = op.finish(3, 2, 160, 0)  # from 157 the op awaited its sends' ACKs: on the wire
    assert op.spans[-1] == (WIRE_WAIT, 157, 160)
    assert row == OpResult(op=3, rank=2, start_ns=100, end_ns=160, wrong=0, compute_ns=5,
                           exposed_ns=23, bubble_ns=30)
    for sent_ns in (20, 0):  # left before the wait began, or unknown: the wire's
        early = Op(plan, 50)
        early.step(50)
        early.arrived(1, 0, 7, sent_ns=sent_ns)
        early.step(90)
        assert early.spans[0] == (WIRE_WAIT, 50, 90)


def test_a_straggler_makes_every_rank_wait_for_it():
    """A data-parallel step on 4 ranks, rank 2 computing twice as long (SLOW 2): every
    rank's step ends about a whole compute later, and the others spend it in a bubble, waiting
    for rank 2's first message."""
    job = {"parallelism": "data", "gradient_bytes": 1 << 16, "buckets": 1, "compute_ms": 1}
    plans = [jobs.plan(job, 4, r) for r in range(4)]
    _, even = run_op(plans, MS // 10)
    ops, rows = run_op(plans, MS // 10, slow={2: 2.0})
    compute = 3 * MS  # the data-parallel step's forward and backward
    assert rows[2].compute_ns == 2 * compute and rows[0].compute_ns == compute
    for r in range(4):
        assert compute * 0.9 <= rows[r].end_ns - even[r].end_ns <= compute, r
        if r != 2:
            assert rows[r].bubble_ns - even[r].bubble_ns >= compute * 0.9, r


def test_an_open_wait_ends_with_the_op():
    op = Op(Plan([Step(send=[Msg(1, 0, 100)], recv=[Msg(1, 0, 100)])], 1, {}, {}), 0)
    assert [m.peer for m, _ in op.step(0)] == [1]  # every step started: waiting
    op.arrived(1, 0, 1, sent_ns=8)
    op.finish(0, 0, 12, 0)
    assert op.spans == [(BUBBLE, 0, 8), (WIRE_WAIT, 8, 12)]


def test_pipeline_stages_record_their_staircase():
    """Stage r first computes once the micro-batch has passed the r stages before it, each
    one compute and one transfer; until its input left stage r-1 it idled in a bubble,
    then waited for it on the wire."""
    stages, f, d = 4, 1 * MS, MS // 4
    job = {"parallelism": "pipeline", "microbatches": 4, "activation_bytes": 1 << 16,
           "stage_compute_ms": 1, "schedule": "1f1b"}
    ops, rows = run_op([jobs.plan(job, stages, r) for r in range(stages)], d)
    for r, op in enumerate(ops):
        first = next(s for s in op.spans if s[0] == COMPUTE)
        assert first[1] == r * (f + d)
        if r:
            assert op.spans[:2] == [(BUBBLE, 0, r * f + (r - 1) * d),
                                    (WIRE_WAIT, r * f + (r - 1) * d, r * (f + d))]
    assert ops[0].spans[0] == (COMPUTE, 0, f)
    ends = [row.end_ns for row in rows]
    assert ends == sorted(ends, reverse=True)  # the first stage waits for the last gradient


PLANS = {**{name: lambda n, r, job=job: jobs.plan(job, n, r) for name, job in JOBS.items()},
         "ring": lambda n, r: schedules.collective_plan("all_reduce", "ring", n, r, 1 << 20)}


@pytest.mark.parametrize("name", PLANS)
def test_spans_follow_each_other_and_add_up_to_the_ops_sums(name):
    n, start, transfer = 4, 5 * MS, 300_000
    plans = [PLANS[name](n, r) for r in range(n)]
    ops, rows = run_op(plans, transfer, start)
    model = timeline.simulate(plans, lambda src, dst, nbytes: transfer)
    for op, row, plan, end, busy in zip(ops, rows, plans, model.end_ns, model.busy_ns,
                                        strict=True):
        # the agent's own logic keeps the plans' model time (labkit.model.traffic.timeline)
        assert row.end_ns - start == end
        assert [(s - start, e - start) for p, s, e in op.spans if p == COMPUTE] == list(busy)
        spans = op.spans
        assert spans and len(spans) <= 3 * len(plan.steps)  # bounded by the plan
        assert all(s < e for _, s, e in spans)
        ends = [row.start_ns, *(t for _, s, e in spans for t in (s, e)), row.end_ns]
        assert ends == sorted(ends), "spans overlap or leave the op"
        for phase, column in ((COMPUTE, "compute_ns"), (WIRE_WAIT, "exposed_ns"),
                              (BUBBLE, "bubble_ns")):
            assert sum(e - s for p, s, e in spans if p == phase) == getattr(row, column)
        assert row.compute_ns == sum(s.compute_ns for s in plan.steps)
        # virtual time has no loop to run: no sending or other work, the spans tile the op
        assert sum(e - s for _, s, e in spans) == row.end_ns - row.start_ns
        assert row.wrong == 0
