"""No measured number in the docs drifts unseen. test_docs_numbers checks every number
quoted from a sample with a marker; a measured number without one is stale as soon as the
samples are recorded again. This test finds such numbers in README.md, docs/*.md and the
notebooks' markdown cells and fails on each, naming its file and line.

The heuristic, in order (each step a pattern below):

1. Prose only: fenced code, the digits of ``inline code`` and HTML comments are left out;
   a number with its marker is test_docs_numbers' (``labkit.runs.quotes.QUOTED``).
2. Measured-looking (``MEASURED``): a number, or a range or list of them (``2.3-3.0``,
   ``486 and 630``, ``201 / 258``), before a unit of time, rate, count or ratio (ms,
   Mbit/s, packets, drops, pauses, x, %, ...), or after a measure's name (p99, median,
   slowdown, drops, pauses).
3. A limit, tolerance, period or setting, not a measurement: after a bound word
   (``BOUND``: every, per, within, up to, at most, at least, under, more than, at, allows,
   ≤, ...), or before what it sets (``SETS``: a link, port, NIC, gate, poll, timer or
   window, ``by default``, ``per policy``, ``each way``, its constant's name in code as in
   "16 ms (`IDLE_MS`)", or the rate or time it is computed at: "0.72 ms at 100 Mbit/s").
4. Sourced in words (``SOURCE``): its sentence (a table row: the row or the paragraph
   above the table) names a set of runs ("five runs", "three 40-op runs of each", "the
   three sets", "paired runs"), a benchmark (``make bench``) or a citation (the paper, an
   RFC, IEEE 802.x).
5. ``ALLOWED``: the sentences (or paragraphs) left whose numbers are legitimately
   unmarked, each with its reason: constants of the design or a set-up, a hardware fact,
   how long a lab's run takes, what a test bounds, and what no sample can hold (what an
   earlier version measured, as the reason for a design; a one-off experiment or trace
   whose set-up the text describes).

A number this flags: quote it from a sample with a marker (docs/testing.md, "The docs'
numbers"), say where it comes from in words, or write the sentence without it. Bounds read
as limits, so a measured maximum written "up to 50 ms" passes: the heuristic errs that way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from labkit.runs.quotes import QUOTED, documents

REPO = Path(__file__).resolve().parents[2]

NUMBER = r"−?\d+(?:[ ,]\d{3})*(?:\.\d+)?"
UNIT = (r"(?:ns|µs|us|ms|s|seconds?|minutes?|hours?|[kKMG]bit/s|[kKMG]B/s|packets?|drops?"
        r"|pauses?|resends?|x|×|%)(?![\w/])")
JOINED = rf"(?:{NUMBER}\s?(?:-|–|/|→|to|and|or|,)\s?)*{NUMBER}"
MEASURED = [re.compile(rf"(?<![\w.\-/·]){JOINED}\s{{0,4}}{UNIT}"),
            re.compile(rf"\b(?:p\d\d|median|slowdown|drops|pauses)(?: (?:of|at|is|was))?:? "
                       rf"{JOINED}(?![\w.])")]
BOUNDS = ["every", "each", "per", "within", "up to", "at most", "at least", "under", "over",
          "past", "below", "above", "beyond", "after", "at", "more than", "less than",
          "longer than", "allows"]


def _spaced(phrase: str) -> str:
    """A phrase's regex that lets a line break or blanks stand for each space."""
    return phrase.replace(" ", r"\s+")


BOUND = re.compile(r"(?:\b(?:" + "|".join(map(_spaced, BOUNDS)) + r")(?:\s+an?)?|[≤≥<>±])\s*$")
SETS = re.compile(r"\**\s*(?:-\s*)?(?:links?|ports?|uplinks?|NICs?|feeders|gates?|poll|timer"
                  r"|windows?|by\s+default|per\s+policy|each\s+way)\b"
                  r"|\**\s+\(‹[\w.]*[A-Z_]{3}›|\s+at\s+\d[\d.]*\s?(?:[kMG]bit/s|ms)\b")
SOURCES = [r"(?<![\d.])(?:two|three|four|five|ten|thirteen|fifteen|\d{1,2})"
           r"(?: (?!m?s\b)[\w‹›-]+)? runs",
           r"runs? of each", r"paired runs", r"pairs? (?:of runs|run)", r"five-run",
           r"(?:first|second|third|fourth|three|five|these) sets?", r"sets of (?:five|\d+)",
           r"make bench", r"benchmark", r"the paper(?!'s)", r"RFC \d+", r"IEEE", r"802\.\d\w*"]
