"""Tier 0: labs handed out without their solutions, and graded back (labkit labs)."""

import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from labkit.ui import cli
from labkit.ui.labs import FAIL, PASS, TODO, handout, notebook

SHIPPED = handout.labs()
CHECKS = {"lab1-find-the-bottleneck": 3, "lab2-protect-the-collective": 2,
          "lab3-write-a-controller": 2, "lab4-pipeline-vs-tensor": 3,
          "lab5-whose-allreduce-is-vip": 5, "lab6-find-the-straggler": 4}  # each lab's
NEED_A_RUN = {"The collective is protected", "Your controller against reactive"}  # live


def answers(nb) -> list[str]:
    return [c.source for c in notebook.tagged(nb, notebook.ANSWER)]


def static_figures(nb) -> list:
    return [c for c in nb.cells if notebook.STATIC_FIGURE in c.get("metadata", {}).get("tags", [])]


def images(nb) -> list[str]:
    """Every markdown image a notebook shows (markdown's ![...](src) and HTML's <img src>)."""
    found = [re.findall(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)|<img[^>]*\ssrc=[\"']([^\"']+)", c.source)
             for c in nb.cells if c.cell_type == "markdown"]
    return [src for matches in found for pair in matches for src in pair if src]


def broken_images(nb, folder: Path) -> list[str]:
    """The images of a notebook in ``folder`` that are not files beside it in ``folder``."""
    return [src for src in images(nb) if "://" not in src and not src.startswith("data:")
            and not ((folder / src).resolve().is_relative_to(folder.resolve())
                     and (folder / src).is_file())]


def test_a_release_is_the_labs_blank_without_solutions(tmp_path):
    out = tmp_path / "handout"
    assert cli.main(["labs", "release", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [lab.name for lab in SHIPPED] + ["shared-lane.yaml"])
    for lab in SHIPPED:
        given = nbformat.read(out / lab.name, as_version=4)
        assert answers(given) == answers(notebook.read(lab))
        assert answers(given) != answers(notebook.read(notebook.solution_for(lab)))
        assert given.metadata.kernelspec.name == "labkit" and "jupytext" not in given.metadata
        assert all(not c.get("outputs") for c in given.cells if c.cell_type == "code")


def test_a_release_ships_no_image_it_does_not_hold(tmp_path):
    """The static copies of labs 1 and 3 (docs/figures/, outside the release) are left out,
    and with them every image the release would show broken; nothing else goes."""
    out = tmp_path / "handout"
    handout.release(out)
    shipped_static = 0
    for lab in SHIPPED:
        shipped, given = notebook.read(lab), nbformat.read(out / lab.name, as_version=4)
        shipped_static += len(static_figures(shipped))
        assert not static_figures(given) and broken_images(given, out) == [], lab.name
        kept = [c.source for c in shipped.cells if c not in static_figures(shipped)]
        assert [c.source for c in given.cells] == kept
    assert shipped_static >= 2  # labs 1 and 3 hold them in the checkout
    # the check can fail: a lab as shipped, written into the release, shows broken images
    lab = next(lab for lab in SHIPPED if static_figures(notebook.read(lab)))
    assert broken_images(notebook.read(lab), out)


def test_a_release_never_writes_into_a_folder_with_something_in_it(tmp_path, capsys):
    kept = tmp_path / "notes.txt"
    kept.write_text("mine")
    assert cli.main(["labs", "release", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and kept.read_text() == "mine"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Four students: ada handed the labs back blank; ben handed in the instructor's
    answers; cy added an answer cell to lab 1; dan made lab 1's check cells print a pass."""
    root = tmp_path_factory.mktemp("class")
    handout.release(root / "handout")
    for student in ("ada", "ben", "cy", "dan"):
        (root / "in" / student).mkdir(parents=True)
    for lab in SHIPPED:
        blank = nbformat.read(root / "handout" / lab.name, as_version=4)
        solved = notebook.fill(nbformat.read(root / "handout" / lab.name, as_version=4),
                               notebook.solution_for(lab))
        nbformat.write(solved, root / "in" / "ben" / lab.name)
        nbformat.write(blank, root / "in" / "ada" / lab.name)
        if lab.stem.startswith("lab1"):
            extra = nbformat.read(root / "handout" / lab.name, as_version=4)
            extra.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["answer"]}))
            nbformat.write(extra, root / "in" / "cy" / lab.name)
            for cell in blank.cells:
                if "check" in cell.source and notebook.ANSWER not in cell.metadata.get("tags", []):
                    cell.source = "print('passed')"
            nbformat.write(blank, root / "in" / "dan" / lab.name)
    out = root / "grades"
    assert cli.main(["labs", "grade", str(root / "in"), "--out", str(out)]) == 0
    with open(out / "scores.csv") as f:
        scores = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(f)}
    with open(out / "checks.csv") as f:
        checks = list(csv.DictReader(f))
    return out, scores, checks


