"""A newcomer's first hour: the README leads with the two commands, then a short tour, then
one page per audience (student, instructor, blog author, contributor) with how long each
takes; `make samples` is the contributor's, not the user's; the README is short; no page
of the docs and no notebook's markdown names a machine or a commit as the source of a
number (a sample, a set of runs or `make bench` is one anyone can regenerate); every link
of the README and the docs leads to a file (and a heading) that is there; the Binder badge
opens notebooks that exist in the environment `.binder/` describes. (The notebooks'
kernel and static figures: test_notebooks; the README's command block: test_cli_flags.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
AUDIENCES = {"student": "docs/students.md", "instructor": "docs/classroom.md",
             "blog author": "docs/blog-authors.md", "contributor": "docs/contributing.md"}
TOUR_LINES = 12  # "a 10-line tour"
README_LINES = 100
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
BINDER = re.compile(r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]"
                    r"\(https://mybinder\.org/v2/gh/([\w.-]+)/([\w.-]+)/([\w.-]+)"
                    r"\?urlpath=lab/tree/([\w./-]+)\)")
NOT_A_SOURCE = re.compile(  # a machine or a commit named where a number's source belongs
    r"\b\d+-core (?:VM|machine)s?\b|\bthis (?:\d+-core )?VM\b"  # "on this 2-core VM"
    r"|`[0-9a-f]{7,40}`|\bat [0-9a-f]{7,40}\b"  # "at `3f63fa9`", "at 724e662"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")  # "and 3f63fa9": letters and digits


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of each `## ` section, the part before the first as ("", ...)."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]


def _prose(text: str) -> str:
    """The text without fenced code and code spans (where links are not links)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


def test_the_readme_leads_with_the_two_commands():
    text = README.read_text()
    first = re.search(r"```\w*\n(.*?)```", text, re.S)
    assert first and [line.split("#")[0].strip() for line in first[1].splitlines()] == [
        "make demo", "make test"]
    assert "\n## " not in text[:first.start()], "a section before the two commands"


def test_then_a_short_tour_naming_the_commands_a_newcomer_looks_for():
    heading, body = _sections(README.read_text())[1]
    assert heading == "A short tour"
    lines = [line for line in body.strip().splitlines() if line.strip()]
    assert len(lines) <= TOUR_LINES, f"the tour is {len(lines)} lines"
    for command in ("run", "report", "figures", "tune", "schema", "labs", "serve"):
        assert re.search(rf"labkit {command}\b", body), command


def test_then_one_page_per_audience_with_how_long_it_takes():
    heading, body = _sections(README.read_text())[2]
    rows = [line for line in body.splitlines() if line.startswith("| a")]
    assert [r for r in rows if not re.search(r"minutes|an? hour", r)] == []
    for audience, page in AUDIENCES.items():
        (row,) = [r for r in rows if f"**{audience}**" in r]
        assert f"]({page})" in row and (REPO / page).is_file(), audience
    assert len(rows) == len(AUDIENCES)


def test_the_readme_is_short_and_make_samples_is_the_contributors():
    text = README.read_text()
    assert len(text.splitlines()) <= README_LINES
    assert not re.search(r"(make|labkit) samples", text)
    assert "make samples" in (REPO / AUDIENCES["contributor"]).read_text()


def _markdown(page: Path) -> str:
    """A page's text, or a notebook's markdown cells (each a paragraph of its own)."""
    if page.suffix != ".ipynb":
        return page.read_text()
    cells = json.loads(page.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def _sources_named(page: Path) -> list[str]:
    return [m[0] for m in NOT_A_SOURCE.finditer(_markdown(page))]


WRITTEN = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "notebooks/labs/README.md",
           *sorted((REPO / "notebooks").glob("*.ipynb")),
           *sorted((REPO / "notebooks/labs").glob("*.ipynb"))]


@pytest.mark.parametrize("page", WRITTEN, ids=lambda p: str(p.relative_to(REPO)))
def test_no_machine_or_commit_stands_as_the_source_of_a_number(page):
    found = _sources_named(page)
    assert not found, (f"{page.relative_to(REPO)}: {found} (quote a sample with a marker, "
                       "name the set of runs or `make bench`, or drop the number)")


def test_the_source_check_catches_a_machine_or_a_commit(tmp_path):
    assert any(p.suffix == ".ipynb" for p in WRITTEN) and REPO / "docs/programs.md" in WRITTEN
    page, notebook = tmp_path / "p.md", tmp_path / "n.ipynb"
    named = ["Measured on this 2-core VM: 3.1x.", "on a 4-core machine, 12 ms",
             "five runs at `4334101`", "Two recordings (at 724e662 and 3f63fa9)", "this VM"]
    page.write_text("\n".join(named))
    assert _sources_named(page) == ["this 2-core VM", "4-core machine", "`4334101`",
                                    "at 724e662", "3f63fa9", "this VM"]
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["# at 724e662\n"]},
        {"cell_type": "markdown", "source": ["Recorded on a ", "2-core VM."]}]}))
    assert _sources_named(notebook) == ["2-core VM"]
    fine = ("`make bench` on two cores: 16 ranks. Three sets of five runs. `labkit doctor` "
            "says whether this machine can run labkit; `0x81104110`, 0x40882089, run "
            "20261129-171831-bottleneck, sha256 of a scenario, one machine or VM per student.")
    page.write_text(fine)
    assert _sources_named(page) == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.*)$",
                                             re.sub(r"```.*?```", "", page.read_text(),
                                                    flags=re.S), re.M)}


DOCS = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "notebooks/labs/README.md"]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_leads_to_a_file_and_heading_that_are_there(page):
    broken = []
    for m in LINK.finditer(_prose(page.read_text())):
        target = m[1]
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, broken


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "p.md"
    (tmp_path / "q.md").write_text("# Q\n\n## What `make demo` installs\n")
    page.write_text("[a](q.md#what-make-demo-installs) [b](nope.md) [c](q.md#nope) "
                    "`[d](code.md)` [e](https://example.org/x)\n")
    with pytest.raises(AssertionError, match=r"\['nope.md', 'q.md#nope \(no such heading\)'\]"):
        test_every_link_leads_to_a_file_and_heading_that_are_there(page)


def test_the_binder_badge_opens_the_notebooks_in_binders_environment():
    badge = BINDER.search(README.read_text())
    assert badge, "no Binder badge in the README"
    owner, repo, _, path = badge.groups()
    assert (REPO / path).is_dir() and list((REPO / path).glob("*.ipynb")), path
    assert f"`{owner}/{repo}`" in (REPO / AUDIENCES["contributor"]).read_text(), \
        "the contributors' page names the repository the badge opens"
    assert "labkit lab --kernel-only" in (REPO / ".binder/postBuild").read_text()