SOURCE = re.compile(r"\b(?:" + "|".join(map(_spaced, SOURCES)) + r")\b", re.I)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(‹_])|\n\s*(?:[*-]|\d+\.) ")
TABLE = re.compile(r"\n[ \t]*\|")

CONSTANT = ("constants of the design or of a set-up (a rate, a size, a duration, a default, "
            "or what follows from them)")
HARDWARE = "a fact of real hardware"
DURATION = "how long a lab's run or a command takes: a guide to plan by, not a result"
READING = "how long a reader's page takes to work through: a guide to plan by, not a result"
TESTS = "what a test sets up and the bounds it checks"
HISTORY = ("what an earlier version measured, given as the reason for the design: no "
           "sample can hold it")
EXPERIMENT = ("a one-off experiment or trace whose set-up the text describes; no sample "
              "records it")


@dataclass(frozen=True)
class Allowed:
    """The numbers of the sentence (or table row) of ``file`` where ``anchor`` (a regex,
    on the text without code spans' digits and markers) is found, or of its whole
    ``paragraph``, are not checked, for the reason ``why``. ``file`` may be a pattern."""

    file: str
    anchor: str
    why: str
    paragraph: bool = False


ALLOWED = [
    Allowed("README.md", r"\| you are \| start at \| time \|", READING, paragraph=True),
    Allowed("docs/blog-authors.md", "About 30 minutes to a first figure", READING),
    Allowed("docs/classroom.md", "About 30 minutes to read", READING),
    Allowed("docs/students.md", "About 20 minutes to your first figure", READING),
    Allowed("docs/students.md", "2 and 3 end with a real run", DURATION),
    Allowed("docs/classroom.md", "whose checks need a real run", DURATION),
    Allowed("docs/classroom.md", "lab 2's takes about 20 s", DURATION),
    Allowed("docs/classroom.md", r"about 20 s per lab 2 or lab 3", DURATION),
    Allowed("docs/testing.md", r"\| ‹tests/tier› \| root", TESTS),
    Allowed("docs/testing.md", "about 7 minutes", DURATION),
    Allowed("docs/*.md", "not exited 15 s later|15 s later, and was stopped", CONSTANT),
    Allowed("docs/control.md", "without it, an iperf3 at a 20 Mbit/s gate", HISTORY),
    Allowed("docs/control.md", "Measured with an iperf3 cycling.*?One wake costs", EXPERIMENT),
    Allowed("docs/control.md", r"A gate \*holds\*", HISTORY, paragraph=True),
    Allowed("docs/control.md", "Why not hold traffic in the queue itself", HISTORY,
            paragraph=True),
    Allowed("docs/control.md", "25 Mbit/s for each of leaf1's four writers", CONSTANT),
    Allowed("docs/control.md", "by 5 % of line rate per round", CONSTANT),
    Allowed("docs/control.md", r"\(8 s, ‹data/sample/checkpoint-burst-dcqcn›", CONSTANT),
    Allowed("docs/control.md", "measured 1-11 ms after the gate opened", EXPERIMENT),
    Allowed("docs/control.md", "lasted 85 % of its learned length", CONSTANT),
    Allowed("docs/control.md", r"relayed one poll \(5 ms\)", CONSTANT),
    Allowed("docs/control.md", "gone in about 20 ms", CONSTANT),
    Allowed("docs/control.md", "the finer steps cost the orchestrator", HISTORY),
    Allowed("docs/control.md", "‹pytorch-ddp.yaml› that was", HISTORY),
    Allowed("docs/control.md", "Five runs of each before the gates", EXPERIMENT,
            paragraph=True),
    Allowed("docs/data-model.md", "Measured with two hosts flooding", EXPERIMENT),
    Allowed("docs/data-model.md", "in the acceptance run", EXPERIMENT),
    Allowed("docs/data-model.md", "an earlier recording", HISTORY),
    Allowed("docs/data-model.md", "What two cores hold.*?flagged in about half the runs",
            EXPERIMENT),
    Allowed("docs/data-model.md", "The independent check.*?bpftrace trails by", EXPERIMENT),
    Allowed("docs/dctcp.md", "before labkit had a delay line", HISTORY),
    Allowed("docs/dctcp.md", "120 % of a window", CONSTANT),
    Allowed("docs/dctcp.md", "a flow with 23 packets and alpha 5 %", CONSTANT),
    Allowed("docs/dctcp.md", "PRR then computed a window", EXPERIMENT),
    Allowed("docs/lossless.md", "resent 3328 packets", HISTORY),
    Allowed("docs/lossless.md", "exploratory run", EXPERIMENT),
    Allowed("docs/lossless.md", "A first version acted", HISTORY),
    Allowed("docs/programs.md", "Open MPI 4.1's own choice", HISTORY),
    Allowed("docs/programs.md", "Before labkit did", HISTORY),
    Allowed("docs/programs.md", "Traced in one of them", EXPERIMENT),
    Allowed("docs/programs.md", "Through that silence", EXPERIMENT),
    Allowed("docs/programs.md", "two or three of these stalls", EXPERIMENT),
    Allowed("docs/programs.md", "relay's own CPU", HISTORY),
    Allowed("docs/programs.md", "reference BLAS turns into", EXPERIMENT),
    Allowed("docs/programs.md", "runs a batch of one", EXPERIMENT),
    Allowed("docs/programs.md", "The controllers' ratios rose", HISTORY),
    Allowed("docs/programs.md", "What the port's use cost", HISTORY, paragraph=True),
    Allowed("docs/programs.md", "HTB debt at the storage server's NIC", HISTORY,
            paragraph=True),
    Allowed("docs/scale-out.md", "wire time at 100 Mbit/s and 4 KiB", CONSTANT),
    Allowed("docs/scenarios.md", "8 ms at 4000: 2 µs", CONSTANT),
    Allowed("docs/scenarios.md", "3 × ‹", CONSTANT),
    Allowed("docs/scenarios.md", "500 ms on / 1500 ms off", CONSTANT),
    Allowed("docs/scenarios.md", "drops a 32 KiB run far more often", EXPERIMENT),
    Allowed("notebooks/01-bottleneck.py", "emulate 400 Gbit/s directly", HARDWARE),
    Allowed("notebooks/01-bottleneck.py", "for 10 seconds each", CONSTANT),
    Allowed("notebooks/01-bottleneck.py", "about 20 seconds under the three", DURATION),
    Allowed("notebooks/05-fabric-stack.py", "0.1 % of packets dropped on every", CONSTANT),
]


