"""Training jobs as per-rank plans: compute phases (timed waits) and the traffic of
each kind of parallelism, one plan per training iteration.

* ``data`` — forward and backward compute, then the gradient All-Reduced in buckets.
* ``tensor`` — every layer's forward and backward ends with an All-Reduce of its
  activations across all ranks: many small, latency-sensitive collectives.
* ``pipeline`` — ranks are stages; micro-batches flow forward (activations) and
  back (gradients) point to point at stage boundaries only, in a GPipe or 1F1B
  order; a stage idles (bubbles) while it waits for its neighbours.
* ``expert`` — every layer dispatches its tokens to the experts and combines them
  back with two All-to-Alls.

Backward compute takes twice the forward compute. Standard library only.
"""

from __future__ import annotations

from labkit.model.traffic.schedules import Msg, Plan, Step, collective_plan, compute, concat

PARALLELISM = ("data", "tensor", "pipeline", "expert")
PIPELINE_SCHEDULES = ("1f1b", "gpipe")


def _ns(ms: float) -> int:
    return int(ms * 1e6)


def plan(job: dict, n: int, rank: int) -> Plan:
    kind = job["parallelism"]
    if kind == "data":
        bucket = -(-job["gradient_bytes"] // job["buckets"])
        return concat([compute(3 * _ns(job["compute_ms"]))] + [
            collective_plan("all_reduce", "ring", n, rank, bucket)
            for _ in range(job["buckets"])])
    if kind == "tensor":
        def layer(ms: float) -> list[Plan]:
            return [compute(_ns(ms)),
                    collective_plan("all_reduce", "ring", n, rank, job["activation_bytes"])]
        layers = job["layers"]
        return concat([p for _ in range(layers) for p in layer(job["layer_compute_ms"])]
                      + [p for _ in range(layers) for p in layer(2 * job["layer_compute_ms"])])
    if kind == "expert":
        a2a = collective_plan("all_to_all", "pairwise", n, rank, job["tokens_bytes"])
        return concat([p for _ in range(job["layers"])
                       for p in (compute(_ns(job["layer_compute_ms"])), a2a,
                                 compute(_ns(job["layer_compute_ms"])), a2a)])
    if kind == "pipeline":
        return _pipeline(job, n, rank)
    raise ValueError(f"unknown parallelism {kind!r} (known: {', '.join(PARALLELISM)})")


def stage_order(schedule: str, stages: int, stage: int, microbatches: int) -> list[tuple]:
    """The order of forward ("F", m) and backward ("B", m) passes at one stage."""
    fwd = [("F", m) for m in range(microbatches)]
    bwd = [("B", m) for m in range(microbatches)]
    if schedule == "gpipe":
        return fwd + bwd
    warmup = min(stages - stage - 1, microbatches)
    order = fwd[:warmup]
    for i in range(microbatches - warmup):
        order += [fwd[warmup + i], bwd[i]]
    return order + bwd[microbatches - warmup:]


def _pipeline(job: dict, stages: int, stage: int) -> Plan:
    """Activations of micro-batch m are chunk m; its gradients chunk M + m."""
    m_count, size = job["microbatches"], job["activation_bytes"]
    f_ns, b_ns = _ns(job["stage_compute_ms"]), 2 * _ns(job["stage_compute_ms"])
    prev = stage - 1 if stage > 0 else None
    nxt = stage + 1 if stage < stages - 1 else None
    steps: list[Step] = []
    for kind, m in stage_order(job.get("schedule", "1f1b"), stages, stage, m_count):
        src, dst, chunk = (prev, nxt, m) if kind == "F" else (nxt, prev, m_count + m)
        if src is not None:  # wait for the input, then compute and pass it on
            steps.append(Step(recv=[Msg(src, chunk, size)]))
        steps.append(Step(send=[Msg(dst, chunk, size)] if dst is not None else [],
                          compute_ns=f_ns if kind == "F" else b_ns))
    return Plan(steps, 2 * m_count, {}, {})


def sent_bytes(p: Plan) -> list[tuple[int, int]]:
    """(peer, bytes) of every message a plan sends."""
    return [(m.peer, m.nbytes) for s in p.steps for m in s.send]
