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


def value_of(sample: str, key: str) -> float:
    doc = json.loads((REPO / "data/sample" / sample / "summary.json").read_text())
    for part in key.split("."):
        doc = doc[part]
    if not isinstance(doc, int | float) or isinstance(doc, bool):
        raise TypeError(f"{sample} {key} is {doc!r}, not a number")
    return float(doc)


def wrong_numbers(text: str, where: str) -> list[str]:
    """Every quoted number in ``text`` that is not its sample's value, as a line saying
    where, what is quoted and what the sample holds."""
    problems = []
    for m in QUOTED.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        quoted = m["num"]
        try:
            value = value_of(m["sample"], m["key"])
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
    edited = readme[:m.start("num")] + str(float(m["num"]) + 1) + readme[m.end("num"):]
    (problem,) = wrong_numbers(edited, "README.md")
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
def test_rounding_is_the_tolerance_and_scales_apply(text, problem):
    found = wrong_numbers(text, "t")
    assert (found == []) if problem is None else (problem in found[0])
