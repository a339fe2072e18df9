import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from labkit.model import paths
from labkit.model.summary import Summary
from labkit.runs import rundir
from labkit.runs.rundir import RunDataError
from tests.recorded import run_manifest

NO_POLICIES = Summary(scenario="t", run_id="r1", scale_factor=1.0, policies={})


def write_run(path):
    w = rundir.RunWriter(path)
    w.write_manifest(run_manifest("r1"))
    tables = {name: pl.DataFrame([], schema=schema) for name, schema in rundir.SCHEMAS.items()}
    return w, w.finish(tables, NO_POLICIES)


def test_written_run_loads_back(tmp_path):
    w, path = write_run(tmp_path / "r1")
    assert path == tmp_path / "r1" and not w.tmp.exists()
    assert json.loads((path / "summary.json").read_text()) == NO_POLICIES.to_json()
    assert rundir.load_run(path).summary == NO_POLICIES
    run = rundir.load_run(path)
    assert run.manifest.status == "complete"
    assert set(run.tables) == set(rundir.SCHEMAS)
    assert run["queue"].schema == pl.Schema(rundir.SCHEMAS["queue"])


def test_never_overwrites(tmp_path):
    write_run(tmp_path / "r1")
    with pytest.raises(FileExistsError, match="never overwrites"):
        rundir.RunWriter(tmp_path / "r1")


def test_an_unfinished_run_is_kept_and_named_when_its_out_is_reused(tmp_path):
    w = rundir.RunWriter(tmp_path / "r2")
    w.write_manifest(run_manifest("r2", status="interrupted"))
    with pytest.raises(FileExistsError, match="did not finish.*choose another --out"):
        rundir.RunWriter(tmp_path / "r2")
    assert (w.tmp / "manifest.json").exists()


def test_a_recording_that_ends_early_says_how_after_what_it_was_asked(tmp_path):
    w = rundir.RunWriter(tmp_path / "r2")
    w.write_manifest(run_manifest("r2"))
    w.ended("incomplete", "AgentError: g1 exited")
    doc = json.loads((w.tmp / "manifest.json").read_text())
    assert list(doc)[0] == "status" and list(doc)[-2:] == ["error", "end_time"]
    assert doc["status"] == "incomplete" and doc["error"] == "AgentError: g1 exited"
    w.ended("interrupted")
    assert "error" not in json.loads((w.tmp / "manifest.json").read_text())
    assert w.manifest.status == "interrupted" and w.manifest.end_time


def test_a_run_that_never_started_leaves_nothing(tmp_path):
    w = rundir.RunWriter(tmp_path / "r3")
    w.write_manifest(run_manifest("r3"))
    w.discard()
    assert not w.tmp.exists()
    rundir.RunWriter(tmp_path / "r3")  # the same --out, free again


def test_incomplete_run_is_listed_as_such(tmp_path):
    w = rundir.RunWriter(tmp_path / "r2")
    w.write_manifest(run_manifest("r2"))
    write_run(tmp_path / "r1")
    listed = {r["run_id"]: r["status"] for r in rundir.list_runs(tmp_path)}
    assert listed == {"r1": "complete", "r2": "incomplete"}


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "lanes.parquet").unlink(), "lanes.parquet: missing"),
    (lambda p: (p / "queue.parquet").write_bytes(b"not parquet"), "queue.parquet: not a readable"),
    (lambda p: pl.DataFrame({"policy": ["x"]}).write_parquet(p / "cpu.parquet"),
     "cpu.parquet: column 't_ns' is missing"),
    (lambda p: pl.DataFrame({"policy": ["x"], "t_ns": [1.5], "busy": [0.1]}).write_parquet(
        p / "cpu.parquet"), "cpu.parquet: column 't_ns' is Float64, expected Int64"),
    (lambda p: (p / "summary.json").write_text("{"), "summary.json: not valid JSON"),
    (lambda p: (p / "summary.json").write_text('{"scenario": "t", "policies": {}}'),
     "summary.json: summary: missing key 'run_id'"),
    (lambda p: (p / "manifest.json").unlink(), "manifest.json: missing"),
    (lambda p: (p / "manifest.json").write_text('{"status": "complete"}'),
     "manifest.json: 'run_id' is missing"),
    (lambda p: (p / "manifest.json").write_text('{"kind": "nightly"}'),
     "manifest.json: kind 'nightly' is none of run, sweep"),
])
def test_damaged_run_gives_a_clear_error(tmp_path, damage, message):
    _, path = write_run(tmp_path / "r1")
    damage(path)
    before = {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()}
    with pytest.raises(RunDataError, match=message):
        rundir.load_run(path)
    assert before == {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()}


