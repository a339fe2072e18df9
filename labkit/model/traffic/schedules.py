"""Collective algorithms as per-rank schedules of point-to-point messages.

A schedule is a list of steps per rank. A step holds the messages the rank sends
and the messages it receives; the sends of step k may start once every receive
of steps up to k-1 has arrived (step 0's at the start of the op), and the op is
done when every receive has arrived and every send is acknowledged. That one
rule gives each algorithm its data dependencies, pipelining included. Every
message is sent no later (in step index) than it is received, so no schedule
can deadlock. A message names its chunk, so a receiver never depends on the
order in which different peers' messages arrive.

Messages move *chunks* of the op's buffer. Each chunk carries a value, so the
agents can check the data flow the way nccl-tests checks results (``#wrong``):
rank r contributes :func:`contribution` ``(r, chunk)``; a receive either reduces
(adds) the incoming value into the rank's own or copies it. At the end every
rank's values are compared with :func:`expected`.

Hierarchical All-Reduce (``hierarchical``, with ``group`` ranks per server, consecutive):
the buffer is cut into one shard per local rank; a ring inside each server reduce-scatters
the shards, a ring across the servers all-reduces each shard among the ranks that hold it
(one rail per local rank), and a ring inside each server all-gathers them. Only
``size / group`` of the buffer crosses between servers per rank, twice.

Rooted ops (Broadcast, Reduce, Gather, Scatter) have their root at rank :data:`ROOT`,
nccl-tests' default. Reduce: ``ring`` reduces pipelined chunks along the chain n-1 -> ... ->
1 -> 0 (Broadcast's ring run backwards; NCCL's ring Reduce also ends at the root), ``tree``
up a binary tree. Gather and Scatter are ``direct``, as nccl-tests runs them (grouped sends
and receives): every rank sends its block straight to the root, or the root sends each
rank its block. SendRecv (``ring``) is nccl-tests' too: every rank sends its buffer to
rank + 1 and receives rank - 1's.

Sizes follow nccl-tests: ``size`` is what nccl-tests prints, the larger of a rank's send and
receive buffers (the whole buffer for All-Reduce, Reduce-Scatter, All-to-All, Broadcast and
Reduce; the gathered output for All-Gather and Gather; the root's whole send buffer for
Scatter; the buffer each rank sends for SendRecv), and bus bandwidth factors are
nccl-tests' (its doc/PERFORMANCE.md and each test's ``GetBw``).

Standard library only: agents import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "gather", "scatter", "sendrecv")
ALGOS = {"all_reduce": ("ring", "tree", "halving_doubling", "hierarchical"),
         "all_gather": ("ring",), "reduce_scatter": ("ring",), "all_to_all": ("pairwise",),
         "broadcast": ("ring", "tree"), "reduce": ("ring", "tree"), "gather": ("direct",),
         "scatter": ("direct",), "sendrecv": ("ring",)}  # an op's first: its default
ROOT = 0  # the root of the rooted ops (nccl-tests' default -r 0)
ROOTED = ("broadcast", "reduce", "gather", "scatter")
PIPELINE_CHUNK_BYTES = 256 * 1024  # pipelined ones (tree, broadcast, reduce): chunks this big


@dataclass(frozen=True)
class Msg:
    peer: int
    chunk: int
    nbytes: int
    reduce: bool = False  # receive: add into the local value (else copy)


@dataclass
class Step:
    send: list[Msg] = field(default_factory=list)
    recv: list[Msg] = field(default_factory=list)
    compute_ns: int = 0  # a timed wait (compute) before this step's sends


@dataclass
class Plan:
    """What one rank does in one op (or one training iteration)."""

    steps: list[Step]
    chunks: int
    initial: dict[int, int]  # chunk values before
    expected: dict[int, int]  # chunk values that must hold after (those that matter)


def collective_plan(op: str, algo: str, n: int, rank: int, size: int, group: int = 1) -> Plan:
    steps, chunks = schedule(op, algo, n, rank, size, group)
    return Plan(steps, chunks, initial(op, rank, n, chunks), expected(op, rank, n, chunks))


def shifted(plan: Plan, offset: int) -> Plan:
    """The same plan with every chunk id moved by ``offset`` (to compose plans)."""
    def move(m: Msg) -> Msg:
        return Msg(m.peer, m.chunk + offset, m.nbytes, m.reduce)

    return Plan([Step([move(m) for m in s.send], [move(m) for m in s.recv], s.compute_ns)
                 for s in plan.steps], plan.chunks,
                {c + offset: v for c, v in plan.initial.items()},
                {c + offset: v for c, v in plan.expected.items()})


def concat(plans: list[Plan]) -> Plan:
    """Plans one after the other, chunk ids kept apart."""
    out = Plan([], 0, {}, {})
    for p in plans:
        p = shifted(p, out.chunks)
        out.steps += p.steps
        out.chunks += p.chunks
        out.initial.update(p.initial)
        out.expected.update(p.expected)
    return out


def compute(ns: int) -> Plan:
    """A compute phase: a step with no messages and a timed wait."""
    return Plan([Step(compute_ns=ns)], 0, {}, {})


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor: busbw = algbw x this."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    return 1.0  # broadcast, reduce, sendrecv


def contribution(rank: int, chunk: int) -> int:
    return (rank + 1) * 1_000_003 + chunk * 7 + 1


def _split(size: int, parts: int) -> int:
    return max(1, -(-size // parts))


def problem(op: str, algo: str, n: int, group: int = 1) -> str | None:
    """Why ``n`` ranks (``group`` to a server) cannot run ``op`` by ``algo``, or None: the
    one check a schedule, a scenario's validation and a sweep's all make."""
    if algo not in ALGOS.get(op, ()):
        return f"no algorithm {algo!r} for {op} (known: {', '.join(ALGOS.get(op, ()))})"
    if algo == "hierarchical" and (group < 1 or n % group):
        return (f"hierarchical needs servers of equal size: {group} ranks per server do not "
                f"divide {n} ranks")
    if algo == "halving_doubling" and n & (n - 1):
        below = 1 << (n.bit_length() - 1)
        return (f"halving_doubling needs a power-of-two number of ranks, got {n}: use "
                f"{below} or {2 * below} ranks, or another algorithm (ring, tree)")
    return None


def schedule(op: str, algo: str, n: int, rank: int, size: int,
             group: int = 1) -> tuple[list[Step], int]:
    """(steps of ``rank``, number of chunks of the buffer); ``group``: ranks per server, for
    the hierarchical algorithm. ValueError says why (:func:`problem`) it cannot be."""
    if reason := problem(op, algo, n, group):
        raise ValueError(reason)
    if algo == "hierarchical":
        return _hierarchical(n, rank, _split(size, n), group), n
    if op == "all_reduce" and algo == "ring":
        return _ring(n, rank, _split(size, n), reduce_steps=n - 1, gather_steps=n - 1), n
    if op == "all_gather":
        return _ring(n, rank, _split(size, n), reduce_steps=0, gather_steps=n - 1), n
    if op == "reduce_scatter":
        return _ring(n, rank, _split(size, n), reduce_steps=n - 1, gather_steps=0), n
    if op == "all_reduce" and algo == "halving_doubling":
        return _halving_doubling(n, rank, size), n
    if op == "all_to_all":
        block = _split(size, n)
        step = Step(send=[Msg((rank + k) % n, rank * n + (rank + k) % n, block)
                          for k in range(1, n)],
                    recv=[Msg((rank - k) % n, ((rank - k) % n) * n + rank, block)
                          for k in range(1, n)])
        return [step], n * n
    if op in ("gather", "scatter"):
        return [_direct(op, n, rank, _split(size, n))], n
    if op == "sendrecv":  # chunk r is rank r's buffer
        left = (rank - 1) % n
        return [Step([Msg((rank + 1) % n, rank, size)], [Msg(left, left, size)])], n
    if op in ("broadcast", "reduce"):  # pipelined down from the root, or up to it
        chunks = max(1, -(-size // PIPELINE_CHUNK_BYTES))
        tree = _chain(n) if algo == "ring" else _binary_tree(n, ROOT)
        flow = _pipeline_down if op == "broadcast" else _pipeline_up
        return flow(tree, rank, chunks, _split(size, chunks)), chunks
    per_tree = max(1, -(-size // 2 // PIPELINE_CHUNK_BYTES))
    return _double_binary_tree(n, rank, size, per_tree), 2 * per_tree


def _ring(n: int, rank: int, chunk: int, reduce_steps: int, gather_steps: int) -> list[Step]:
    """Reduce-scatter, then all-gather, around the ring (right = rank + 1).

    Reduce-scatter step s: send chunk r-s, reduce chunk r-s-1 from the left; after
    n-1 steps rank r holds chunk r+1 fully reduced. All-gather step s: send chunk
    r+1-s (r-s when there was no reduce-scatter), copy chunk r-s (r-s-1) from the left.
    """
    right, left = (rank + 1) % n, (rank - 1) % n
    steps = []
    for s in range(reduce_steps):
        send = (rank - s) % n
        steps.append(Step([Msg(right, send, chunk)], [Msg(left, (send - 1) % n, chunk, True)]))
    start = 1 if reduce_steps else 0
    for s in range(gather_steps):
        send = (rank + start - s) % n
        steps.append(Step([Msg(right, send, chunk)], [Msg(left, (send - 1) % n, chunk)]))
    return steps


def _direct(op: str, n: int, rank: int, block: int) -> Step:
    """Gather: every rank sends its block (chunk ``rank``) to the root; Scatter: the root
    sends each rank its block. One step: the root's messages all leave (or are awaited)
    at once, as nccl-tests' grouped sends and receives."""
    if rank != ROOT:
        msg = Msg(ROOT, rank, block)
        return Step(send=[msg]) if op == "gather" else Step(recv=[msg])
    others = [Msg(p, p, block) for p in range(n) if p != ROOT]
    return Step(recv=others) if op == "gather" else Step(send=others)


