"""Every collective schedule, executed in memory: data right, steps consistent, no deadlock."""

import itertools

import pytest

from labkit.traffic import schedules
from labkit.traffic.schedules import ALGOS, busbw_factor, expected, initial, schedule

CASES = [(op, algo, n) for op, algos in ALGOS.items() for algo in algos
         for n in (2, 4, 8, 6) if not (algo == "halving_doubling" and n == 6)]


def simulate(op: str, algo: str, n: int, size: int):
    """Run every rank's schedule by the step rule; returns (values, bytes sent per rank)."""
    plans = {r: schedule(op, algo, n, r, size) for r in range(n)}
    chunks = plans[0][1]
    values = {r: initial(op, r, n, chunks) for r in range(n)}
    wire = {(a, b): [] for a, b in itertools.permutations(range(n), 2)}  # in-order channels
    started = dict.fromkeys(range(n), 0)  # steps whose sends went out
    pending = {r: [list(st.recv) for st in plans[r][0]] for r in range(n)}
    sent_bytes = dict.fromkeys(range(n), 0)
    for _ in range(100000):
        progressed = False
        for r in range(n):
            steps = plans[r][0]
            while started[r] < len(steps) and all(not pending[r][k] for k in range(started[r])):
                for m in steps[started[r]].send:
                    wire[(r, m.peer)].append((m.chunk, values[r][m.chunk]))
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
    assert all(started[r] == len(plans[r][0]) for r in range(n)), "deadlock"
    assert all(not any(p) for p in pending.values()), "messages never arrived"
    assert not any(wire.values()), "messages nobody expected"
    return values, chunks, sent_bytes


@pytest.mark.parametrize("op, algo, n", CASES, ids=lambda x: str(x))
def test_schedule_delivers_the_right_data(op, algo, n):
    size = 3 * 1024 * 1024
    values, chunks, sent = simulate(op, algo, n, size)
    for r in range(n):
        want = expected(op, r, n, chunks)
        assert {c: values[r].get(c) for c in want} == want, f"rank {r}"


@pytest.mark.parametrize("op, n", [("all_reduce", 8), ("all_gather", 8), ("reduce_scatter", 8)])
def test_ring_moves_what_busbw_assumes(op, n):
    """busbw = algbw x factor holds because each rank sends factor x size over its link."""
    size = 8 * 1024 * 1024
    _, _, sent = simulate(op, "ring", n, size)
    assert all(b == pytest.approx(busbw_factor(op, n) * size, rel=1e-3) for b in sent.values())


def test_unknown_algorithm_and_odd_halving_doubling():
    with pytest.raises(ValueError, match="no algorithm 'tree' for all_gather"):
        schedule("all_gather", "tree", 4, 0, 1024)
    with pytest.raises(ValueError, match="power-of-two"):
        schedule("all_reduce", "halving_doubling", 6, 0, 1024)


def test_pipelined_chunks_are_bounded():
    steps, chunks = schedule("broadcast", "ring", 4, 2, 8 * 1024 * 1024)
    assert chunks == 8 * 1024 * 1024 // schedules.PIPELINE_CHUNK_BYTES
    assert max(m.nbytes for s in steps for m in s.send) == schedules.PIPELINE_CHUNK_BYTES
