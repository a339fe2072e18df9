"""labkit sweep speaks nccl-tests: a parser written from nccl-tests' documented output
(column heads, one line per size, `# Out of bounds values` and `# Avg bus bandwidth`
footers) reads it unchanged, in emulated and in real units."""

import re
from dataclasses import asdict

import pytest

from labkit.analysis import nccltests
from labkit.model.traffic.results import OpResult

DATA = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+"
                  r"([\d.]+)\s+(\d+|N/A)")
AVG = re.compile(r"^# Avg bus bandwidth\s*: ([\d.eE+-]+)")
WRONG = re.compile(r"^# Out of bounds values : (\d+) (OK|FAILED)$")


def parse_nccl_tests(text: str) -> dict:
    """What a nccl-tests log parser takes from the output: the out-of-place columns
    of each data line and the two footers."""
    rows, avg, wrong = [], None, None
    for line in text.splitlines():
        if m := DATA.match(line):
            size, count, typ, redop, root, t, alg, bus, err = m.groups()
            rows.append({"size": int(size), "count": int(count), "type": typ, "redop": redop,
                         "root": int(root), "time_us": float(t), "algbw": float(alg),
                         "busbw": float(bus), "wrong": err})
        elif m := AVG.match(line):
            avg = float(m.group(1))
        elif m := WRONG.match(line):
            wrong = (int(m.group(1)), m.group(2))
    return {"rows": rows, "avg_busbw": avg, "wrong": wrong}


def ops(n_ranks: int, op_us: float, n_ops: int = 3) -> list[OpResult]:
    return [OpResult(op=o, rank=r, start_ns=0, end_ns=int(op_us * 1e3), wrong=0,
                     compute_ns=0, exposed_ns=0, bubble_ns=0)
            for o in range(n_ops + 1) for r in range(n_ranks)]


def render(rows, scale=None) -> str:
    return "\n".join(nccltests.header(scale) + [r.line(scale) for r in rows]
                     + nccltests.footer(rows, scale))


@pytest.mark.parametrize("op, size, ranks, count", [
    ("all_reduce", 1 << 20, 8, 262144), ("broadcast", 1 << 20, 8, 262144),
    ("all_gather", 1 << 20, 8, 32768), ("reduce_scatter", 1 << 20, 8, 32768),
    ("all_to_all", 1 << 20, 8, 32768), ("all_gather", 1000, 3, 80),
    ("reduce", 1 << 20, 8, 262144), ("sendrecv", 1 << 20, 8, 262144),
    ("gather", 1 << 20, 8, 32768), ("scatter", 1 << 20, 8, 32768), ("scatter", 1000, 3, 80)])
def test_count_is_nccl_tests_per_rank_element_count(op, size, ranks, count):
    assert nccltests.param_count(op, size, ranks) == count


@pytest.mark.parametrize("op, redop, root, factor", [
    ("all_reduce", "sum", -1, 2 * 7 / 8), ("all_gather", "none", -1, 7 / 8),
    ("reduce_scatter", "sum", -1, 7 / 8), ("all_to_all", "none", -1, 7 / 8),
    ("broadcast", "none", 0, 1), ("reduce", "sum", 0, 1), ("gather", "none", 0, 7 / 8),
    ("scatter", "none", 0, 7 / 8), ("sendrecv", "sum", -1, 1)])
def test_every_op_prints_nccl_tests_redop_root_and_bus_bandwidth(op, redop, root, factor):
    """As nccl-tests' <op>_perf prints them with its defaults (-o sum, -r 0), 8 ranks:
    algbw = size / time, busbw = algbw x the factor of its doc/PERFORMANCE.md and GetBw."""
    size = 1 << 20
    row = nccltests.measure(op, 8, size, ops(8, 1000.0), 100.0)
    assert (row.redop, row.root) == (redop, root)
    assert row.algbw_mbps == pytest.approx(size * 8 / 1000.0)
    assert row.busbw_mbps == pytest.approx(row.algbw_mbps * factor)


def test_a_nccl_tests_parser_reads_a_sweep():
    rows = [nccltests.measure("all_gather", 8, s, ops(8, s / 10), 100.0) for s in (65536, 131072)]
    parsed = parse_nccl_tests(render(rows))
    assert [r["size"] for r in parsed["rows"]] == [65536, 131072]
    assert [r["count"] for r in parsed["rows"]] == [2048, 4096]
    assert parsed["rows"][0]["redop"] == "none" and parsed["rows"][0]["root"] == -1
    assert parsed["wrong"] == (0, "OK")
    assert parsed["avg_busbw"] == pytest.approx(sum(r.busbw_mbps for r in rows) / 2, rel=1e-5)


def test_real_units_are_the_modelled_fabrics_in_nccl_tests_columns():
    scale = 4000  # 1 emulated Mbit/s stands for 4 Gbit/s
    (row,) = [nccltests.measure("all_reduce", 8, 1 << 20, ops(8, 100_000), 100.0)]
    parsed = parse_nccl_tests(render([row], scale))["rows"][0]
    assert parsed["time_us"] == pytest.approx(row.time_us / scale, abs=0.01)
    assert parsed["algbw"] == pytest.approx(row.algbw_mbps * scale / 8000, abs=0.01)
    assert parsed["busbw"] == pytest.approx(row.busbw_mbps * scale / 8000, abs=0.01)
    # algbw is still size / time, as nccl-tests defines it (GB/s = bytes / ns)
    assert parsed["algbw"] == pytest.approx(parsed["size"] / (parsed["time_us"] * 1e3),
                                            rel=0.01)
    assert row.line(scale).split()[-2:] == [f"{row.algbw_mbps:.2f}", f"{row.busbw_mbps:.2f}"]


def test_a_sweep_is_recorded_like_a_run(tmp_path):
    import json

    import polars as pl

    from labkit.runs import rundir
    from tests.recorded import sweep_manifest

    rows = [nccltests.measure("all_reduce", 4, s, ops(4, s / 10), 100.0) for s in (4096, 8192)]
    writer = rundir.RunWriter(tmp_path / "s1")
    writer.write_manifest(sweep_manifest("s1"))
    path = rundir.finish_sweep(writer, rows)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["tables"] == ["sweep"]
    table = pl.read_parquet(path / "sweep.parquet")
    assert table.columns[0] == "run_id" and table["size"].to_list() == [4096, 8192]
    # the typed rows go in, their fields in order come out: in sweep.json and the table
    assert json.loads((path / "sweep.json").read_text()) == [asdict(r) for r in rows]
    assert table.drop("run_id").to_dicts() == [asdict(r) for r in rows]
    assert [r["run_id"] for r in rundir.list_runs(tmp_path)] == ["s1"]
    try:
        rundir.load_run(path)
        raise AssertionError("a sweep loaded as a run")
    except rundir.RunDataError as exc:
        assert "a sweep, not a run" in str(exc)