def test_blank_labs_score_nothing_and_the_solutions_full_marks(graded):
    _, scores, checks = graded
    for lab in SHIPPED:
        ada, ben = scores["ada", lab.stem], scores["ben", lab.stem]
        assert int(ada["max_score"]) == int(ben["max_score"]) > 0, lab
        assert ada["score"] == "0" and ben["score"] == ben["max_score"], (ada, ben)
    assert scores["dan", SHIPPED[0].stem]["score"] == "0"  # check cells edited: ignored
    # a check that needs a run cannot pass without --live: it is counted for no one
    ungraded = {(r["lab"], r["check"]) for r in checks if r["status"] == handout.UNGRADED}
    assert ungraded and all(lab.startswith(("lab2", "lab3")) for lab, _ in ungraded)


@pytest.mark.parametrize("lab", SHIPPED, ids=lambda lab: lab.stem)
def test_every_check_says_not_yet_blank_and_passes_with_the_answers(graded, lab):
    """Each lab run headless (its live cell left out, as root too): blank, each of its
    checks says not yet; with the instructor's answers each passes, but a check of the
    lab's live run, which is ungraded; and neither run raises or writes to stderr."""
    out, _, checks = graded
    for student in ("ada", "ben"):
        rows = [r for r in checks if r["student"] == student and r["lab"] == lab.stem]
        assert len(rows) == CHECKS[lab.stem], (student, rows)
        for r in rows:
            expected = ({handout.UNGRADED} if r["check"] in NEED_A_RUN
                        else {PASS} if student == "ben" else {TODO, FAIL})
            assert r["status"] in expected, (student, r)
        back = nbformat.read(out / "feedback" / student / lab.name, as_version=4)
        assert not notebook.problems(back), (student, notebook.problems(back))


def test_a_lab_with_answer_cells_added_is_one_failing_row(graded):
    _, scores, checks = graded
    (row,) = [r for r in checks if r["student"] == "cy"]
    assert row["status"] == "fail" and row["check"] == "the lab ran"
    assert "answer cells, the lab" in row["message"]
    assert scores["cy", SHIPPED[0].stem]["score"] == "0"


def test_each_student_gets_their_graded_notebook_back(graded):
    out, _, _ = graded
    shown = nbformat.read(out / "feedback" / "ben" / SHIPPED[0].name, as_version=4)
    verdicts = notebook.verdicts(shown)
    assert verdicts and all(v["status"] == "pass" for v in verdicts)
    assert json.dumps(shown.metadata)  # a notebook Jupyter opens
    for lab in SHIPPED:  # no static copy whose image stays behind in docs/figures/
        back = nbformat.read(out / "feedback" / "ben" / lab.name, as_version=4)
        assert not static_figures(back) and broken_images(back, out / "feedback" / "ben") == []


def test_grading_an_empty_folder_says_what_it_expects(tmp_path, capsys):
    assert cli.main(["labs", "grade", str(tmp_path), "--out", str(tmp_path / "g")]) == 2
    assert "<student>/<lab>.ipynb" in capsys.readouterr().err
