"""Handing labs out and grading what comes back (``labkit labs release`` and ``grade``).

A release is the lab notebooks as students start them: answer cells blank, no outputs,
the files they read beside them (``*.yaml``), and no ``solutions/``; the cells holding a
figure's static copy (tagged ``static-figure``) are left out, here and in the graded
notebooks, since their images stay in the checkout's ``docs/figures/``. Grading never runs a
student's copy of the lab: it takes the lab as labkit ships it, puts the student's answer
cells (tagged ``answer``, in order) in place of the blanks, runs it headless and counts the
checks that passed. A check the instructor's own answers cannot pass in the same
conditions (a run check with the runs left out) is not counted either way. Written per
grading: ``checks.csv`` (a row per student, lab and check), ``scores.csv`` (a row per
student and lab, in the columns of nbgrader's ``export``) and each graded notebook, with
its verdicts, under ``feedback/<student>/``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.model.paths import REPO_ROOT
from labkit.ui.labs import notebook
from labkit.ui.labs.verdict import PASS

LABS = REPO_ROOT / "notebooks" / "labs"
GRADES_DIR = REPO_ROOT / "data" / "grades"  # `labkit labs grade` without --out
KERNELSPEC = {"name": "labkit", "display_name": "labkit (Python)", "language": "python"}
UNGRADED = "ungraded"  # a check the instructor's answers cannot pass here either


def labs(folder: Path = LABS) -> list[Path]:
    """The lab notebooks labkit ships, in order."""
    return sorted(Path(folder).glob("lab*.ipynb"))


def _empty_or_new(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already exists and is not an empty folder: name a new "
                              "one (nothing in it is overwritten)")


def release(out: Path, folder: Path = LABS) -> list[Path]:
    """Write the labs as students start them into ``out`` (new or empty); the files written."""
    import nbformat

    out = Path(out)
    _empty_or_new(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for lab in labs(folder):
        nb = notebook.without_static_figures(notebook.read(lab))
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nb.metadata.pop("jupytext", None)  # the paired .py stays with the instructor
        nb.metadata["kernelspec"] = dict(KERNELSPEC)
        nbformat.write(nb, out / lab.name)
        written.append(out / lab.name)
    for extra in sorted(Path(folder).glob("*.yaml")):
        shutil.copy2(extra, out / extra.name)
        written.append(out / extra.name)
    return written


@dataclass(frozen=True)
class Graded:
    """One check of one student's lab: ``status`` pass, fail, todo or ungraded."""

    student: str
    lab: str
    check: str
    status: str
    message: str

    @property
    def points(self) -> int:
        return int(self.status == PASS)


def submissions(folder: Path, known: list[str]) -> list[tuple[str, Path]]:
    """(student, notebook) for every lab notebook under ``folder``: the student is the
    first folder below it (``<student>/<lab>.ipynb``, or nbgrader's
    ``<student>/<assignment>/<lab>.ipynb``); notebooks that are not one of ``known`` labs
    are left out."""
    found = []
    for path in sorted(Path(folder).rglob("*.ipynb")):
        rel = path.relative_to(folder)
        if len(rel.parts) >= 2 and path.stem in known and ".ipynb_checkpoints" not in rel.parts:
            found.append((rel.parts[0], path))
    return found


def _run(nb, lab: Path, live: bool):
    if not live:
        notebook.leave_out_live(nb)
    return notebook.execute(nb, lab.parent)


def grade(folder: Path, out: Path, live: bool = False, labs_folder: Path = LABS,
          on_progress: Callable[[int, int, str], None] | None = None) -> list[Graded]:
    """Grade every submission under ``folder`` into ``out`` (new or empty); every check's
    row. ``live``: run the labs' real runs too (root, about half a minute a lab).
    ``on_progress(done, total, what)`` after each notebook run."""
    import nbformat

    out = Path(out)
    _empty_or_new(out)
    shipped = {lab.stem: lab for lab in labs(labs_folder)}
    todo = submissions(Path(folder), list(shipped))
    if not todo:
        raise FileNotFoundError(f"no lab notebooks under {folder}: expected "
                                f"<student>/<lab>.ipynb, a lab being one of "
                                f"{', '.join(shipped)}")
    stems = sorted({Path(p).stem for _, p in todo})
    total = len(stems) + len(todo)
    tell = on_progress or (lambda done, total, what: None)
    reachable = {}  # per lab, the checks the instructor's answers pass here
    for stem in stems:
        solved = _run(notebook.fill(notebook.read(shipped[stem]),
                                    notebook.solution_for(shipped[stem])), shipped[stem], live)
        reachable[stem] = [v["status"] == PASS for v in notebook.verdicts(solved)]
        tell(len(reachable), total, f"{stem}: the instructor's answers")
    rows: list[Graded] = []
    for done, (student, path) in enumerate(todo, len(stems) + 1):
        lab = shipped[path.stem]
        try:
            nb = _run(notebook.fill(notebook.without_static_figures(notebook.read(lab)), path),
                      lab, live)
        except Exception as exc:  # the student's notebook or code: a row, not a crash
            rows += [Graded(student, lab.stem, "the lab ran", "fail",
                            f"{type(exc).__name__}: {exc}")]
            tell(done, total, f"{student}: {lab.stem}")
            continue
        for i, v in enumerate(notebook.verdicts(nb)):
            counted = i < len(reachable[lab.stem]) and reachable[lab.stem][i]
            rows.append(Graded(student, lab.stem, v["check"],
                               v["status"] if counted else UNGRADED, v["message"]))
        (out / "feedback" / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out / "feedback" / student / path.name)
        tell(done, total, f"{student}: {lab.stem}")
    _write(out, rows, reachable)
    return rows


def _write(out: Path, rows: list[Graded], reachable: dict[str, list[bool]]) -> None:
    import polars as pl

    out.mkdir(parents=True, exist_ok=True)
    checks = pl.DataFrame([{**asdict(r), "points": r.points} for r in rows])
    checks.select("student", "lab", "check", "status", "points", "message").write_csv(
        out / "checks.csv")
    scores = (checks.group_by("student", "lab", maintain_order=True)
              .agg(pl.col("points").sum().alias("score"))
              .with_columns(pl.col("lab").replace_strict(
                  {lab: sum(ok) for lab, ok in reachable.items()}).alias("max_score")))
    scores.select(
        pl.col("lab").alias("assignment"), pl.lit("").alias("duedate"),
        pl.lit("").alias("timestamp"), pl.col("student").alias("student_id"),
        pl.lit("").alias("last_name"), pl.lit("").alias("first_name"), pl.lit("").alias("email"),
        pl.col("score").alias("raw_score"), pl.lit(0).alias("late_submission_penalty"),
        "score", "max_score").write_csv(out / "scores.csv")
