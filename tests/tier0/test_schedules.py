"""Every collective schedule, executed in memory: data right, steps consistent, no deadlock."""

import itertools

import pytest

from labkit.model.traffic import jobs, schedules
from labkit.model.traffic.schedules import ALGOS, busbw_factor, expected, schedule
from tests import spans

CASES = [(op, algo, n) for op, algos in ALGOS.items() for algo in algos
         for n in (2, 4, 8, 6) if not (algo == "halving_doubling" and n == 6)]


def simulate(op: str, algo: str, n: int, size: int):
    """Run every rank's schedule by the step rule; returns (values, chunks, bytes sent)."""
    plans = {r: schedules.collective_plan(op, algo, n, r, size) for r in range(n)}
    values, sent = run_plans(plans)
    return values, plans[0].chunks, sent


def run_plans(plans: dict[int, schedules.Plan]):
    """Execute every rank's plan in memory by the step rule (compute takes no time here);
    returns (chunk values per rank, bytes sent per rank)."""
    n = len(plans)
    values = {r: dict(p.initial) for r, p in plans.items()}
    wire = {(a, b): [] for a, b in itertools.permutations(range(n), 2)}  # in-order channels
    started = dict.fromkeys(range(n), 0)  # steps whose sends went out
    pending = {r: [list(st.recv) for st in plans[r].steps] for r in range(n)}
    sent_bytes = dict.fromkeys(range(n), 0)
    for _ in range(100000):
        progressed = False
        for r in range(n):
            steps = plans[r].steps
            while started[r] < len(steps) and all(not pending[r][k] for k in range(started[r])):
                for m in steps[started[r]].send:
                    wire[(r, m.peer)].append((m.chunk, values[r].get(m.chunk, 0)))
                    sent_bytes[r] += m.nbytes
                started[r] += 1
                progressed = True
            for (a, b), channel in wire.items():
                if b != r or not channel:
                    continue
                chunk, value = channel[0]
                step = next((k for k, recvs in enumerate(pending[r])
                             if any(m.peer == a and m.chunk == chunk for m in recvs)), None)
                assert step is not None, f"rank {r} got an unexpected chunk {chunk} from {a}"
                msg = next(m for m in pending[r][step] if m.peer == a and m.chunk == chunk)
                pending[r][step].remove(msg)
                values[r][chunk] = values[r].get(chunk, 0) + value if msg.reduce else value
                channel.pop(0)
                progressed = True
        if not progressed:
            break
    assert all(started[r] == len(plans[r].steps) for r in range(n)), "deadlock"
    assert all(not any(p) for p in pending.values()), "messages never arrived"
    assert not any(wire.values()), "messages nobody expected"
    return values, sent_bytes


@pytest.mark.parametrize("op, algo, n", CASES, ids=lambda x: str(x))
def test_schedule_delivers_the_right_data(op, algo, n):
    size = 3 * 1024 * 1024
    values, chunks, sent = simulate(op, algo, n, size)
    for r in range(n):
        want = expected(op, r, n, chunks)
        assert {c: values[r].get(c) for c in want} == want, f"rank {r}"


@pytest.mark.parametrize("op, algo, n", CASES, ids=lambda x: str(x))
def test_the_engines_own_op_counts_no_wrong_chunk(op, algo, n):
    """The collective engine's op (:class:`labkit.traffic.collective.Op`, what ``#wrong``
    is counted by) runs every rank's plan to its end in virtual time (``tests/spans.py``)
    and finds every chunk that matters right."""
    plans = [schedules.collective_plan(op, algo, n, r, 1 << 20) for r in range(n)]
    _, rows = spans.run_op(plans, transfer_ns=1000)
    assert [row.wrong for row in rows] == [0] * n


@pytest.mark.parametrize("op, n", [("all_reduce", 8), ("all_gather", 8), ("reduce_scatter", 8)])
def test_ring_moves_what_busbw_assumes(op, n):
    """busbw = algbw x factor holds because each rank sends factor x size over its link."""
    size = 8 * 1024 * 1024
    _, _, sent = simulate(op, "ring", n, size)
    assert all(b == pytest.approx(busbw_factor(op, n) * size, rel=1e-3) for b in sent.values())


@pytest.mark.parametrize("op, algo", [(op, algo) for op in ("reduce", "gather", "scatter",
                                                            "sendrecv") for algo in ALGOS[op]])
@pytest.mark.parametrize("n", [2, 5, 8])
def test_rooted_and_point_to_point_ops_end_as_nccl_tests_checks(op, algo, n):
    """What nccl-tests checks after each op, said here apart from :func:`expected`:
    Reduce leaves the sum at the root, Gather every rank's block at the root, Scatter each
    rank's block of the root's buffer at that rank, SendRecv each rank with its
    predecessor's buffer."""
    c, root = schedules.contribution, schedules.ROOT
    values, chunks, _ = simulate(op, algo, n, 1 << 20)
    if op == "reduce":
        assert chunks == (1 << 20) // schedules.PIPELINE_CHUNK_BYTES
        assert all(values[root][k] == sum(c(r, k) for r in range(n)) for k in range(chunks))
    elif op == "gather":
        assert [values[root][r] for r in range(n)] == [c(r, r) for r in range(n)]
    elif op == "scatter":
        assert [values[r].get(r) for r in range(n)] == [c(root, r) for r in range(n)]
    else:
        assert [values[r].get((r - 1) % n) for r in range(n)] == [c((r - 1) % n, (r - 1) % n)
                                                                  for r in range(n)]
    # and :func:`expected`, which the agents count #wrong by, asks for the same
    assert all(expected(op, r, n, chunks) for r in range(n) if op in ("scatter", "sendrecv")
               or r == root)


