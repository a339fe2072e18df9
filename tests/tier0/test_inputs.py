"""Tier 0: the inputs issue 50 found crashing, hanging or accepted wrongly, each refused in
one line (exit 2) that says what to do; and the readers' limits (labkit.model.inputs)."""

import contextlib
import io
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import pytest

from labkit.model import inputs
from labkit.model.traffic import lines
from labkit.ui import cli, serve
from tests import nobody

REPO = Path(__file__).resolve().parents[2]
BOTTLENECK = REPO / "topologies/bottleneck.yaml"
GRID = REPO / "topologies/grids/bottleneck-sizes.yaml"
SAMPLE = REPO / "data/sample/bottleneck"
TEXT = BOTTLENECK.read_text()
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def refusal(*argv) -> str:
    """The one line a command refuses its input with (exit 2, nothing on stdout)."""
    code, out, err = run_cli(*argv)
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err.strip().removeprefix("error: ")


def changed(tmp_path: Path, old: str, new: str) -> Path:
    assert old in TEXT
    path = tmp_path / "lab.yaml"
    path.write_text(TEXT.replace(old, new, 1))
    return path


WRONG = [  # (what the shipped scenario's text becomes, the key, the message)
    (("name: bottleneck", 'name: ""'), "name",
     "must be a non-empty string, got an empty string"),
    (("rate_mbps: 100,", "rate_mbps: 1e3,"), "defaults.link.rate_mbps",
     "must be a number, got the text '1e3' (YAML 1.1 reads 1e3 as text, not a number: write "
     "1000 or 1.0e+3)"),
    (("routers: [leaf1, leaf2, spine1]", "routers: [leaf1, leaf2, spine1, no]"),
     "fabric.routers[3]", "must be a non-empty string, got the boolean false (YAML 1.1 reads "
     "no, off and false so: write a name in quotes, e.g. 'no')"),
    (("vip: [{roce: true}, {dscp: 26}]", "vip: [{roce: false}]"), "lanes.vip[0].roce",
     "false is no condition (a rule cannot say 'not RoCE'): delete the key, and match the "
     "packets by a field they have (dscp, tcp_port, udp_dport, ...)"),
    (("algo: ring, ranks: gpu", "algo: halving_doubling, ranks: [g1, g2, g3, g4, g5, g6]"),
     "traffic[0].algo", "halving_doubling needs a power-of-two number of ranks, got 6: use 4 "
     "or 8 ranks, or another algorithm (ring, tree)"),
    (("    - [leaf1, spine1]", "    - [leaf1, spine1]\n    - [spine1, leaf1]"),
     "fabric.links[1]", "link spine1-leaf1 is listed twice (also fabric.links[0]; [spine1, "
     "leaf1] and [leaf1, spine1] are one link): keep one, labkit builds no parallel links"),
]


@pytest.mark.parametrize("edit, key, reason", WRONG, ids=[k for _, k, _ in WRONG])
@pytest.mark.parametrize("command", ["validate", "inspect", "run"])
def test_a_wrong_value_is_refused_by_every_command_that_reads_it(tmp_path, command, edit,
                                                                  key, reason):
    path = changed(tmp_path, *edit)
    assert refusal(command, path) == f"{path}: {key}: {reason}"


def test_a_scenario_given_as_a_grid_and_a_grid_as_a_scenario_are_named(tmp_path):
    assert refusal("batch", BOTTLENECK, "--dry-run") == (
        f"{BOTTLENECK}: <top>: this is a scenario file, not a grid (a grid names the scenario "
        "it varies under `scenario:`): `labkit run` runs it, `labkit validate` and `labkit "
        "inspect` check it")
    for command in ("inspect", "run"):
        assert refusal(command, GRID) == (
            f"{GRID}: scenario: this is a grid file, not a scenario (it varies "
            "'../bottleneck.yaml'): `labkit batch` runs it and `labkit validate` checks every "
            "point; other commands take the scenario file it names")
    assert run_cli("validate", GRID)[0] == 0  # validate takes both


def test_report_on_a_folder_of_runs_names_them(tmp_path):
    for run in ("20260101-000000-a", "20260102-000000-b"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "manifest.json").write_text("{}")
    expected = (f"{tmp_path}: a folder of 2 recorded runs (20260101-000000-a, "
                f"20260102-000000-b), not a run itself: name one, e.g. "
                f"{tmp_path / '20260102-000000-b'}")
    assert refusal("report", tmp_path) == expected
    assert refusal("figures", tmp_path, "--out", tmp_path / "figs") == expected
    one = tmp_path / "20260101-000000-a"  # a run, damaged: what it lacks is named
    assert refusal("report", one) == f"{one / 'summary.json'}: missing (an incomplete or " \
                                     "damaged run)"


