"""The command line's flags, alike across commands: --json wherever a command reports,
--out with a default under data/ (never the checkout's root, nor any example's), the
calibration's --duration, and nccl-tests' -w, -n, -c, -d and -o on `labkit sweep` (honoured
where labkit has them, refused in one line, exit 2, where not). A sweep and a calibration
run through stand-ins here: nothing is built."""

import argparse
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit.analysis import nccltests
from labkit.model import grid as grid_mod
from labkit.runs import runner
from labkit.runs.rundir import load_sweep
from labkit.ui import cli
from labkit.ui.cli import recorded, signals
from tests.tier0.test_cli import COMMANDS, GRID, REPO, run_cli

SWEEP = REPO / "data/sample/sweeps/ring"
TUNING = REPO / "data/sample/tune/leaf-spine"
LEAF_SPINE = str(REPO / "topologies/leaf-spine.yaml")
PLACES = ("data/", "/", "~/")  # where an example may write; or a placeholder (DIR, FILE)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    top = cli.build_parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subs.choices)


def test_every_out_option_has_a_default_said_in_its_help():
    for name, parser in _subparsers().items():
        for action in parser._actions:
            if "--out" in action.option_strings:
                assert not action.required and "default" in action.help, name


def test_no_example_writes_into_the_checkouts_root():
    helps = [a.help or "" for p in _subparsers().values() for a in p._actions]
    docs = [p.read_text() for p in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
                                    REPO / "notebooks/labs/README.md")]
    found = [m.group(2) for text in (*helps, *docs)
             for m in re.finditer(r"(--out|--html|labs release) +([^ `),]+)", text)]
    assert "data/figures/fabric.html" in found
    for where in found:
        assert where.startswith(PLACES) or where.isupper(), where


def test_readme_lists_every_command():
    text = (REPO / "README.md").read_text()
    start = text.index("```sh\n.venv/bin/labkit doctor")
    block = text[start:text.index("```\n", start + 3)]
    for command in set(COMMANDS) - {"lab", "samples"}:  # `make lab`, `make samples`
        assert re.search(rf"labkit {command}\b", block), command


def test_figures_write_under_data_figures_by_default_and_say_so_in_json(monkeypatch,
                                                                        tmp_path, labkit_paths):
    monkeypatch.setattr(recorded.shutil, "which", lambda _: None)  # HTML only: no Chromium
    code, out, err = run_cli("figures", str(SWEEP), "--json")
    doc = json.loads(out)
    run_id = json.loads((SWEEP / "manifest.json").read_text())["run_id"]
    where = tmp_path / "figures" / run_id
    assert code == 0 and doc["schema"] == "labkit.figures" and doc["out"] == str(where)
    assert doc["figures"] == ["busbw", "time"] and doc["images"] is False
    assert sorted(doc["files"]) == [str(where / f"{n}.html") for n in ("busbw", "time")]
    assert all(Path(f).exists() for f in doc["files"]) and "steps" in err
    code, out, err = run_cli("figures", str(SWEEP))  # again: the figures stay as they were
    assert code == 2 and "labkit does not overwrite figures" in err


def test_batch_dry_run_json_lists_the_points():
    code, out, _ = run_cli("batch", str(GRID), "--dry-run", "--json")
    doc, g = json.loads(out), grid_mod.load(GRID)
    assert code == 0 and doc["schema"] == "labkit.batch" and doc["dry_run"] is True
    assert doc["runs"] == g.size == len(doc["points"]) == 8
    assert doc["axes"] == [a.key for a in g.axes]
    assert doc["points"][7] == {"point": 7, "name": "p007",
                                "parameters": g.points[7].parameters,
                                "policies": list(g.points[7].policies),
                                "seed": g.points[7].seed}


@pytest.fixture
def recorded_sweep(monkeypatch):
    """`labkit sweep` with a stand-in for the sweep: the sample ring sweep, its rows shown
    as they come; what it was asked for kept in the list returned."""
    asked: list[tuple] = []

    def sweep(sc, op, algo, sizes, iters, *, out, on_row, argv):
        asked.append((op, algo, sizes, iters))
        rows = [nccltests.Row(**r) for r in load_sweep(SWEEP).rows]
        for row in rows:
            on_row(row)
        return SimpleNamespace(path=SWEEP, rows=rows)

    monkeypatch.setattr(runner, "sweep", sweep)
    monkeypatch.setattr(runner, "not_ready", lambda: None)
    monkeypatch.setattr(signals, "before_building", lambda: None)
    return asked


def test_sweep_takes_nccl_tests_flags_where_they_carry_over(recorded_sweep):
    code, out, err = run_cli("sweep", LEAF_SPINE, "-b", "64K", "-e", "256K", "-f", "2",
                             "-n", "3", "-w", "1", "-c", "1", "-d", "float32", "-o", "sum")
    assert code == 0 and recorded_sweep == [("all_reduce", "ring", [65536, 131072, 262144],
                                             3)]
    assert "#       size" in out and "# Avg bus bandwidth" in out and not err