@pytest.mark.parametrize("op, algo", [("reduce", "ring"), ("gather", "direct"),
                                      ("scatter", "direct"), ("sendrecv", "ring")])
def test_rooted_and_point_to_point_ops_move_what_busbw_assumes(op, algo):
    """busbw = algbw x factor holds because the busiest rank's link carries factor x size
    one way: into the root for Reduce (each rank of the chain sends the whole buffer once)
    and Gather, out of it for Scatter, out of every rank for SendRecv."""
    n, size = 8, 8 * 1024 * 1024
    plans = {r: schedules.collective_plan(op, algo, n, r, size) for r in range(n)}
    out = [sum(m.nbytes for st in p.steps for m in st.send) for p in plans.values()]
    into = [sum(m.nbytes for st in p.steps for m in st.recv) for p in plans.values()]
    assert max(out + into) == pytest.approx(busbw_factor(op, n) * size, rel=1e-3)
    assert sum(out) == sum(into)


def test_unknown_algorithm_and_odd_halving_doubling():
    with pytest.raises(ValueError, match="no algorithm 'tree' for all_gather"):
        schedule("all_gather", "tree", 4, 0, 1024)
    with pytest.raises(ValueError, match="power-of-two"):
        schedule("all_reduce", "halving_doubling", 6, 0, 1024)
    with pytest.raises(ValueError, match=r"no algorithm 'ring' for gather \(known: direct\)"):
        schedule("gather", "ring", 4, 0, 1024)


def test_pipelined_chunks_are_bounded():
    steps, chunks = schedule("broadcast", "ring", 4, 2, 8 * 1024 * 1024)
    assert chunks == 8 * 1024 * 1024 // schedules.PIPELINE_CHUNK_BYTES
    assert max(m.nbytes for s in steps for m in s.send) == schedules.PIPELINE_CHUNK_BYTES


JOBS = {
    "data": {"parallelism": "data", "gradient_bytes": 1 << 20, "buckets": 3, "compute_ms": 1},
    "tensor": {"parallelism": "tensor", "layers": 3, "activation_bytes": 64 << 10,
               "layer_compute_ms": 1},
    "pipeline-1f1b": {"parallelism": "pipeline", "microbatches": 6, "activation_bytes": 1 << 16,
                      "stage_compute_ms": 1, "schedule": "1f1b"},
    "pipeline-gpipe": {"parallelism": "pipeline", "microbatches": 3,
                       "activation_bytes": 1 << 16, "stage_compute_ms": 1, "schedule": "gpipe"},
    "expert": {"parallelism": "expert", "layers": 2, "tokens_bytes": 1 << 18,
               "layer_compute_ms": 1},
}


@pytest.mark.parametrize("name", JOBS)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_job_plans_run_and_their_collectives_add_up(name, n):
    plans = {r: jobs.plan(JOBS[name], n, r) for r in range(n)}
    values, _ = run_plans(plans)
    for r, plan in plans.items():
        assert {c: values[r].get(c) for c in plan.expected} == plan.expected


def test_tensor_parallel_moves_more_than_pipeline_per_iteration():
    """The same batch (256 KiB of activations per layer boundary) split two ways: tensor
    parallelism all-reduces them after every layer, forward and backward; pipeline
    parallelism passes 1/8 of them per micro-batch across each stage boundary once."""
    n, batch = 8, 256 << 10
    tp = {"parallelism": "tensor", "layers": 4, "activation_bytes": batch,
          "layer_compute_ms": 5}
    pp = {"parallelism": "pipeline", "microbatches": 8, "activation_bytes": batch // 8,
          "stage_compute_ms": 5}

    def crossing(job):  # bytes between the two halves of the ranks, per iteration
        return sum(b for r in range(n) for peer, b in jobs.sent_bytes(jobs.plan(job, n, r))
                   if (r < n // 2) != (peer < n // 2))

    assert crossing(pp) == 2 * batch  # the batch forward and back over one stage boundary
    assert crossing(tp) > 4 * crossing(pp)


def test_one_f_one_b_order():
    order = jobs.stage_order("1f1b", 4, 1, 4)
    assert order == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("B", 2),
                     ("B", 3)]
    assert jobs.stage_order("gpipe", 4, 1, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


@pytest.mark.parametrize("n, group", [(4, 2), (8, 2), (8, 4), (16, 4), (6, 3), (4, 1), (4, 4)])
def test_hierarchical_all_reduce_is_right_and_crosses_servers_with_a_shard(n, group):
    size = 1 << 20
    plans = {r: schedules.collective_plan("all_reduce", "hierarchical", n, r, size, group)
             for r in range(n)}
    values, sent = run_plans(plans)
    for r, plan in plans.items():
        assert all(values[r][c] == v for c, v in plan.expected.items())
    servers, chunk = n // group, -(-size // n)
    for r, plan in plans.items():
        # between servers, each rank all-reduces one shard (1/group of the buffer) around
        # its rail: 2 (servers - 1) chunks, where a flat ring's rank sends 2 (n - 1)
        across = sum(m.nbytes for st in plan.steps for m in st.send
                     if m.peer // group != r // group)
        assert across == 2 * (servers - 1) * chunk
        assert sent[r] == 2 * (n - 1) * chunk  # in all, as many bytes as a flat ring


def test_hierarchical_refuses_servers_of_unequal_size():
    with pytest.raises(ValueError, match="do not divide"):
        schedules.schedule("all_reduce", "hierarchical", 8, 0, 1 << 20, 3)
