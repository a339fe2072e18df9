"""Tier 0: the Binder environment (.binder/, what repo2docker builds for a JupyterHub),
made as repo2docker makes it, by a user without root, in a copy of the checkout of their
own: the sample notebooks run in it headless, and labs 1, 4 and 5 grade full marks with the
instructor's answers. Its packages come from a wheelhouse that root downloads first (from
root's pip cache and index: the user without root has neither)."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from labkit.runs import owner
from labkit.ui.labs import handout, notebook
from tests import nobody

REPO = Path(__file__).resolve().parents[2]
BINDER = REPO / ".binder"
USER = 65534  # nobody, when the tests run as root
NO_ROOT_LABS = ("lab1", "lab4", "lab5", "lab6")  # labs 2 and 3 run the fabric: root
PIP = "pip>=23.3"  # repo2docker's pip reads the lock; Debian 12's venv's (23.0) cannot (Makefile)


def pip(*argv: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *argv],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def binder():
    """The environment repo2docker would build, and the user's copy of the repository:
    (python, repo, environment). With this machine's Python: runtime.txt asks Binder for
    3.11, Debian 12's; on Debian 13 this is 3.13 (the lock holds for both)."""
    top = Path(tempfile.mkdtemp(prefix="labkit-binder-"))
    try:
        os.chmod(top, 0o755)
        wheels, repo, home = top / "wheels", top / "repo", top / "home"
        pip("download", "-q", "-d", str(wheels), "-r", str(BINDER / "requirements.txt"))
        pip("download", "-q", "-d", str(wheels), *build_requirements())  # postBuild's pip -e .
        pip("download", "-q", "-d", str(wheels), PIP)
        copy_checkout(repo)
        home.mkdir()
        owner.hand_back([repo, home], (USER, USER), skip=frozenset())
        venv = home / "env"
        # not byte-compiled at install (half of pip's time): the user owns the environment,
        # so the notebooks' first imports compile what they use, once (pip reads a "--no-"
        # option's variable as the option's value: 0 is --no-compile)
        env = {"HOME": str(home), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_COMPILE": "0",
               "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        python = Path(sys.base_prefix) / "bin" / "python{}.{}".format(*sys.version_info)
        for step in ([str(python), "-m", "venv", str(venv)],
                     [str(venv / "bin/pip"), "install", "-q", PIP],
                     [str(venv / "bin/pip"), "install", "-q", "-r",
                      str(repo / ".binder/requirements.txt")],
                     [str(repo / ".binder/postBuild")]):
            proc = nobody.command(step, cwd=repo, env=env, user=USER)
            assert proc.returncode == 0, f"{step}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        yield venv / "bin/python", repo, env
    finally:
        shutil.rmtree(top, ignore_errors=True)


def copy_checkout(to: Path) -> None:
    """The checkout's files (tracked, and new ones git does not ignore), as Binder copies a
    repository."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, to / name)


def build_requirements() -> list[str]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]


EXECUTE = """
import sys
from pathlib import Path
from labkit.ui.labs import notebook
path = Path(sys.argv[1])
sys.exit("\\n".join(notebook.problems(notebook.execute(notebook.read(path), path.parent))) or None)
"""


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb")))
def test_a_sample_notebook_runs_in_binders_environment_without_root(binder, name):
    python, repo, env = binder
    proc = nobody.command([str(python), "-c", EXECUTE, str(repo / "notebooks" / name)],
                          cwd=repo / "notebooks", env=env, user=USER, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_labs_without_root_grade_full_marks_in_binders_environment(binder):
    python, repo, env = binder
    work = Path(env["HOME"]) / "class"
    labs = [lab for lab in handout.labs() if lab.stem.startswith(NO_ROOT_LABS)]
    for lab in labs:
        (work / "in" / "ben").mkdir(parents=True, exist_ok=True)
        solved = notebook.fill(notebook.read(lab), notebook.solution_for(lab))
        nbformat.write(solved, work / "in" / "ben" / lab.name)
    owner.hand_back([work], (USER, USER), skip=frozenset())
    labkit = python.with_name("labkit")  # postBuild's install
    proc = nobody.command([str(labkit), "labs", "grade", str(work / "in"), "--out",
                           str(work / "grades")], cwd=repo, env=env, user=USER, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(work / "grades" / "scores.csv") as f:
        scores = {r["assignment"]: r for r in csv.DictReader(f)}
    assert set(scores) == {lab.stem for lab in labs}
    for row in scores.values():
        assert int(row["max_score"]) > 0 and row["score"] == row["max_score"], row


def test_postbuild_installs_the_labkit_kernel_for_binders_python(binder):
    python, _, env = binder
    spec = json.loads((Path(env["HOME"]) / "env/share/jupyter/kernels/labkit/kernel.json")
                      .read_text())
    assert spec["argv"][0] == str(python) and spec["display_name"] == "labkit (Python)"