@pytest.mark.parametrize("op, algo", [("reduce", "ring"), ("gather", "direct"),
                                      ("scatter", "direct"), ("sendrecv", "ring"),
                                      ("all_to_all", "pairwise")])
def test_sweep_takes_nccl_tests_ops_each_by_its_first_algorithm(recorded_sweep, op, algo):
    code, out, err = run_cli("sweep", LEAF_SPINE, "--op", op, "-b", "64K", "-e", "64K")
    assert code == 0 and recorded_sweep == [(op, algo, [65536], 10)]
    assert f"# labkit sweep: {op} ({algo}) over" in out and not err


def test_sweep_refuses_an_algorithm_its_op_has_not_in_one_line(recorded_sweep):
    code, out, err = run_cli("sweep", LEAF_SPINE, "--op", "gather", "--algo", "ring")
    assert code == 2 and not out and not recorded_sweep
    assert err == ("error: scenario leaf-spine: algo: no algorithm 'ring' for gather "
                   "(known: direct)\n")


def test_sweep_json_is_the_recorded_sweep_and_its_lines_go_to_stderr(recorded_sweep):
    code, out, err = run_cli("sweep", LEAF_SPINE, "-c", "0", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.report" and doc["kind"] == "sweep"
    assert doc["rows"] == load_sweep(SWEEP).rows and doc["run_dir"] == str(SWEEP)
    assert "#       size" in err and "sweep recorded in" in err
    assert "-c 0 changes nothing: labkit checks every op's data" in err


@pytest.mark.parametrize("flags, refusal", [
    (("-w", "5"), "-w 5: labkit sweep runs 1 untimed warm-up op per size; give -w 1 or "
                  "leave -w out"),
    (("-d", "half"), "-d half: labkit's collectives carry float (float32) elements only; "
                     "give -d float or leave -d out"),
    (("-o", "max"), "-o max: labkit's reductions add (sum) only; give -o sum or leave -o "
                    "out")])
def test_sweep_refuses_what_it_cannot_honour_in_one_line(recorded_sweep, flags, refusal):
    code, out, err = run_cli("sweep", LEAF_SPINE, *flags)
    assert code == 2 and not out and err == f"error: {refusal}\n" and not recorded_sweep


def test_sweep_help_names_nccl_tests_flags():
    text = _subparsers()["sweep"].format_help()
    for flag in ("-w N", "-n ITERS", "-c 0|1", "-d TYPE", "-o OP", "--json"):
        assert flag in text, flag
    assert "always checks" in text


@pytest.mark.parametrize("flag", ["--duration", "--seconds"])
def test_calibrate_takes_duration_and_its_old_name(monkeypatch, flag):
    asked = []

    def calibrate(*args, seconds, **kwargs):
        asked.append(seconds)
        raise runner.NotReady("stand-in")

    monkeypatch.setattr(runner, "calibrate", calibrate)
    monkeypatch.setattr(signals, "before_building", lambda: None)
    code, _, err = run_cli("calibrate", str(REPO / "topologies/bottleneck.yaml"), flag, "15")
    assert code == 1 and asked == [15.0] and "stand-in" in err


def test_tune_json_is_the_recorded_tuning_and_its_lines_go_to_stderr(monkeypatch):
    from labkit.runs.rundir import load_tuning

    tuning = load_tuning(TUNING)

    def tune(sc, sizes, iters, *, out, argv, on_row):
        for algo, rows in tuning.sweeps.items():
            for r in rows:
                on_row(algo, nccltests.Row(**r))
        return SimpleNamespace(model=tuning.model, model_path=None, path=TUNING)

    monkeypatch.setattr(runner, "tune", tune)
    monkeypatch.setattr(signals, "before_building", lambda: None)
    code, out, err = run_cli("tune", LEAF_SPINE, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.report" and doc["kind"] == "tune"
    assert doc["run_dir"] == str(TUNING) and "#       size" in err and "auto at" in err


def test_calibrate_json_gives_each_trial_and_the_advice(monkeypatch):
    from labkit.analysis.calibration import Calibration, Trial

    found = Calibration("bottleneck", 100, 800, (
        Trial(1, 100, "data/runs/a", (), 0.5), Trial(2, 200, "data/runs/b", ("CPU-bound",), 1)))
    monkeypatch.setattr(runner, "calibrate", lambda *a, **k: found)
    monkeypatch.setattr(signals, "before_building", lambda: None)
    code, out, _ = run_cli("calibrate", str(REPO / "topologies/bottleneck.yaml"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.calibrate" and doc["best"] == 1
    assert [t["held"] for t in doc["trials"]] == [True, False]
    assert doc["advice"] == found.advice and doc["scale_factor"] == 800
