"""Property: whatever bytes a user hands labkit, every reader answers in one line, in
bounded time. Arbitrary bytes, YAML-like text and adversarial files (alias bombs, deep
nesting, UTF-16/32, invalid UTF-8, NUL and control characters, huge scalars and numbers,
files past the size limit) go to each reader through its command: a scenario
(``labkit validate``, ``labkit inspect``), a grid (``labkit batch --dry-run``), a run
folder's manifest.json and summary.json (``labkit report``; also hostile values at any
place of a real sample's documents), and through the library, samples.yaml
(:class:`~labkit.runs.samples.SamplesError`) and a lab submission
(:class:`~labkit.model.inputs.InputError`). A command answers exit 2 with one line on
stderr (or exit 0: the input was good); the library raises its one-line error type.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.model import inputs
from labkit.runs import samples
from labkit.ui import cli
from labkit.ui.labs import notebook

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data/sample/bottleneck"
SECONDS = 2.0  # the most CPU time any one answer may take (most take milliseconds; CPU
# time, so that the machine's other work does not count)
EXAMPLES = 40  # per reader and strategy

BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
SCENARIO = (REPO / "topologies/bottleneck.yaml").read_bytes()  # a valid one, to spoil
MERGE_BOMB = "a0: &a0 {k0: x}\n" + "".join(
    f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(9))}}}\n" for i in range(1, 10))
ADVERSARIAL: dict[str, bytes] = {
    "alias bomb": BOMB.encode(),
    "mapping bomb": MERGE_BOMB.encode(),
    "merge keys": b"base: &b {x: 1}\n" + b"".join(b"m%d: {<<: *b}\n" % i for i in range(50)),
    "recursive alias": b"a: &a [1, *a]\n",
    "recursive mapping": b"a: &a {b: *a}\n",
    "deep flow list": b"[" * 5000,
    "deep flow mapping": b"{a: " * 5000,
    "deep block": b"".join(b" " * i + b"-\n" for i in range(200)),
    "deep closed": b"[" * 70 + b"]" * 70,
    "huge scalar": b"name: " + b"x" * 200_000 + b"\n",
    "huge number": b"seed: " + b"9" * 5000 + b"\n",
    "huge float": b"scale_factor: 1." + b"9" * 5000 + b"e+99999\n",
    "many keys": b"".join(b"k%d: %d\n" % (i, i) for i in range(5000)),
    "past the limit": b"#" * (inputs.YAML_BYTES + 1),
    "two documents": b"a: 1\n---\nb: 2\n",
    "python tag": b"!!python/object/apply:os.system [true]\n",
    "bad timestamp": b"a: !!timestamp 2020-99-99\n",
    "bad base64": b"a: !!binary '@@@'\n",
    "unhashable key": b"{[a]: 1}\n",
    "null key": b"{null: 1, ~: 2}\n",
    "utf-16": "name: lab\n".encode("utf-16"),
    "utf-16 without bom": "name: lab\n".encode("utf-16-le"),
    "utf-32": "name: lab\n".encode("utf-32"),
    "utf-8 bom": b"\xef\xbb\xbfname: lab\n",
    "invalid utf-8": b"name: caf\xe9\n",
    "nul": b"name: lab\x00\n",
    "control character": b"name: lab\x1b[31m\n",
    "empty": b"",
    "comment only": b"# nothing\n",
    "deep json": b"[" * 100_000,
    "huge json number": b'{"a": ' + b"1" * 5000 + b"}",
    "json nan": b'{"a": NaN, "b": -Infinity}',
    "a scenario with a bomb": SCENARIO + BOMB.encode(),
    "a scenario's huge name": SCENARIO.replace(b"name: bottleneck", b"name: " + b"x" * 200_000),
    "a scenario's deep value": SCENARIO.replace(b"seed: 1", b"seed: " + b"[" * 5000),
    "a scenario's huge number": SCENARIO.replace(b"seed: 1", b"seed: " + b"9" * 5000),
    "a scenario with a key twice": SCENARIO + b"seed: 2\n",
}
YAMLISH = st.text(alphabet=st.sampled_from(list("[]{}:,-?&*!|>'\"#%@` \t\nabcxyz019._+~<=")),
                  max_size=300).map(str.encode)
BYTES = st.one_of(st.binary(max_size=600), YAMLISH)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=30).map(lambda doc: json.dumps(doc).encode())


def cli_answer(*argv: str | Path) -> tuple[int, str]:
    """``labkit *argv`` in this process: (exit code, stderr), timed."""
    out, err = io.StringIO(), io.StringIO()
    began = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    assert time.process_time() - began < SECONDS, f"labkit {argv[0]} took too long"
    return code, err.getvalue()


def one_line_or_accepted(code: int, err: str) -> None:
    if code == 0:
        return
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert len(lines[0]) < 2 * inputs.MAX_LINE, "a line too long to read"


def library_answer(read: Callable[[], object], error: type[Exception]) -> None:
    """``read()`` returns, or raises ``error`` with one line; in bounded time."""
    began = time.process_time()
    try:
        read()
    except error as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)
    assert time.process_time() - began < SECONDS


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def scenario_file(folder: Path, data: bytes) -> Path:
    path = folder / "lab.yaml"
    path.write_bytes(data)
    return path


READERS: dict[str, Callable[[Path, bytes], None]] = {}


def reader(name: str):
    def keep(fn):
        READERS[name] = fn
        return fn
    return keep


@reader("scenario")
def validate(folder: Path, data: bytes) -> None:
    one_line_or_accepted(*cli_answer("validate", scenario_file(folder, data)))


@reader("inspect")
def inspect(folder: Path, data: bytes) -> None:
    one_line_or_accepted(*cli_answer("inspect", scenario_file(folder, data)))


@reader("grid")
def batch(folder: Path, data: bytes) -> None:
    path = folder / "grid.yaml"
    path.write_bytes(data)
    one_line_or_accepted(*cli_answer("batch", path, "--dry-run"))


def run_folder(folder: Path, manifest: bytes, summary: bytes) -> Path:
    """A copy of the bottleneck sample (its tables linked) with these two documents."""
    run = folder / "run"
    if not run.is_dir():
        run.mkdir()
        for table in SAMPLE.glob("*.parquet"):
            (run / table.name).symlink_to(table)
    (run / "manifest.json").write_bytes(manifest)
    (run / "summary.json").write_bytes(summary)
    return run


@reader("run folder")
def report(folder: Path, data: bytes) -> None:
    real = {name: (SAMPLE / name).read_bytes() for name in ("manifest.json", "summary.json")}
    for manifest, summary in ((data, data), (data, real["summary.json"]),
                              (real["manifest.json"], data)):
        one_line_or_accepted(*cli_answer("report", run_folder(folder, manifest, summary)))


@reader("samples.yaml")
def samples_file(folder: Path, data: bytes) -> None:
    path = folder / "samples.yaml"
    path.write_bytes(data)
    library_answer(lambda: samples.load(path), samples.SamplesError)


@reader("lab submission")
def submission(folder: Path, data: bytes) -> None:
    for name in ("lab1-find-the-bottleneck.ipynb", "lab1-find-the-bottleneck.py"):
        path = folder / "student" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        library_answer(lambda p=path: notebook.read(p), inputs.InputError)


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.mark.parametrize("name", READERS)
@FUZZ
@given(data=BYTES)
def test_arbitrary_bytes_get_one_line_in_bounded_time(folder, name, data):
    READERS[name](folder, data)


@pytest.mark.parametrize("name", READERS)
@FUZZ
@given(data=JSONISH)
def test_arbitrary_json_gets_one_line_in_bounded_time(folder, name, data):
    READERS[name](folder, data)


@pytest.mark.parametrize("case", ADVERSARIAL)
@pytest.mark.parametrize("name", READERS)
def test_an_adversarial_file_gets_one_line_in_bounded_time(folder, name, case):
    READERS[name](folder, ADVERSARIAL[case])


def places(doc, path=()):
    """Every place in a JSON document: (path of keys and indices, value)."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for k, v in items:
        yield from places(v, (*path, k))


DOCUMENTS = {name: json.loads((SAMPLE / name).read_text())
             for name in ("manifest.json", "summary.json")}
HOSTILE = [None, True, "", "x\n", {"x": 1}, [], [[1, 2]], -1, 0, 10**30, 1e308, "nan", 1.5,
           "2026-13-45T99:99:99"]


@FUZZ
@given(data=st.data())
def test_a_hostile_value_in_a_run_s_documents_gets_one_line(folder, data):
    """A real sample's manifest.json or summary.json with one value changed: the report
    (which loads the whole run) prints, or refuses in one line."""
    name = data.draw(st.sampled_from(sorted(DOCUMENTS)))
    doc = copy.deepcopy(DOCUMENTS[name])
    path = data.draw(st.sampled_from([p for p, _ in places(doc) if p]))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = copy.deepcopy(data.draw(st.sampled_from(HOSTILE)))
    other = "summary.json" if name == "manifest.json" else "manifest.json"
    docs = {name: json.dumps(doc).encode(), other: (SAMPLE / other).read_bytes()}
    one_line_or_accepted(*cli_answer("report", run_folder(folder, docs["manifest.json"],
                                                          docs["summary.json"])))