def test_provenance_names_every_python_package_and_the_lock():
    """A recorded run says which library computed it: each installed distribution's
    version, as pinned by requirements.lock, and the lock file's hash."""
    from importlib.metadata import version

    prov = rundir.provenance()
    packages = prov.packages
    for name in ("polars", "plotly", "scapy", "pyroute2", "pyyaml", "rich", "labkit"):
        assert packages[name] == version(name), name
    lock = paths.REPO_ROOT / "requirements.lock"
    pinned = dict(line.split(" ")[0].split("==") for line in lock.read_text().splitlines()
                  if "==" in line and not line.startswith((" ", "#")))
    assert pinned, "requirements.lock pins nothing"
    assert {n: packages.get(n) for n in pinned} == pinned, "the venv does not match the lock"
    assert prov.requirements_lock == rundir.sha256_file(lock)


def test_the_dev_lock_holds_every_pin_of_the_lock():
    """`make dev` installs requirements-dev.lock over requirements.lock: it adds packages
    (the tests', the linters') and changes none (a run's lock hash names both)."""
    def pins(name: str) -> dict[str, str]:
        text = (paths.REPO_ROOT / name).read_text()
        return dict(line.split(" ")[0].split("==") for line in text.splitlines()
                    if "==" in line and not line.startswith((" ", "#")))

    lock, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {n: dev.get(n) for n in lock} == lock
    assert {"pytest", "ruff", "mypy", "playwright"} <= set(dev) - set(lock)
    assert "jupyterlab" in lock


def test_every_table_file_leads_with_its_run_id_so_runs_query_as_one(tmp_path):
    for run_id in ("r1", "r2"):
        w = rundir.RunWriter(tmp_path / run_id)
        w.write_manifest(run_manifest(run_id))
        tables = {name: pl.DataFrame([], schema=schema)
                  for name, schema in rundir.SCHEMAS.items()}
        tables["cpu"] = pl.DataFrame({"policy": ["fifo"], "t_ns": [1], "busy": [0.5]},
                                     schema=rundir.SCHEMAS["cpu"])
        w.finish(tables, NO_POLICIES)
    both = pl.scan_parquet(tmp_path / "*" / "cpu.parquet").collect()
    assert both.columns[0] == "run_id" and sorted(both["run_id"]) == ["r1", "r2"]
    assert rundir.load_run(tmp_path / "r1")["cpu"].columns == list(rundir.SCHEMAS["cpu"])


def test_a_run_recorded_before_run_id_columns_still_loads():
    sample = Path(__file__).parent / "recorded/bottleneck-20261130"
    assert "run_id" not in pl.read_parquet_schema(sample / "collectives.parquet")
    assert rundir.load_run(sample)["collectives"].height > 0


