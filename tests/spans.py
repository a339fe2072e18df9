"""Phase spans in tests: the collective agents' own op logic
(:class:`labkit.traffic.collective.Op`) driven in virtual time with no network, what its
ranks report (as their results JSON says it), a recorded run given their tables, and the
checks every recorded ``phases`` table must pass."""

from __future__ import annotations

import heapq
import itertools
import json
from dataclasses import replace

import polars as pl

from labkit.model.traffic import jobs, schedules
from labkit.model.traffic.results import CollectiveResult, OpResult, Span
from labkit.runs import experiment, rundir
from labkit.runs.rundir import Run
from labkit.traffic.collective import Op


def run_op(plans: list[schedules.Plan], transfer_ns: int, start_ns: int = 0,
           index: int = 0, slow: dict[int, float] | None = None
           ) -> tuple[list[Op], list[OpResult]]:
    """Every rank's op ``index`` (rank r runs ``plans[r]``), all started at ``start_ns``
    and looked at as the agent's loop does (:meth:`Op.step`) at every event: a compute's
    end or a message's arrival, ``transfer_ns`` (> 0) after it left. Each op finishes
    when it has received everything (``slow``: ranks that compute this many times as
    long). Returns the ops and their ``collectives`` rows."""
    ops = [Op(p, start_ns, (slow or {}).get(r, 1.0)) for r, p in enumerate(plans)]
    rows: dict[int, OpResult] = {}
    wire: list[tuple] = []  # (arrival_ns, order, dst, src, chunk, value, sent_ns)
    order = itertools.count()
    now = start_ns
    while len(rows) < len(ops):
        while wire and wire[0][0] <= now:
            _, _, dst, src, chunk, value, sent = heapq.heappop(wire)
            assert ops[dst].arrived(src, chunk, value, sent), f"rank {dst}: unexpected {chunk}"
        for r, op in enumerate(ops):
            if r in rows:
                continue
            for m, value in op.step(now):
                heapq.heappush(wire, (now + transfer_ns, next(order), m.peer, r, m.chunk,
                                      value, now))
            if op.received_all():
                rows[r] = op.finish(index, r, now, 0)
        if len(rows) < len(ops):
            events = [w[0] for w in wire] + [op.busy_until for op in ops if op.busy_until]
            assert events, "the plans deadlock"
            now = min(events)
    return ops, [rows[r] for r in range(len(ops))]


def results(plans: list[schedules.Plan], transfer_ns: int,
            iterations: int = 1) -> list[CollectiveResult]:
    """Per rank, its results (ops and phases, no counters) as read back from its results
    JSON, for ``iterations`` iterations of ``plans``, each started by every rank once the
    last rank has finished the one before."""
    ops: list[list[OpResult]] = [[] for _ in plans]
    phases: list[list[Span]] = [[] for _ in plans]
    start = 0
    for k in range(iterations):
        op_states, rows = run_op(plans, transfer_ns, start, k)
        for r, (op, row) in enumerate(zip(op_states, rows, strict=True)):
            ops[r].append(row)
            phases[r] += [Span(k, *span) for span in op.spans]
        start = max(row.end_ns for row in rows)
    return [CollectiveResult.from_json(json.loads(json.dumps(CollectiveResult(
        rank=r, ops=tuple(ops[r]), phases=tuple(phases[r]), aborted=False).to_json())))
            for r in range(len(plans))]


def job_run(base: Run, transfer_ns: dict[str, int], iterations: int = 2) -> Run:
    """``base``, a recorded training-job run, with the ``collectives`` and ``phases`` of
    virtual ranks running its job (one policy per entry of ``transfer_ns``: how long a
    message takes under it), through the agents' results path
    (:func:`labkit.runs.experiment._collect`, :func:`labkit.runs.rundir.tables_from`)."""
    job = base.manifest.scenario["job"]
    params = {"parallelism": job["parallelism"], **dict(job["params"])}
    hosts = job["ranks"]
    plans = [jobs.plan(params, len(hosts), r) for r in range(len(hosts))]
    policies = []
    for policy, ns in transfer_ns.items():
        policies.append(experiment.PolicyResult(policy, "fifo"))
        experiment._collect(policies[-1], list(zip(hosts, results(plans, ns, iterations),
                                                     strict=True)), [])
    tables = {**base.tables, **{name: frame for name, frame in rundir.tables_from(policies)
                                 .items() if name in ("collectives", "phases")}}
    manifest = replace(base.manifest, tables=tuple(sorted({*base.manifest.tables, "phases"})))
    return Run(base.path, manifest, base.summary, tables)


def before_phases(run: Run) -> Run:
    """``run`` as if recorded before the ``phases`` table (the sample runs were, until
    re-recorded): not among its manifest's tables, and empty."""
    manifest = replace(run.manifest,
                       tables=tuple(t for t in run.manifest.tables if t != "phases"))
    return Run(run.path, manifest, run.summary, {**run.tables, "phases": run["phases"].clear()})


def assert_spans_fit(ops: pl.DataFrame, phases: pl.DataFrame) -> None:
    """Each (policy, op, rank)'s spans (``phases``) lie within its op (``collectives``),
    follow each other without overlapping, and per phase add up to the op's sums."""
    keys = ["policy", "op", "rank"]
    spans = phases.sort(*keys, "start_ns").join(
        ops.select(*keys, pl.col("start_ns").alias("op_start"), pl.col("end_ns").alias("op_end")),
        on=keys, how="left")
    assert spans["op_start"].null_count() == 0, "spans of an op that was not recorded"
    before = pl.col("end_ns").shift().over(keys).fill_null(pl.col("op_start"))
    assert spans.filter((pl.col("start_ns") < before) | (pl.col("end_ns") > pl.col("op_end"))
                        | (pl.col("end_ns") <= pl.col("start_ns"))).is_empty()
    for phase, column in (("compute", "compute_ns"), ("wire_wait", "exposed_ns"),
                          ("bubble", "bubble_ns")):
        sums = (phases.filter(pl.col("phase") == phase).group_by(keys)
                .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns")))
        joined = ops.join(sums, on=keys, how="left").with_columns(pl.col("ns").fill_null(0))
        assert (joined["ns"] == joined[column]).all(), phase
