import polars as pl
import pytest

from labkit import rundir
from labkit.rundir import RunDataError


def write_run(path):
    w = rundir.RunWriter(path)
    w.write_manifest(run_id="r1")
    tables = {name: pl.DataFrame([], schema=schema) for name, schema in rundir.SCHEMAS.items()}
    return w, w.finish(tables, {"scenario": "t", "policies": {}})


def test_written_run_loads_back(tmp_path):
    w, path = write_run(tmp_path / "r1")
    assert path == tmp_path / "r1" and not w.tmp.exists()
    run = rundir.load_run(path)
    assert run.manifest["status"] == "complete"
    assert set(run.tables) == set(rundir.SCHEMAS)
    assert run["queue"].schema == pl.Schema(rundir.SCHEMAS["queue"])


def test_never_overwrites(tmp_path):
    write_run(tmp_path / "r1")
    with pytest.raises(FileExistsError, match="never overwrites"):
        rundir.RunWriter(tmp_path / "r1")


def test_an_unfinished_run_is_kept_and_named_when_its_out_is_reused(tmp_path):
    w = rundir.RunWriter(tmp_path / "r2")
    w.write_manifest(run_id="r2", status="interrupted")
    with pytest.raises(FileExistsError, match="did not finish.*choose another --out"):
        rundir.RunWriter(tmp_path / "r2")
    assert (w.tmp / "manifest.json").exists()


def test_a_run_that_never_started_leaves_nothing(tmp_path):
    w = rundir.RunWriter(tmp_path / "r3")
    w.write_manifest(run_id="r3")
    w.discard()
    assert not w.tmp.exists()
    rundir.RunWriter(tmp_path / "r3")  # the same --out, free again


def test_incomplete_run_is_listed_as_such(tmp_path):
    w = rundir.RunWriter(tmp_path / "r2")
    w.write_manifest(run_id="r2")
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
    (lambda p: (p / "manifest.json").unlink(), "manifest.json: missing"),
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
    packages = prov["packages"]
    for name in ("polars", "plotly", "scapy", "pyroute2", "pyyaml", "rich", "labkit"):
        assert packages[name] == version(name), name
    lock = rundir.bpf.REPO_ROOT / "requirements.lock"
    pinned = dict(line.split(" ")[0].split("==") for line in lock.read_text().splitlines()
                  if "==" in line and not line.startswith((" ", "#")))
    assert pinned, "requirements.lock pins nothing"
    assert {n: packages.get(n) for n in pinned} == pinned, "the venv does not match the lock"
    assert prov["requirements_lock"] == rundir.sha256_file(lock)


def test_every_table_file_leads_with_its_run_id_so_runs_query_as_one(tmp_path):
    for run_id in ("r1", "r2"):
        w = rundir.RunWriter(tmp_path / run_id)
        w.write_manifest(run_id=run_id)
        tables = {name: pl.DataFrame([], schema=schema)
                  for name, schema in rundir.SCHEMAS.items()}
        tables["cpu"] = pl.DataFrame({"policy": ["fifo"], "t_ns": [1], "busy": [0.5]},
                                     schema=rundir.SCHEMAS["cpu"])
        w.finish(tables, {"scenario": "t", "policies": {}})
    both = pl.scan_parquet(tmp_path / "*" / "cpu.parquet").collect()
    assert both.columns[0] == "run_id" and sorted(both["run_id"]) == ["r1", "r2"]
    assert rundir.load_run(tmp_path / "r1")["cpu"].columns == list(rundir.SCHEMAS["cpu"])


def test_a_run_recorded_before_run_id_columns_still_loads():
    sample = rundir.bpf.REPO_ROOT / "data/sample/bottleneck"
    assert "run_id" not in pl.read_parquet_schema(sample / "collectives.parquet")
    assert rundir.load_run(sample)["collectives"].height > 0


def test_every_row_type_names_its_table_columns():
    """Rows are named where they are produced; their fields are the table's columns."""
    from labkit.capture import CpuRow, LaneRow, QueueRow
    from labkit.control.valve import Decision
    from labkit.experiment import GapRow, HistRow, LatencyRow, SojournRow

    for table, row in (("lanes", LaneRow), ("sojourn", SojournRow), ("latency", LatencyRow),
                       ("gaps", GapRow),
                       ("histograms", HistRow), ("controller", Decision), ("cpu", CpuRow)):
        assert ("policy", *row._fields) == tuple(rundir.SCHEMAS[table]), table
    assert ("policy", *QueueRow._fields) == tuple(c for c in rundir.SCHEMAS["queue"]
                                                  if c != "lane")  # lane: from the classid