@dataclass(frozen=True)
class Unmarked:
    """A measured-looking number with no marker: the document, its line and its text."""

    where: str
    line: int
    number: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.number!r} is unmarked"


def _prose(text: str, notebook: bool = False) -> list[str]:
    """The text's lines with what is not prose blanked (line numbers kept): fenced code,
    and in a notebook (jupytext's percent format) every cell but the markdown ones, whose
    ``# `` is taken off."""
    lines = text.splitlines()
    if notebook:
        markdown, kept = False, []
        for line in lines:
            if line.startswith("# %%"):
                markdown = "[markdown]" in line
                kept.append("")
            else:
                kept.append(line[2:] if markdown and line.startswith("# ") else "")
        lines = kept
    fenced, prose = False, []
    for line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
        else:
            prose.append("" if fenced else line)
    return prose


def _paragraphs(lines: list[str]) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph; a table is one paragraph with the one above
    it, its caption."""
    found: list[tuple[int, str]] = []
    start, block = 0, []
    for number, line in enumerate([*lines, ""], start=1):
        if line.strip():
            start = start or number
            block.append(line)
            continue
        if block:
            text = "\n".join(block)
            if text.lstrip().startswith("|") and found and not found[-1][1].startswith("#"):
                above, caption = found[-1]  # blank lines kept: a line's number is its own
                gap = start - above - caption.count("\n")
                found[-1] = (above, caption + "\n" * gap + text)
            else:
                found.append((start, text))
        start, block = 0, []
    return found


def _clean(text: str) -> str:
    """The text with its marked numbers, comments and code spans' digits taken out."""
    text = QUOTED.sub(lambda m: "§" + m["unit"], text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"`([^`\n]*)`", lambda m: "‹" + re.sub(r"\d", "", m[1]) + "›", text)


def _sentence(text: str, start: int, end: int) -> tuple[int, int]:
    """Where the sentence around ``text[start:end]`` begins and ends (in a table: its row;
    an item of a list is a sentence of its own)."""
    if (table := TABLE.search(text)) and start > table.start():
        stop = text.find("\n", end)
        return text.rfind("\n", 0, start) + 1, len(text) if stop < 0 else stop
    begins = [0, *(m.end() for m in SENTENCE_END.finditer(text, 0, start))]
    after = SENTENCE_END.search(text, end)
    return begins[-1], after.start() if after else len(text)


