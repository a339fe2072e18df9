"""The command line as scripts use it: help that names every command and explains every
argument, --version, and --json documents with a named, versioned shape."""

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest

from labkit import cli

SAMPLE = Path(__file__).resolve().parents[2] / "data/sample/bottleneck"
COMMANDS = ("doctor", "run", "shell", "sweep", "tune", "calibrate", "batch", "report", "figures",
            "runs", "clean")
GRID = Path(__file__).resolve().parents[2] / "topologies/grids/bottleneck-sizes.yaml"


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse's --help and --version
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_help_names_every_command_without_markup():
    code, out, _ = run_cli("--help")
    assert code == 0 and "``" not in out
    assert all(c in out for c in COMMANDS)


def test_every_argument_has_help(monkeypatch):
    parsers = []
    real = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args",
                        lambda self, *a, **k: (parsers.append(self), real(self, *a, **k))[1])
    run_cli("runs")
    (top,) = parsers
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == set(COMMANDS)
    for name, parser in subs.choices.items():
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"labkit {name} {action.dest}: no help text"


def test_version():
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("labkit ")


def test_report_json_is_the_summary_in_a_versioned_envelope():
    code, out, _ = run_cli("report", str(SAMPLE), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.report" and doc["version"] == cli.JSON_SCHEMA
    assert doc["summary"] == json.loads((SAMPLE / "summary.json").read_text())


@pytest.mark.parametrize("argv", [("runs", "--json")])
def test_runs_json_parses(argv):
    code, out, _ = run_cli(*argv)
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.runs" and isinstance(doc["runs"], list)


def test_a_bad_run_dir_is_one_line_and_exit_2(tmp_path):
    code, out, err = run_cli("report", str(tmp_path / "nope"), "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_batch_dry_run_lists_the_points_and_a_bad_grid_is_one_line(tmp_path):
    code, out, _ = run_cli("batch", str(GRID), "--dry-run")
    assert code == 0 and "8 runs of " in out and "topologies/bottleneck.yaml" in out
    assert "traffic[kind=allreduce].size_bytes" in out and "p007" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(GRID.read_text().replace("[1MiB, 4MiB]", "[1MiB, 4XiB]").replace(
        "../bottleneck.yaml", str(GRID.parent.parent / "bottleneck.yaml")))
    code, out, err = run_cli("batch", str(bad))
    assert code == 2 and not out and err.count("\n") == 1
    assert f"{bad}: axes.traffic[kind=allreduce].size_bytes: value 4XiB (item 1)" in err