def _shard_ring(members: list[int], me: int, shards: list[list[int]], nbytes: int,
                reduce_steps: int, gather_steps: int) -> list[Step]:
    """:func:`_ring` among ``members`` (``me`` its position), where ring chunk ``k`` is
    the buffer chunks ``shards[k]``, each ``nbytes``: one message per chunk."""
    steps = []
    for step in _ring(len(members), me, nbytes, reduce_steps, gather_steps):
        steps.append(Step([Msg(members[m.peer], c, nbytes, m.reduce) for m in step.send
                           for c in shards[m.chunk]],
                          [Msg(members[m.peer], c, nbytes, m.reduce) for m in step.recv
                           for c in shards[m.chunk]]))
    return steps


def _hierarchical(n: int, rank: int, chunk: int, group: int) -> list[Step]:
    """Reduce-scatter inside the server, All-Reduce of this rank's shard across servers,
    all-gather inside the server (the module's docstring). Chunk ``l * servers + k`` is
    item ``k`` of shard ``l``; after the first ring, local rank ``l`` holds shard
    ``l + 1`` (mod ``group``), as :func:`_ring` leaves its chunks."""
    servers, server, local = n // group, rank // group, rank % group
    shards = [list(range(i * servers, (i + 1) * servers)) for i in range(group)]
    inside = [server * group + i for i in range(group)]
    rail = [s * group + local for s in range(servers)]
    held = shards[(local + 1) % group]
    return (_shard_ring(inside, local, shards, chunk, group - 1, 0)
            + _shard_ring(rail, server, [[c] for c in held], chunk, servers - 1, servers - 1)
            # an all-gather alone starts from ring chunk r: shard r + 1 here
            + _shard_ring(inside, local, shards[1:] + shards[:1], chunk, 0, group - 1))


