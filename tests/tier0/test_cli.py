"""The command line as scripts use it: help that names every command and explains every
argument, --version, and --json documents with a named, versioned shape."""

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from labkit import cli

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data/sample/bottleneck"
COMMANDS = ("doctor", "validate", "schema", "run", "shell", "sweep", "tune", "calibrate",
            "batch", "report", "figures", "runs", "clean")
GRID = REPO / "topologies/grids/bottleneck-sizes.yaml"
BOTTLENECK = REPO / "topologies/bottleneck.yaml"
INFINITE = BOTTLENECK.read_text().replace("compute_ms: 100", "compute_ms: .inf")
REFUSED = "traffic[0].compute_ms: must be between 0 and 60000, got inf"


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


@pytest.mark.parametrize("path", [BOTTLENECK, GRID], ids=["scenario", "grid"])
def test_validate_says_ok_with_exit_0(path):
    code, out, err = run_cli("validate", str(path))
    assert code == 0 and out.startswith(f"{path}: ok, ") and not err
    code, out, _ = run_cli("validate", str(path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.validate" and doc["version"] == cli.JSON_SCHEMA
    assert (doc["ok"], doc["file"], doc["key"], doc["reason"]) == (True, str(path), None, None)


def test_validate_refuses_with_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(INFINITE)
    code, out, err = run_cli("validate", str(bad))
    assert code == 2 and not out and err.splitlines() == [f"error: {bad}: {REFUSED}"]
    code, out, err = run_cli("validate", str(bad), "--json")
    doc = json.loads(out)
    assert code == 2 and not err and doc["ok"] is False and doc["file"] == str(bad)
    assert f"{doc['key']}: {doc['reason']}" == REFUSED


def test_validate_runs_no_code_of_yours(tmp_path):
    (tmp_path / "kind.py").write_text("import pathlib\n"
                                      "pathlib.Path(__file__).with_name('ran').touch()\n")
    doc = yaml.safe_load(BOTTLENECK.read_text())
    doc["kinds"] = {"incast": "kind.py:Incast"}
    doc["traffic"].append({"kind": "incast", "senders": "gpu"})
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(doc))
    code, out, err = run_cli("validate", str(tmp_path / "lab.yaml"))
    assert code == 0 and "incast" in out and not (tmp_path / "ran").exists(), err


def test_validate_works_as_an_unprivileged_user():
    """As nobody when the tests run as root (else as the unprivileged user running them),
    on files in a directory anyone can read."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env",
                 "HOME=/tmp"] if os.geteuid() == 0 else []
    if as_nobody and not shutil.which("setpriv"):
        pytest.fail("setpriv (util-linux) is needed to drop root")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        good, bad = Path(tmp, "lab.yaml"), Path(tmp, "bad.yaml")
        good.write_text(BOTTLENECK.read_text())
        bad.write_text(INFINITE)
        ok, refused = (subprocess.run([*as_nobody, sys.executable, "-m", "labkit.cli",
                                       "validate", str(path)], cwd=REPO, capture_output=True,
                                      text=True, timeout=60) for path in (good, bad))
    assert ok.returncode == 0 and ok.stdout.startswith(f"{good}: ok, "), ok.stderr
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: {bad}: {REFUSED}"], refused.stderr


def test_schema_prints_the_json_schema():
    from labkit.schema import scenario_schema

    code, out, _ = run_cli("schema")
    assert code == 0 and json.loads(out) == scenario_schema()
