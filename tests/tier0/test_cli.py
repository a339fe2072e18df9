"""The command line as scripts use it: help that names every command and explains every
argument, --version, and --json documents with a named, versioned shape."""

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

import labkit
from labkit.model import scenario as scenario_mod
from labkit.ui import cli
from labkit.ui.cli.output import JSON_SCHEMA
from tests import nobody
from tests.leaks import without_leftovers_note

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data/sample/bottleneck"
COMMANDS = ("doctor", "validate", "inspect", "schema", "run", "shell", "sweep", "tune", "calibrate",
            "batch", "report", "figures", "runs", "samples", "lab", "labs", "serve", "clean")
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
    assert code == 0 and doc["schema"] == "labkit.report" and doc["version"] == JSON_SCHEMA
    assert doc["summary"] == json.loads((SAMPLE / "summary.json").read_text())


def test_report_prints_a_sweep_again_as_nccl_tests_does(tmp_path):
    old = REPO / "tests/tier0/recorded/sweep-ring-20261129"  # before sweeps kept a manifest
    rows = json.loads((old / "sweep.json").read_text())
    code, out, _ = run_cli("report", str(old))
    lines = out.splitlines()
    assert code == 0 and "before sweeps kept a manifest" in lines[0]
    assert lines[2].startswith("#       size        count    type")
    body = [line.split() for line in lines[4:4 + len(rows)]]
    assert [int(b[0]) for b in body] == [r["size"] for r in rows]
    assert [float(b[7]) for b in body] == [round(r["busbw_mbps"], 2) for r in rows]
    assert "# Out of bounds values : 0 OK" in out
    sweep = tmp_path / "sweep"  # one recorded with its manifest
    sweep.mkdir()
    shutil.copy(old / "sweep.json", sweep)
    shutil.copy(REPO / "tests/tier0/manifests/sweep-complete.json", sweep / "manifest.json")
    code, out, _ = run_cli("report", str(sweep))
    manifest = json.loads((sweep / "manifest.json").read_text())
    assert code == 0 and out.startswith(f"# labkit sweep {manifest['run_id']}: "
                                        f"{manifest['op']} ({manifest['algo']})")
    code, out, _ = run_cli("report", str(sweep), "--json")
    doc = json.loads(out)
    assert (doc["kind"], doc["status"], doc["rows"]) == ("sweep", manifest["status"], rows)
    (sweep / "sweep.json").write_text('[{"size": 1}]')
    code, out, err = run_cli("report", str(sweep))
    assert code == 2 and not out and "sweep.json: a row does not fit" in err


def test_report_shows_a_transport_runs_flows_and_names_each_port_one_way():
    code, out, _ = run_cli("report", str(REPO / "data/sample/dctcp-paper/dctcp"))
    assert code == 0 and "r1/" not in out and out.count("r1-eth1") >= 2
    flows = out[out.index("TCP flows (lk_dctcp)"):].splitlines()
    goodputs = [f"{f.mbps:.1f}" for f in labkit.load_run(
        REPO / "data/sample/dctcp-paper/dctcp").summary.policies["fifo"].tcp.flows.values()]
    assert [line.split("│")[4].strip() for line in flows[4:6]] == goodputs  # the summary's
    code, out, _ = run_cli("report", str(REPO / "data/sample/tune/leaf-spine"))
    assert code == 0 and "time = alpha + size / beta" in out
    code, out, _ = run_cli("report", str(REPO / "data/sample/tune/leaf-spine"), "--json")
    doc = json.loads(out)
    assert doc["kind"] == "tune" and set(doc["model"]["algos"]) == {
        "ring", "tree", "halving_doubling"}


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
    assert code == 0 and doc["schema"] == "labkit.validate" and doc["version"] == JSON_SCHEMA
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


