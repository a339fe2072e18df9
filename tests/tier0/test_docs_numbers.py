"""Numbers the docs quote from a run are the shipped samples' own.

A measured number in README.md, docs/*.md or a notebook's text carries, right after it and
its unit, an HTML comment that names where it comes from (rendered Markdown hides it)::

    slows it 5.34x<!-- tensor-parallel policies.fifo.job.slowdown_p50 -->

the sample (a folder of ``data/sample/``) and the key path in its summary.json (dots between
keys); ``*100`` or ``/1e6`` after the key scales the value (a fraction quoted in %, bytes in
MB). The quoted number must be the value rounded to the digits quoted: that is the
tolerance. `make samples` records the samples again; this test then names every quoted
number that moved, and where.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUOTED = re.compile(r"(?P<num>-?\d+(?:\.\d+)?)(?P<unit>[^<\d\n]{0,12}?)"
                    r"<!-- (?P<sample>[\w./-]+) (?P<key>[^ ]+)(?: (?P<scale>[*/][\d.e+-]+))? -->")
MARKER = re.compile(r"<!-- [\w./-]+ [^ ]+(?: [*/][\d.e+-]+)? -->")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "notebooks").glob("*.py"))]


def value_of(sample: str, key: str, root: Path = REPO / "data/sample") -> float:
    doc = json.loads((root / sample / "summary.json").read_text())
    for part in key.split("."):
        doc = doc[part]
    if not isinstance(doc, int | float) or isinstance(doc, bool):
        raise TypeError(f"{sample} {key} is {doc!r}, not a number")
    return float(doc)


def wrong_numbers(text: str, where: str, root: Path = REPO / "data/sample") -> list[str]:
    """Every quoted number in ``text`` that is not its sample's value (in ``root``), as a
    line saying where, what is quoted and what the sample holds."""
    problems = []
    for m in QUOTED.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        quoted = m["num"]
        try:
            value = value_of(m["sample"], m["key"], root)
        except (OSError, KeyError, TypeError) as exc:
            problems.append(f"{where}:{line}: {m.group(0)}: no such number ({exc})")
            continue
        if m["scale"]:
            factor = float(m["scale"][1:])
            value = value * factor if m["scale"][0] == "*" else value / factor
        digits = len(quoted.partition(".")[2])
        if abs(value - float(quoted)) > 0.5 * 10 ** -digits + 1e-9:
            problems.append(f"{where}:{line}: quotes {quoted}{m['unit']}, but {m['sample']} "
                            f"{m['key']} is {value:.{digits}f} now")
    return problems


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


def _readme_block(title: str) -> list[list[str]]:
    """The rows (split on blanks) of the README's table block whose header starts with
    ``title``, up to the block's blank line or end."""
    lines = (REPO / "README.md").read_text().splitlines()
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


def test_the_readmes_tables_are_the_bottleneck_samples():
    """The tour's two tables (a code block: no markers) are data/sample/bottleneck's."""
    policies = json.loads((REPO / "data/sample/bottleneck/summary.json").read_text())["policies"]
    first = _readme_block("policy    ops")
    second = _readme_block("policy    port")
    assert [r[0] for r in first] == [r[0] for r in second] == list(policies)
    for row in first:
        p = policies[row[0]]
        ar, lanes = p["allreduce"], p["bottleneck"]["lanes"]
        expected = [ar["ops"], ar["p50_ms"], ar["p99_ms"], ar["slowdown_p50"],
                    ar["slowdown_p99"], ar["busbw_mbps"], p["storage"]["goodput_mbps"],
                    p["bottleneck"]["utilization"] * 100, lanes["vip"]["drops"],
                    lanes["low"]["drops"]]
        assert all(map(_close, row[1:], expected)), f"README's {row[0]} row: {row[1:]} " \
            f"against {[round(e, 2) for e in expected]}"
    for row in second:
        p = policies[row[0]]["bottleneck"]
        lanes = p["lanes"]
        assert row[1] == p["port"]
        expected = [lanes["vip"]["sojourn_p99_us"], lanes["low"]["sojourn_p99_us"],
                    lanes["vip"]["latency_p99_us"],
                    max(la["max_backlog_bytes"] for la in lanes.values()) / 1024]
        assert all(map(_close, row[2:], expected)), f"README's {row[0]} row: {row[2:]} " \
            f"against {[e and round(e) for e in expected]}"