I64, STR, F64 = pl.Int64, pl.String, pl.Float64
RECORDED = {  # every table's columns and dtypes as runs have recorded them (before "run_id")
    "collectives": {"policy": STR, "op": I64, "rank": I64, "host": STR, "start_ns": I64,
                    "end_ns": I64, "wrong": I64, "compute_ns": I64, "exposed_ns": I64,
                    "bubble_ns": I64, "resent": I64},
    "phases": {"policy": STR, "op": I64, "rank": I64, "host": STR, "phase": STR,
               "start_ns": I64, "end_ns": I64},
    "transport": {"policy": STR, "host": STR, "rank": I64, "packets_sent": I64,
                  "retransmits": I64, "timeouts": I64, "naks": I64, "out_of_order": I64,
                  "bytes_received": I64, "cpu_user_s": F64, "cpu_sys_s": F64, "cnps": I64},
    "queue": {"policy": STR, "t_ns": I64, "port": STR, "classid": STR, "lane": STR,
              "bytes": I64, "packets": I64, "drops": I64, "overlimits": I64,
              "backlog_bytes": I64, "backlog_packets": I64},
    "lanes": {"policy": STR, "t_ns": I64, "port": STR, "lane": STR, "offered_packets": I64,
              "offered_bytes": I64, "enqueued_packets": I64, "enqueued_bytes": I64,
              "dropped_packets": I64, "dropped_bytes": I64},
    "job_lanes": {"policy": STR, "t_ns": I64, "port": STR, "job": STR,
                  "enqueued_packets": I64, "enqueued_bytes": I64, "dropped_packets": I64,
                  "dropped_bytes": I64},
    "sojourn": {"policy": STR, "t_ns": I64, "port": STR, "lane": STR, "sojourn_ns": I64,
                "bytes": I64, "stamp_ns": I64, "seq": I64},
    "latency": {"policy": STR, "t_ns": I64, "lane": STR, "latency_ns": I64, "bytes": I64,
                "stamp_ns": I64, "seq": I64},
    "histograms": {"policy": STR, "kind": STR, "port": STR, "lane": STR, "bucket": I64,
                   "count": I64},
    "gaps": {"policy": STR, "t_ns": I64, "port": STR, "gap_ns": I64, "bytes": I64,
             "busy_bytes": I64},
    "flows": {"policy": STR, "host": STR, "entry": STR, "t_ns": I64, "bytes": I64},
    "ios": {"policy": STR, "host": STR, "entry": STR, "t_ns": I64, "latency_ns": I64,
            "bytes": I64},
    "cpu": {"policy": STR, "t_ns": I64, "busy": F64},
    "pauses": {"policy": STR, "t_ns": I64, "port": STR, "classid": STR, "lane": STR,
               "cause": STR, "reaction_ns": I64, "wake_ns": I64, "paused_ns": I64,
               "resume_ns": I64},
    "controller": {"policy": STR, "t_ns": I64, "valve": STR, "lane": STR, "old_mbps": F64,
                   "new_mbps": F64, "old_busy_mbps": F64, "new_busy_mbps": F64,
                   "busy_from_ns": I64, "busy_until_ns": I64, "reason": STR},
    "program_ops": {"policy": STR, "rank": I64, "host": STR, "iteration": I64, "op": STR,
                    "bytes": I64, "start_ns": I64, "end_ns": I64},
    "bursts": {"policy": STR, "host": STR, "start_ns": I64, "end_ns": I64, "bytes": I64,
               "packets": I64},
    "dctcp": {"policy": STR, "t_ns": I64, "host": STR, "flow": STR, "alpha": F64, "cwnd": I64,
              "acked_bytes": I64, "marked_bytes": I64},
    "events": {"policy": STR, "t_ns": I64, "event": I64, "link": STR, "change": STR,
               "value": F64, "state": STR},
    "job_ranks": {"policy": STR, "t_ns": I64, "job": STR, "intensity_ns_per_byte": F64,
                  "iterations": I64, "lane": STR},
    "job_shifts": {"policy": STR, "t_ns": I64, "job": STR, "op": I64, "shift_ns": I64,
                   "period_ns": I64, "comm_ns": I64},
    "routes": {"policy": STR, "t_ns": I64, "router": STR, "dst": STR, "via": STR,
               "change": STR},
}


def test_schemas_are_the_recorded_ones():
    """Tables, columns, their order and dtypes are what recorded runs hold."""
    assert list(rundir.SCHEMAS) == list(RECORDED)
    for name, schema in RECORDED.items():
        assert list(rundir.SCHEMAS[name].items()) == list(schema.items()), name


SAMPLES = paths.REPO_ROOT / "data/sample"


@pytest.mark.parametrize("sample", sorted(
    str(m.parent.relative_to(SAMPLES)) for m in SAMPLES.rglob("manifest.json")
    if json.loads(m.read_text()).get("kind") in (None, "run")))
def test_every_sample_run_loads_in_its_schemas(sample):
    run = rundir.load_run(SAMPLES / sample)
    assert {name: dict(frame.schema) for name, frame in run.tables.items()} == RECORDED


ROUND_TRIP = ["checkpoint-burst", "lossless/lossless", "pytorch-ddp", "dctcp-paper/dctcp",
              "link-faults", "two-jobs", "faults"]


