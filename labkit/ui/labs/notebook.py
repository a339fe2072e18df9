"""A lab notebook run headless: its answer cells (tagged ``answer``) left blank or
replaced by the instructor's, its live cells (tagged ``live``: real runs, root) kept or
replaced by ``run = None``, and the verdicts its check cells showed.

Solutions live in ``notebooks/labs/solutions/<lab>.py``: the answer cells only (tagged
``answer`` too), in the lab's order, as a jupytext percent script. The lab's text and
its other cells exist once, in the lab.

    python -m labkit.ui.labs notebooks/labs/lab1-find-the-bottleneck.ipynb --solution
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from labkit.model import inputs
from labkit.ui.labs.verdict import MIME, PASS, TODO

ANSWER, LIVE = "answer", "live"
STATIC_FIGURE = "static-figure"  # a markdown cell: a figure's static copy from docs/figures/
LIVE_STUB = "run = None  # the live cell, left out"


def read(path: Path):
    """A lab (``.ipynb`` or its percent ``.py``) as an nbformat notebook, read within
    :mod:`labkit.model.inputs`' limits; InputError names a file that is not one."""
    import jupytext

    path = Path(path)
    text = inputs.read_text(path, inputs.JSON_BYTES)
    if path.suffix == ".ipynb":
        inputs.json_document(text, str(path))  # JSON, nested within the limit
    try:
        return jupytext.read(io.StringIO(text), fmt={"extension": path.suffix})
    except Exception as exc:  # nbformat and jupytext raise many kinds for a bad notebook
        raise inputs.InputError(str(path), f"not a notebook ({type(exc).__name__}: "
                                           f"{' '.join(str(exc).split())[:200]})") from None


def tagged(nb, tag: str) -> list:
    """The code cells of ``nb`` that carry ``tag``."""
    return [c for c in nb.cells
            if c.cell_type == "code" and tag in c.get("metadata", {}).get("tags", [])]


def without_static_figures(nb):
    """``nb`` without its cells tagged :data:`STATIC_FIGURE`: their images are in the
    checkout's ``docs/figures/`` (``../../docs/figures/...`` from a lab), which a notebook
    handed out or back does not travel with; the interactive figure above each stays."""
    nb.cells = [c for c in nb.cells if STATIC_FIGURE not in c.get("metadata", {}).get("tags", [])]
    return nb


def solution_for(lab: Path) -> Path:
    """Where a lab's solution lives."""
    return Path(lab).parent / "solutions" / f"{Path(lab).stem}.py"


def fill(nb, answers_from: Path):
    """``nb`` with its answer cells replaced, in order, by the answer cells of
    ``answers_from`` (a solution, or a student's copy of the lab)."""
    blanks = tagged(nb, ANSWER)
    answers = tagged(read(answers_from), ANSWER)
    if len(blanks) != len(answers):
        raise ValueError(f"{answers_from} has {len(answers)} answer cells, the lab "
                         f"{len(blanks)}: were cells tagged `{ANSWER}` added or removed?")
    for blank, answer in zip(blanks, answers, strict=True):
        blank.source = answer.source
    return nb


def leave_out_live(nb):
    """``nb`` with every live cell replaced by :data:`LIVE_STUB`."""
    for cell in tagged(nb, LIVE):
        cell.source = LIVE_STUB
    return nb


def execute(nb, cwd: Path, timeout: int = 600):
    """Run every cell in a fresh kernel in ``cwd``, on past a cell that fails (its error
    is among the outputs: :func:`problems`); the notebook, with outputs."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def verdicts(nb) -> list[dict]:
    """Every verdict the executed notebook's cells showed, in order."""
    return [out["data"][MIME] for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if MIME in out.get("data", {})]


def problems(nb, stderr: bool = True) -> list[str]:
    """Errors among the executed notebook's outputs, and (``stderr``) text its cells wrote
    to stderr."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"{out['ename']}: {out['evalue']}")
            elif stderr and out.get("name") == "stderr":
                found.append(out.get("text", ""))
    return found


def run_lab_notebook(lab: Path, solution: bool, live: bool):
    """The lab executed as asked: (verdicts, problems)."""
    nb = read(lab)
    if solution:
        fill(nb, solution_for(lab))
    if not live:
        leave_out_live(nb)
    execute(nb, Path(lab).parent)
    return verdicts(nb), problems(nb)


def main(argv: list[str] | None = None) -> int:
    """Run labs headless and print what their checks said. With ``--solution``, exit 1
    if a cell failed or a check did not pass (with ``--no-live``, a check still waiting
    for its run is fine)."""
    ap = argparse.ArgumentParser(prog="python -m labkit.ui.labs", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("labs", nargs="+", type=Path, help="lab notebooks (.ipynb or .py)")
    ap.add_argument("--solution", action="store_true", help="fill in the instructor's answers")
    ap.add_argument("--no-live", action="store_true", help="leave out the real runs")
    args = ap.parse_args(argv)
    failed = False
    for lab in args.labs:
        found, trouble = run_lab_notebook(lab, args.solution, not args.no_live)
        print(f"== {lab}")
        for v in found:
            print(f"[{v['status']}] {v['check']}: {v['message']}"
                  + (f"\n    hint: {v['hint']}" if v["hint"] else ""))
        for text in trouble:
            print(f"[cell] {text.strip()}")
        allowed = (PASS, TODO) if args.no_live else (PASS,)  # checks of a run: no run
        failed |= bool(trouble) or any(v["status"] not in allowed for v in found)
    return 1 if failed and args.solution else 0


if __name__ == "__main__":
    sys.exit(main())
