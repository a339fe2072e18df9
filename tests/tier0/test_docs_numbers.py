"""Numbers the docs quote from a run are the shipped samples' own (the markers:
:mod:`labkit.runs.quotes`). `make samples` records the samples again and writes the quoted
numbers from them; this test names every quoted number that differs, and where.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.runs.quotes import MARKER, QUOTED, documents, requote, wrong_numbers

REPO = Path(__file__).resolve().parents[2]


def test_every_quoted_number_is_its_samples():
    problems = [p for f in documents()
                for p in wrong_numbers(f.read_text(), str(f.relative_to(REPO)))]
    assert not problems, "\n".join(problems)


def test_every_marker_follows_a_number():
    for f in documents():
        text = f.read_text()
        markers = len(MARKER.findall(text))
        assert markers == len(QUOTED.findall(text)), f"{f}: a marker without a number before it"


def test_a_number_edited_by_hand_is_caught():
    readme = (REPO / "README.md").read_text()
    m = QUOTED.search(readme)
    assert m, "README.md quotes no number from a sample"
    digits = len(m["num"].partition(".")[2])
    edited = (readme[:m.start("num")] + f"{float(m['num']) + 1:.{digits}f}"
              + readme[m.end("num"):])
    before = wrong_numbers(readme, "README.md")  # test_every_quoted_number_... names those
    (problem,) = [p for p in wrong_numbers(edited, "README.md") if p not in before]
    assert f"{m['sample']} {m['key']} is {m['num']} now" in problem


@pytest.mark.parametrize("text, problem", [
    ("5.34x<!-- tensor-parallel policies.fifo.job.slowdown_p50 -->", None),
    ("5.3x<!-- tensor-parallel policies.fifo.job.slowdown_p50 -->", None),
    ("5.35x<!-- tensor-parallel policies.fifo.job.slowdown_p50 -->", "is 5.34 now"),
    ("76 %<!-- tensor-parallel policies.fifo.job.bubble_fraction *100 -->", None),
    ("3.67 MB<!-- tensor-parallel policies.fifo.job.bottleneck_bytes_per_iteration /1e6 -->",
     None),
    ("1<!-- tensor-parallel policies.nope -->", "no such number"),
])
def test_rounding_is_the_tolerance_and_scales_apply(text, problem, tmp_path):
    (tmp_path / "tensor-parallel").mkdir()  # the numbers, not the samples of the day
    job = {"slowdown_p50": 5.3412, "bubble_fraction": 0.7604,
           "bottleneck_bytes_per_iteration": 3670016}
    (tmp_path / "tensor-parallel/summary.json").write_text(
        json.dumps({"policies": {"fifo": {"job": job}}}))
    found = wrong_numbers(text, "t", tmp_path)
    assert (found == []) if problem is None else (problem in found[0])


def test_requoting_writes_the_samples_numbers_with_the_digits_quoted(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s/summary.json").write_text(json.dumps({"a": 1.2345, "b": 0.5, "c": 7}))
    text = ("p50 1.19x<!-- s a --> and 1.2x<!-- s a -->, used 40 %<!-- s b *100 -->, "
            "7<!-- s c --> ok, 3<!-- s nope --> kept")
    new, changed = requote(text, "t.md", tmp_path)
    assert new == ("p50 1.23x<!-- s a --> and 1.2x<!-- s a -->, used 50 %<!-- s b *100 -->, "
                   "7<!-- s c --> ok, 3<!-- s nope --> kept")
    assert [(q.quoted, q.value) for q in changed] == [("1.19", "1.23"), ("40", "50"),
                                                       ("3", None)]
    assert wrong_numbers(new, "t.md", tmp_path) == [changed[-1].describe()]


DEMO_PAGE = REPO / "docs/students.md"  # "What `make demo` shows": the demo's printed tables


def _demo_block(title: str) -> list[list[str]]:
    """The rows (split on blanks) of the table block of :data:`DEMO_PAGE` whose header
    starts with ``title``, up to the block's blank line or end."""
    lines = DEMO_PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("```"):
            break
        rows.append(line.replace(" / ", " ").split())
    return rows


def _close(quoted: str, value: float | None, scale: float = 1.0) -> bool:
    if value is None:
        return quoted == "—"
    digits = len(quoted.rstrip("%").partition(".")[2])
    return abs(value * scale - float(quoted.rstrip("%"))) <= 0.5 * 10 ** -digits + 1e-9