def _halving_doubling(n: int, rank: int, size: int) -> list[Step]:
    """Recursive halving (reduce-scatter), then recursive doubling (all-gather); n = 2^k."""
    chunk = _split(size, n)
    steps, lo, hi = [], 0, n  # the chunks this rank still reduces: [lo, hi)
    distance = n // 2
    while distance:
        partner = rank ^ distance
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if rank < partner else ((mid, hi), (lo, mid))
        steps.append(Step(send=[Msg(partner, c, chunk) for c in range(*give)],
                          recv=[Msg(partner, c, chunk, reduce=True) for c in range(*keep)]))
        lo, hi = keep
        distance //= 2
    distance = 1
    while distance < n:
        partner = rank ^ distance
        width = hi - lo
        plo = lo + width if rank < partner else lo - width
        steps.append(Step(send=[Msg(partner, c, chunk) for c in range(lo, hi)],
                          recv=[Msg(partner, c, chunk) for c in range(plo, plo + width)]))
        lo, hi = min(lo, plo), max(hi, plo + width)
        distance *= 2
    return steps


def _chain(n: int) -> dict[int, int | None]:
    """parent of each rank in the chain 0 -> 1 -> ... -> n-1 (the root, 0, first)."""
    return {r: (r - 1 if r else None) for r in range(n)}