def test_figures_into_a_file_is_refused_and_the_file_kept(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    assert refusal("figures", SAMPLE, "--out", taken) == (
        f"{taken} is a file, not a folder: --out names a new or empty folder for the figures")
    assert taken.read_text() == "mine"


def test_figures_into_a_folder_the_user_cannot_write():
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o555)  # as root: a folder nobody (who runs the command) cannot write
        out = Path(folder) / "figs"
        done = nobody.labkit("figures", "data/sample/bottleneck", "--out", str(out))
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"error: cannot write into {out}: Permission denied; choose a folder of your own for "
        "--out"], done.stderr


READERS = {  # a bad file of each kind, and the command that reads it
    "scenario": ("lab.yaml", ("validate",)),
    "inspect": ("lab.yaml", ("inspect",)),
    "grid": ("grid.yaml", ("batch", "--dry-run")),
}
BAD = [  # (bytes, what the line says)
    (bytes(range(256)), "holds a NUL byte at offset 0: a binary file, not text; give the YAML "
                        "or JSON file itself"),
    ("name: x\n".encode("utf-16"), "is UTF-16 text: save it as UTF-8"),
    ("name: x\n".encode("utf-16-le"), "looks like UTF-16 text (NUL bytes between the "
                                      "characters): save it as UTF-8"),
    (b"name: caf\xe9\n", "is not UTF-8 text: byte 0xe9 at line 1 (offset 9) cannot be read: "
                         "save it as UTF-8"),
    (b"[" * 5000, "line 1: nested deeper than 64 levels: labkit's files are a few levels "
                  "deep; is it the right file?"),
    (BOMB.encode(), "line 5: its aliases expand the document past 20,000 values (a YAML "
                    "alias bomb?): write the values out, or alias less"),
    (b"a: &a [1, *a]\n", "line 1: an alias refers to a node that holds it (a recursive "
                         "structure): labkit's files are plain data"),
    (b"seed: " + b"9" * 5000, "line 1: a number of 5,000 digits: no value here is that large"),
    (b"#" * (100 * 1024), "is 100 KiB, larger than the 64 KiB labkit reads of such a file: is "
                          "it the right file?"),
    (b"[" + b"1, " * 20_001 + b"1]", "line 1: holds more than 20,000 values: labkit's files "
                                    "hold hundreds; is it the right file?"),
    (b"a: 1\x08\n", "not valid YAML: character #x0008 at offset 4: control characters are "
                    "not allowed"),
]


@pytest.mark.parametrize("data, reason", BAD, ids=range(len(BAD)))
@pytest.mark.parametrize("reader", READERS)
def test_a_file_past_a_limit_is_one_line_in_well_under_a_second(tmp_path, reader, data,
                                                                reason):
    name, argv = READERS[reader]
    path = tmp_path / name
    path.write_bytes(data)
    began = time.process_time()
    assert refusal(*argv, path) == f"{path}: <top>: {reason}"
    assert time.process_time() - began < 1.0  # CPU seconds: the machine's other work aside


def test_aliases_within_the_limits_read_as_plain_data(tmp_path):
    path = changed(tmp_path, "{leaf1: [g1, g2, g3, g4]", "{leaf1: &leaf1 [g1, g2, g3, g4]")
    path.write_text(path.read_text().replace("clients: [g1, g2, g3, g4]", "clients: *leaf1"))
    assert run_cli("validate", path)[0] == 0
    _, doc = inputs.read_yaml(path)
    assert doc["traffic"][1]["clients"] == ["g1", "g2", "g3", "g4"]


def test_a_run_folder_s_json_past_a_limit_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    deep = "nested deeper than 64 levels: labkit's files are a few levels deep; is it the " \
           "right file?"
    for text, reason in [("[" * 100_000, deep), ("[" * 100 + "]" * 100, deep),
                         ('{"a": ' + "1" * 5000 + "}", "not valid JSON (Exceeds the limit "
                                                       "(4300 digits) for integer string "
                                                       "conversion: value has 5000 digits)")]:
        (run / "manifest.json").write_text(text)
        assert refusal("report", run) == f"{run / 'manifest.json'}: {reason}"
    (run / "manifest.json").write_bytes(json.dumps({"a": 1}).encode("utf-16"))
    assert refusal("report", run) == f"{run / 'manifest.json'}: is UTF-16 text: save it as UTF-8"
    with open(run / "manifest.json", "wb") as f:  # sparse: nothing is written
        f.truncate(100 << 20)
    assert refusal("report", run) == (f"{run / 'manifest.json'}: is 100 MiB, larger than the "
                                      "64 MiB labkit reads of such a file: is it the right "
                                      "file?")


def test_a_request_to_the_service_nested_too_deep_is_refused():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"[" * 100_000 + b"\n")
        with pytest.raises(serve.Refused, match="^a request is one JSON line: nested deeper "
                                                "than 64 levels: "):
            serve._read_request(b)


def test_a_program_s_line_nested_too_deep_is_counted_bad():
    """A user's program prints labkit's JSON lines: one nested past Python's stack is a
    bad line, as any other."""
    assert lines.parse('{"labkit": ' + "[" * 100_000 + "\n") == ([], [], 1)