def test_the_demos_tables_are_the_bottleneck_samples():
    """The two tables `make demo` prints, as the students' page shows them (a code block:
    no markers), are data/sample/bottleneck's."""
    policies = json.loads((REPO / "data/sample/bottleneck/summary.json").read_text())["policies"]
    first = _demo_block("policy    ops")
    second = _demo_block("policy    port")
    assert [r[0] for r in first] == [r[0] for r in second] == list(policies)
    for row in first:
        p = policies[row[0]]
        ar, lanes = p["allreduce"], p["bottleneck"]["lanes"]
        expected = [ar["ops"], ar["p50_ms"], ar["p99_ms"], ar["slowdown_p50"],
                    ar["slowdown_p99"], ar["busbw_mbps"], p["storage"]["goodput_mbps"],
                    p["bottleneck"]["utilization"] * 100, lanes["vip"]["drops"],
                    lanes["low"]["drops"]]
        assert all(map(_close, row[1:], expected)), \
            f"{DEMO_PAGE.name}'s {row[0]} row: {row[1:]} against {[round(e, 2) for e in expected]}"
    for row in second:
        p = policies[row[0]]["bottleneck"]
        lanes = p["lanes"]
        assert row[1] == p["port"]
        expected = [lanes["vip"]["sojourn_p99_us"], lanes["low"]["sojourn_p99_us"],
                    lanes["vip"]["latency_p99_us"],
                    max(la["max_backlog_bytes"] for la in lanes.values()) / 1024]
        assert all(map(_close, row[2:], expected)), f"{DEMO_PAGE.name}'s {row[0]} row: " \
            f"{row[2:]} against {[e and round(e) for e in expected]}"


def test_requoting_the_documents_rewrites_only_what_moved(tmp_path):
    from labkit.runs.quotes import requote_documents

    (tmp_path / "docs").mkdir()
    (tmp_path / "s").mkdir()
    (tmp_path / "s/summary.json").write_text(json.dumps({"a": 2.5}))
    (tmp_path / "README.md").write_text("slows 2.1x<!-- s a -->\n")
    (tmp_path / "docs/x.md").write_text("slows 2.5x<!-- s a -->\n")
    before = (tmp_path / "docs/x.md").stat().st_mtime_ns
    (moved,) = requote_documents(tmp_path, tmp_path)
    assert (moved.where, moved.line, moved.value) == ("README.md", 1, "2.5")
    assert (tmp_path / "README.md").read_text() == "slows 2.5x<!-- s a -->\n"
    assert (tmp_path / "docs/x.md").stat().st_mtime_ns == before


def test_requoting_a_notebooks_script_requotes_its_paired_notebook(tmp_path):
    """jupytext pairs notebooks/<name>.py with <name>.ipynb: both get the new numbers, so
    the pair still agrees (test_notebooks)."""
    import nbformat

    from labkit.runs.quotes import requote_documents

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "s").mkdir()
    (tmp_path / "s/summary.json").write_text(json.dumps({"a": 2.5}))
    (tmp_path / "README.md").write_text("")
    cell = "It slows 2.1x<!-- s a --> under fifo."
    (tmp_path / "notebooks/n.py").write_text(f"# %% [markdown]\n# {cell}\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(cell)]),
                   tmp_path / "notebooks/n.ipynb")
    (moved,) = requote_documents(tmp_path, tmp_path)
    assert (moved.where, moved.value) == ("notebooks/n.py", "2.5")
    assert "2.5x<!-- s a -->" in (tmp_path / "notebooks/n.py").read_text()
    (again,) = nbformat.read(tmp_path / "notebooks/n.ipynb", as_version=4).cells
    assert again.source == cell.replace("2.1x", "2.5x")


def test_labkit_samples_quotes_prints_what_moved_and_what_names_nothing(
        tmp_path, monkeypatch, capsys):
    from labkit.runs import quotes
    from labkit.ui import cli

    (tmp_path / "s").mkdir()
    (tmp_path / "s/summary.json").write_text(json.dumps({"a": 2.5}))
    (tmp_path / "README.md").write_text("slows 2.5x<!-- s a -->\n")
    here = quotes.requote_documents
    monkeypatch.setattr(quotes, "requote_documents", lambda: here(tmp_path, tmp_path))
    assert cli.main(["samples", "--quotes"]) == 0
    assert "the docs' quoted numbers are the samples' own" in capsys.readouterr().out
    (tmp_path / "README.md").write_text("slows 2.1x<!-- s a -->, 3 s<!-- s b -->\n")
    assert cli.main(["samples", "--quotes"]) == 1
    out, error = capsys.readouterr()
    assert "README.md:1: 2.1x → 2.5x (s a)" in out and "1 written again" in out
    assert "README.md:1: 3 s<!-- s b -->: no such number" in error