def _binary_tree(n: int, shift: int) -> dict[int, int | None]:
    """parent of each rank in a binary tree over ranks relabelled by ``shift``."""
    parent = {}
    for pos in range(n):
        rank = (pos + shift) % n
        parent[rank] = None if pos == 0 else ((pos - 1) // 2 + shift) % n
    return parent


def _depths(parent: dict[int, int | None]) -> dict[int, int]:
    depth = {}
    for r in parent:
        d, p = 0, parent[r]
        while p is not None:
            d, p = d + 1, parent[p]
        depth[r] = d
    return depth


def _pipeline_down(parent: dict[int, int | None], rank: int, chunks: int, nbytes: int,
                   first_chunk: int = 0) -> list[Step]:
    """Chunks flow from the root down: a rank at depth d receives chunk c at slot
    c + d - 1 and forwards it to its children at slot c + d."""
    depth = _depths(parent)
    children = [r for r, p in parent.items() if p == rank]
    steps = [Step() for _ in range(chunks + max(depth.values()))]
    up = parent[rank]
    for c in range(chunks):
        if up is not None:
            steps[c + depth[rank] - 1].recv.append(Msg(up, first_chunk + c, nbytes))
        for child in children:
            steps[c + depth[rank]].send.append(Msg(child, first_chunk + c, nbytes))
    return steps


def _pipeline_up(parent: dict[int, int | None], rank: int, chunks: int, nbytes: int,
                 first_chunk: int = 0) -> list[Step]:
    """Chunks are reduced towards the root: a rank of height h (leaves 0) receives
    chunk c from its children at slot c + h - 1 and sends the sum up at slot c + h."""
    children = {r: [c for c, p in parent.items() if p == r] for r in parent}
    height: dict[int, int] = {}

    def h(r: int) -> int:
        if r not in height:
            height[r] = 1 + max((h(c) for c in children[r]), default=-1)
        return height[r]

    top = max(h(r) for r in parent)
    steps = [Step() for _ in range(chunks + top)]
    up = parent[rank]
    for c in range(chunks):
        for child in children[rank]:
            steps[c + h(rank) - 1].recv.append(Msg(child, first_chunk + c, nbytes, reduce=True))
        if up is not None:
            steps[c + h(rank)].send.append(Msg(up, first_chunk + c, nbytes))
    return steps


def _double_binary_tree(n: int, rank: int, size: int, chunks: int) -> list[Step]:
    """Two binary trees, each reducing then broadcasting half the buffer in ``chunks``
    pipelined chunks (tree t owns chunks t*chunks .. t*chunks + chunks - 1)."""
    nbytes = _split(-(-size // 2), chunks)
    merged: list[Step] = []
    for tree, shift in enumerate((0, n // 2 if n > 2 else 1)):
        parent = _binary_tree(n, shift)
        up = _pipeline_up(parent, rank, chunks, nbytes, first_chunk=tree * chunks)
        down = _pipeline_down(parent, rank, chunks, nbytes, first_chunk=tree * chunks)
        for i, step in enumerate(up + down):
            while len(merged) <= i:
                merged.append(Step())
            merged[i].send += step.send
            merged[i].recv += step.recv
    return merged


def initial(op: str, rank: int, n: int, chunks: int, root: int = ROOT) -> dict[int, int]:
    """Each rank's chunk values before the op."""
    if op in ("broadcast", "scatter"):
        return {c: contribution(root, c) for c in range(chunks)} if rank == root else {}
    if op == "all_to_all":
        return {rank * n + p: contribution(rank, rank * n + p) for p in range(n)}
    if op in ("all_gather", "gather", "sendrecv"):
        return {rank: contribution(rank, rank)}
    return {c: contribution(rank, c) for c in range(chunks)}


def expected(op: str, rank: int, n: int, chunks: int, root: int = ROOT) -> dict[int, int]:
    """The chunk values a rank must hold after the op (only the chunks that matter: at the
    root alone for Reduce and Gather, as nccl-tests checks them)."""
    if op == "all_reduce" or (op == "reduce" and rank == root):
        return {c: sum(contribution(r, c) for r in range(n)) for c in range(chunks)}
    if op == "reduce_scatter":
        mine = (rank + 1) % n  # where the ring's reduce-scatter leaves each chunk
        return {mine: sum(contribution(r, mine) for r in range(n))}
    if op == "all_gather" or (op == "gather" and rank == root):
        return {c: contribution(c, c) for c in range(n)}
    if op == "all_to_all":
        return {p * n + rank: contribution(p, p * n + rank) for p in range(n)}
    if op == "scatter":
        return {rank: contribution(root, rank)}
    if op == "sendrecv":
        left = (rank - 1) % n
        return {left: contribution(left, left)}
    if op in ("reduce", "gather"):
        return {}
    return {c: contribution(root, c) for c in range(chunks)}
