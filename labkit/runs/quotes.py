"""The numbers the docs quote from the shipped samples: checked against them, and written
again from them after ``labkit samples`` records them.

A measured number in README.md, docs/*.md or a notebook's source carries, right after it
and its unit, an HTML comment naming where it comes from (rendered Markdown hides it)::

    slows it 5.34x<!-- tensor-parallel policies.fifo.job.slowdown_p50 -->

the sample (a folder of ``data/sample/``) and the key path in its summary.json (dots
between keys); ``*100`` or ``/1e6`` after the key scales the value (a fraction quoted in
%, bytes in MB). The quoted number is the value rounded to the digits quoted: that is its
tolerance, and rewriting keeps those digits, so a new recording shows up in ``git diff``
as the numbers that moved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from labkit.model import inputs, paths

QUOTED = re.compile(r"(?P<num>-?\d+(?:\.\d+)?)(?P<unit>[^<\d\n]{0,12}?)"
                    r"<!-- (?P<sample>[\w./-]+) (?P<key>[^ ]+)(?: (?P<scale>[*/][\d.e+-]+))? -->")
MARKER = re.compile(r"<!-- [\w./-]+ [^ ]+(?: [*/][\d.e+-]+)? -->")


def documents(repo: Path | None = None) -> list[Path]:
    """The files that may quote samples: README.md, docs/*.md, the notebooks' sources (of
    the checkout ``repo``, default :func:`labkit.model.paths.current`'s)."""
    repo = paths.current().repo if repo is None else repo
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md")),
            *sorted((repo / "notebooks").glob("*.py"))]


def value_of(sample: str, key: str, root: Path | None = None) -> float:
    """``key`` (dotted) of ``root/sample/summary.json`` (``root``: default the samples'
    folder, :func:`labkit.model.paths.current`'s); InputError (the file missing or
    unreadable), KeyError or TypeError when there is no such number."""
    doc = inputs.read_json((root or paths.current().samples) / sample / "summary.json")
    for part in key.split("."):
        doc = doc[part]
    if not isinstance(doc, int | float) or isinstance(doc, bool):
        raise TypeError(f"{sample} {key} is {doc!r}, not a number")
    return float(doc)


@dataclass(frozen=True)
class Quote:
    """One marked number of a text: where, what is quoted, and its sample's value rounded
    as quoted (``None`` when the sample has no such number: ``problem`` says why)."""

    where: str
    line: int
    start: int  # of the number, in the text
    end: int
    quoted: str
    unit: str
    sample: str
    key: str
    value: str | None
    exact: float | None = None  # the value unrounded (scaled)
    problem: str = ""

    @property
    def wrong(self) -> bool:
        """No such number, or one more than half the quoted last digit away."""
        if self.exact is None:
            return True
        digits = len(self.quoted.partition(".")[2])
        return abs(self.exact - float(self.quoted)) > 0.5 * 10 ** -digits + 1e-9

    def describe(self) -> str:
        if self.value is None:
            return (f"{self.where}:{self.line}: {self.quoted}{self.unit}<!-- {self.sample} "
                    f"{self.key} -->: no such number ({self.problem})")
        return (f"{self.where}:{self.line}: quotes {self.quoted}{self.unit}, but "
                f"{self.sample} {self.key} is {self.value} now")


def quotes(text: str, where: str, root: Path | None = None) -> list[Quote]:
    """Every marked number of ``text`` (``where``: its file, for messages)."""
    found = []
    for m in QUOTED.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        digits = len(m["num"].partition(".")[2])
        try:
            value = value_of(m["sample"], m["key"], root)
        except (inputs.InputError, KeyError, TypeError) as exc:
            found.append(Quote(where, line, m.start("num"), m.end("num"), m["num"],
                               m["unit"], m["sample"], m["key"], None, problem=str(exc)))
            continue
        if m["scale"]:
            factor = float(m["scale"][1:])
            value = value * factor if m["scale"][0] == "*" else value / factor
        rounded = f"{value + 1e-9 if value >= 0 else value - 1e-9:.{digits}f}"  # half away
        found.append(Quote(where, line, m.start("num"), m.end("num"), m["num"], m["unit"],
                           m["sample"], m["key"], rounded, value))
    return found


def wrong_numbers(text: str, where: str, root: Path | None = None) -> list[str]:
    """Every marked number of ``text`` that is not its sample's value, as a line saying
    where, what is quoted and what the sample holds."""
    return [q.describe() for q in quotes(text, where, root) if q.wrong]


def requote(text: str, where: str, root: Path | None = None) -> tuple[str, list[Quote]]:
    """``text`` with every marked number written from its sample (same digits), and the
    quotes that changed; a marker whose sample has no such number is left as it is (and
    among them: ``value`` None)."""
    changed = [q for q in quotes(text, where, root) if q.wrong]
    for q in sorted(changed, key=lambda q: q.start, reverse=True):
        if q.value is not None:
            text = text[:q.start] + q.value + text[q.end:]
    return text, changed


def paired(path: Path) -> Path | None:
    """The ``.ipynb`` a notebook's percent script (``notebooks/*.py``) is paired with by
    jupytext, if there is one: it holds the same marked numbers, in JSON."""
    notebook = path.with_suffix(".ipynb")
    return notebook if path.suffix == ".py" and notebook.exists() else None


def requote_documents(repo: Path | None = None, root: Path | None = None) -> list[Quote]:
    """Write every document's marked numbers (of the checkout ``repo``) from the samples
    under ``root`` (defaults: :func:`labkit.model.paths.current`'s); the quotes that
    changed (those with no such number are left, and returned too). A notebook's ``.ipynb``
    gets its script's numbers too, so the pair stays in step (a number's digits need no
    escaping in JSON)."""
    repo = paths.current().repo if repo is None else repo
    changed = []
    for path in documents(repo):
        text = path.read_text()
        new, mine = requote(text, str(path.relative_to(repo)), root)
        if new != text:
            path.write_text(new)
        if (notebook := paired(path)) is not None:
            raw = notebook.read_text()
            if (again := requote(raw, str(notebook.relative_to(repo)), root)[0]) != raw:
                notebook.write_text(again)
        changed += mine
    return changed