def with_a_kind_of_yours(directory: Path) -> Path:
    """bottleneck.yaml with an entry of a traffic kind whose file leaves `ran` if imported."""
    (directory / "kind.py").write_text("import pathlib\n"
                                       "pathlib.Path(__file__).with_name('ran').touch()\n")
    doc = yaml.safe_load(BOTTLENECK.read_text())
    doc["kinds"] = {"incast": "kind.py:Incast"}
    doc["traffic"].append({"kind": "incast", "senders": "gpu"})
    (directory / "lab.yaml").write_text(yaml.safe_dump(doc))
    return directory / "lab.yaml"


def test_validate_and_a_dry_run_run_no_code_of_yours(tmp_path):
    code, out, err = run_cli("validate", str(with_a_kind_of_yours(tmp_path)))
    assert code == 0 and "incast" in out and not (tmp_path / "ran").exists(), err
    grid = tmp_path / "grid.yaml"
    grid.write_text("scenario: lab.yaml\naxes: {defaults.link.rate_mbps: [50, 100]}\n")
    code, out, err = run_cli("batch", str(grid), "--dry-run")
    assert code == 0 and "2 runs of " in out and not (tmp_path / "ran").exists(), err


def test_a_run_says_which_files_of_yours_it_loads_then_loads_them(tmp_path):
    """At run start, not before: the kind's file is imported (it leaves `ran`), and its
    class, missing, is refused by key before anything is built."""
    lab = with_a_kind_of_yours(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "run", str(lab)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and (tmp_path / "ran").exists(), proc.stderr
    kind = tmp_path / "kind.py"
    assert without_leftovers_note(proc.stderr.splitlines()) == [
        f"loading your traffic kind incast: {kind}:Incast (it runs as root)",
        f"error: {lab}: kinds.incast: {kind} defines no Incast"]


def run_unprivileged(*argv: str) -> subprocess.CompletedProcess:
    """``labkit *argv`` as nobody when the tests run as root (else as the unprivileged user
    running them); its files must be in a directory anyone can read."""
    return nobody.labkit(*argv)


def test_validate_works_as_an_unprivileged_user():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        good, bad = Path(tmp, "lab.yaml"), Path(tmp, "bad.yaml")
        good.write_text(BOTTLENECK.read_text())
        bad.write_text(INFINITE)
        ok, refused = (run_unprivileged("validate", str(path)) for path in (good, bad))
    assert ok.returncode == 0 and ok.stdout.startswith(f"{good}: ok, "), ok.stderr
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: {bad}: {REFUSED}"], refused.stderr


def test_schema_prints_the_json_schema():
    from labkit.model.schema import scenario_schema

    code, out, _ = run_cli("schema")
    assert code == 0 and json.loads(out) == scenario_schema()


def test_inspect_shows_every_host_with_its_address_and_the_bottleneck():
    from labkit.model.topo import Topology

    topo = Topology(scenario_mod.load(BOTTLENECK).fabric)
    code, out, err = run_cli("inspect", str(BOTTLENECK))
    assert code == 0 and not err
    for host in topo.hosts:
        assert re.search(rf"│ {host} .*│ {host}-eth0 +│ {topo.host_ip(host)}/24 ", out), host
    assert "bottleneck leaf1-spine1: 100 Mbit/s (400 Gbit/s real), MTU 9000, buffer 1024 KiB " \
           "per egress port (leaf1-eth4 → spine1, spine1-eth0 → leaf1)" in out
    assert "spine1 │ g1 g2 g3 g4     │ leaf1 10.1.1.1" in out  # a route
    code, out, _ = run_cli("inspect", str(BOTTLENECK), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "labkit.inspect" and doc["version"] == JSON_SCHEMA
    hosts = {n["name"]: n for n in doc["nodes"] if n["kind"] == "host"}
    assert {h: n["ports"][0]["address"] for h, n in hosts.items()} == {
        h: f"{topo.host_ip(h)}/24" for h in topo.hosts}
    assert (hosts["st1"]["role"], hosts["st1"]["router"]) == ("storage", "leaf2")
    (b,) = doc["bottlenecks"]
    assert (b["link"], b["rate_mbps"], b["buffer_kb"]) == ("leaf1-spine1", 100, 1024)
    assert [p["ifname"] for p in b["ports"]] == ["leaf1-eth4", "spine1-eth0"]
    g1_g5 = next(p for p in doc["paths"] if (p["src"], p["dst"]) == ("g1", "g5"))
    assert g1_g5["nodes"] == ["g1", "leaf1", "spine1", "leaf2", "g5"] and g1_g5["ways"] == 1


def test_inspect_counts_ecmp_paths():
    code, out, _ = run_cli("inspect", str(REPO / "topologies/leaf-spine.yaml"), "--json")
    doc = json.loads(out)
    g1_g5 = next(p for p in doc["paths"] if (p["src"], p["dst"]) == ("g1", "g5"))
    assert code == 0 and g1_g5["ways"] == 2
    (leaf1,) = [r for r in doc["routes"]["leaf1"] if r["hosts"] == ["g5"]]
    assert leaf1["via"] == ["spine1", "spine2"]


def test_inspect_shows_the_dscp_rule_of_a_program(tmp_path):
    doc = yaml.safe_load((REPO / "topologies/pytorch-ddp.yaml").read_text())
    doc["lanes"]["vip"] = [{"roce": True}]  # the DSCP rule is then the program's alone
    (tmp_path / "ddp.yaml").write_text(yaml.safe_dump(doc))
    code, out, err = run_cli("inspect", str(tmp_path / "ddp.yaml"))
    assert code == 0 and not err
    assert "│ 1 │ vip    │ DSCP 26 " in out and "program ddp" in out
    code, out, _ = run_cli("inspect", str(tmp_path / "ddp.yaml"), "--json")
    first = json.loads(out)["lanes"]["rules"][0]
    assert (first["lane"], first["dscp"], first["text"]) == ("vip", 26, "DSCP 26")
    assert first["added_by"].startswith("traffic[0]: ")


def test_inspect_draws_the_fabric_into_a_page(tmp_path):
    page = tmp_path / "out" / "fabric.html"
    code, out, err = run_cli("inspect", str(BOTTLENECK), "--html", str(page))
    html = page.read_text().encode().decode("unicode_escape")  # plotly writes "/" as \u002f
    assert code == 0 and f"drew the fabric into {page}" in out, err
    assert '<script charset="utf-8" src="plotly.min.js">' in html and "cdn.plot.ly" not in html
    assert 'id="fabric"' in html and "Plotly.newPlot" in html
    assert "leaf1-spine1</b> · bottleneck" in html and "g1-eth0 10.0.1.2/24" in html
    assert (page.parent / "plotly.min.js").stat().st_size > 1_000_000


def test_inspect_runs_no_code_of_yours(tmp_path):
    code, out, err = run_cli("inspect", str(with_a_kind_of_yours(tmp_path)))
    assert code == 0 and "bottleneck leaf1-spine1" in out and not (tmp_path / "ran").exists()


def test_inspect_refuses_a_bad_scenario_with_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(INFINITE)
    for extra in ((), ("--json",)):
        code, out, err = run_cli("inspect", str(bad), *extra)
        assert code == 2 and not out and err.splitlines() == [f"error: {bad}: {REFUSED}"]


def test_inspect_works_as_an_unprivileged_user():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # nobody writes the page into it
        lab, page = Path(tmp, "lab.yaml"), Path(tmp, "fabric.html")
        lab.write_text(BOTTLENECK.read_text())
        shown = run_unprivileged("inspect", str(lab), "--html", str(page))
        doc = run_unprivileged("inspect", str(lab), "--json")
        assert shown.returncode == 0 and "bottleneck leaf1-spine1" in shown.stdout, shown.stderr
        assert "10.0.9.2/24" in shown.stdout and page.is_file()
    assert doc.returncode == 0 and json.loads(doc.stdout)["schema"] == "labkit.inspect"