def _sourced(text: str, start: int, end: int) -> bool:
    """Whether the sentence of ``text[start:end]`` names a source in words (a table row:
    the row or the paragraph above the table)."""
    begin, stop = _sentence(text, start, end)
    table = TABLE.search(text)
    caption = text[:table.start()] if table and start > table.start() else ""
    return bool(SOURCE.search(caption + text[begin:stop]))


def _allowed(text: str, where: str) -> list[tuple[int, int]]:
    """The spans of ``text`` (a paragraph of ``where``) that ALLOWED leaves unchecked."""
    spans = []
    for a in ALLOWED:
        if fnmatch(where, a.file):
            for m in re.finditer(_spaced(a.anchor), text, re.S):
                spans.append((0, len(text)) if a.paragraph else
                             (_sentence(text, m.start(), m.start())[0],
                              _sentence(text, m.end(), m.end())[1]))
    return spans


def unmarked(text: str, where: str) -> list[Unmarked]:
    """Every unmarked measured-looking number of a document's text (``where``: its path
    from the checkout, for ALLOWED and the messages; a ``.py`` is a notebook)."""
    found = []
    for first, paragraph in _paragraphs(_prose(text, notebook=where.endswith(".py"))):
        clean = _clean(paragraph)
        allowed = _allowed(clean, where)
        for pattern in MEASURED:
            for m in pattern.finditer(clean):
                if BOUND.search(clean[max(0, m.start() - 16):m.start()]) or SETS.match(
                        clean, m.end()) or _sourced(clean, m.start(), m.end()) or any(
                        a <= m.start() and m.end() <= b for a, b in allowed):
                    continue
                found.append(Unmarked(where, first + clean.count("\n", 0, m.start()),
                                      m.group(0).replace("\n", " ")))
    return found


def test_no_measured_number_is_unmarked():
    found = [str(u) for f in documents(REPO)
             for u in unmarked(f.read_text(), str(f.relative_to(REPO)))]
    assert not found, "\n".join(found)


def test_every_allowed_sentence_is_still_there():
    """An entry whose text went from the docs is dropped, not kept to excuse another."""
    texts = {str(f.relative_to(REPO)): [_clean(p) for _, p in _paragraphs(
        _prose(f.read_text(), notebook=f.suffix == ".py"))] for f in documents(REPO)}
    gone = [a for a in ALLOWED if not any(
        fnmatch(where, a.file) and re.search(_spaced(a.anchor), p, re.S)
        for where, paragraphs in texts.items() for p in paragraphs)]
    assert not gone, gone


def test_an_unmarked_number_added_to_a_doc_is_caught():
    readme = (REPO / "README.md").read_text()
    m = QUOTED.search(readme)
    assert m, "README.md quotes no number from a sample"
    line = readme.count("\n", 0, m.start()) + 1
    start = readme.rfind("\n", 0, m.start()) + 1  # a sentence of its own, before the line
    added = readme[:start] + "Alone it took 12.5 ms. " + readme[start:]
    assert unmarked(readme, "README.md") == []
    assert [str(u) for u in unmarked(added, "README.md")] == [
        f"README.md:{line}: '12.5 ms' is unmarked"]


@pytest.mark.parametrize("text, flagged", [
    ("The ring took 702 ms at the median.", ["702 ms"]),
    ("slowdown 2.34 under fifo, vip drops 152, 71, 0", ["slowdown 2.34", "drops 152, 71, 0"]),
    ("The ring took 702 ms<!-- bottleneck policies.fifo.allreduce.p50_ms --> at the median.",
     []),
    ("The ring took `702 ms`.", []),
    ("```\nfifo  702 ms\n```", []),
    ("It polls every 8 ms, within 5 %, on a 100 Mbit/s link, 16 ms (`IDLE_MS`).", []),
    ("A packet takes 0.72 ms at 100 Mbit/s.", []),
    ("In five runs it took 702 ms. Alone it took 300 ms.", ["300 ms"]),
    ("| policy | p50 |\n|---|---|\n| fifo | 702 ms |", ["702 ms"]),
    ("Three runs of each:\n\n| policy | p50 |\n|---|---|\n| fifo | 702 ms |", []),
])
def test_what_counts_as_an_unmarked_measured_number(text, flagged):
    assert [u.number for u in unmarked(text, "docs/x.md")] == flagged