@pytest.mark.parametrize("sample", ROUND_TRIP)
def test_every_table_goes_through_its_row_type_unchanged(sample):
    """The row types are the tables (SCHEMAS is derived from them): recorded rows, made
    row types again and put in their policy's attribute of the table's name, come out of
    tables_from as they were recorded."""
    from labkit.model.tables import TABLES
    from labkit.runs.experiment import PolicyResult

    recorded = {name: frame.head(300) for name, frame in rundir.load_run(SAMPLES / sample)
                .tables.items()}
    if sample == ROUND_TRIP[0]:
        assert not [name for name in TABLES if all(
            rundir.load_run(SAMPLES / s)[name].is_empty() for s in ROUND_TRIP)]
    policies = {p: PolicyResult(p, "lanes") for frame in recorded.values()
                for p in frame["policy"]}
    for name, row in TABLES.items():
        for policy, *values in recorded[name].iter_rows():
            getattr(policies[policy], name).append(row(*values))
    written = rundir.tables_from(list(policies.values()))
    for name, frame in recorded.items():
        assert written[name].sort("policy", maintain_order=True).equals(
            frame.sort("policy", maintain_order=True)), name


def test_the_queue_pollers_samples_become_rows_with_their_class_and_lane():
    from labkit.kernel.capture import QueuePoller
    from labkit.model.tables import QueueRow

    poller = QueuePoller([])
    poller.queue_samples = [(5, "s1-eth1", 0x10010, 1, 2, 3, 4, 5, 6),
                            (5, "s1-eth1", 0x10030, 7, 8, 9, 10, 11, 12)]
    assert poller.queue_rows("lanes") == [QueueRow(5, "s1-eth1", "1:10", "vip", 1, 2, 3, 4, 5, 6),
                                          QueueRow(5, "s1-eth1", "1:30", "low", 7, 8, 9, 10,
                                                   11, 12)]
    assert {r.lane for r in poller.queue_rows("fifo")} == {"all"}


PIPELINE = {"parallelism": "pipeline", "microbatches": 4, "activation_bytes": 1 << 16,
            "stage_compute_ms": 1, "schedule": "1f1b"}


def test_phases_go_from_the_agents_results_to_their_table_and_back(tmp_path):
    from labkit.model.traffic import jobs
    from labkit.runs import experiment
    from tests.spans import assert_spans_fit, results

    plans = [jobs.plan(PIPELINE, 3, r) for r in range(3)]
    ranks = [(f"g{r + 1}", res) for r, res in enumerate(results(plans, 250_000, 2))]
    policy = experiment.PolicyResult("fifo", "fifo")
    experiment._collect(policy, ranks, [])
    tables = rundir.tables_from([policy])
    w = rundir.RunWriter(tmp_path / "r")
    w.write_manifest(run_manifest("r"))
    run = rundir.load_run(w.finish(tables, NO_POLICIES))
    phases = run["phases"]
    assert "phases" in run.manifest.tables and phases.equals(tables["phases"])
    assert phases.schema == pl.Schema(rundir.SCHEMAS["phases"])
    assert set(phases["phase"]) == {"compute", "wire_wait", "bubble"}
    assert set(zip(phases["rank"], phases["host"], strict=True)) == {(0, "g1"), (1, "g2"),
                                                                      (2, "g3")}
    ops = run["collectives"]
    assert ops.height == 6 and "phases" not in run["transport"].columns
    assert_spans_fit(ops, phases)


def _forget_phases(path, tables: bool) -> None:
    """Make the run at ``path`` one recorded before the ``phases`` table (``tables``:
    with a list of tables in its manifest, else from before that list too)."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["tables"] = [t for t in manifest["tables"] if t != "phases"]
    if not tables:
        del manifest["tables"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "phases.parquet").unlink(missing_ok=True)


@pytest.mark.parametrize("tables", [True, False])
def test_a_run_recorded_before_phases_loads_with_that_table_empty(tmp_path, tables):
    path = tmp_path / "old"  # a sample run (recorded before phases, until re-recorded)
    shutil.copytree(paths.REPO_ROOT / "data/sample/pipeline-parallel", path)
    _forget_phases(path, tables)
    run = rundir.load_run(path)
    assert run["phases"].is_empty() and run["collectives"].height > 0
    assert run["phases"].schema == pl.Schema(rundir.SCHEMAS["phases"])
