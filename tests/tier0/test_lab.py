"""`labkit lab`: the labkit kernel, and JupyterLab's command line as root and not (the
checkout served, so the notebooks' static figures in docs/figures/ load; notebooks/ opened)."""

import json
import sys
import tempfile
from pathlib import Path

import pytest

from labkit.model.paths import REPO_ROOT
from labkit.ui import cli, lab
from labkit.ui.cli import classroom


def test_the_kernel_is_this_interpreter_under_labkits_name(tmp_path, monkeypatch):
    staging = tmp_path / "tmp"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    where = lab.install_kernel(prefix=str(tmp_path / "env"))
    assert where == tmp_path / "env/share/jupyter/kernels/labkit"
    assert not any(staging.iterdir()), "the spec's staging folder is left behind"
    spec = json.loads((where / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable and "ipykernel_launcher" in spec["argv"]
    assert spec["display_name"] == "labkit (Python)"


@pytest.mark.parametrize("euid, allowed, note", [(0, True, "live runs work"),
                                                 (1000, False, "needs JupyterLab started as root")])
def test_jupyterlab_opens_on_the_notebooks_and_says_what_works(euid, allowed, note):
    command = lab.lab_command(port=8899, browser=False, euid=euid)
    assert Path(command.argv[0]).name == "jupyter" and command.argv[1] == "lab"
    assert f"--ServerApp.root_dir={REPO_ROOT}" in command.argv
    assert "--FileContentsManager.preferred_dir=notebooks" in command.argv
    assert {"--port=8899", "--no-browser", "--ip=127.0.0.1"} <= set(command.argv)
    assert ("--allow-root" in command.argv) == allowed
    assert any(note in n for n in command.notes)
    assert "listening on 127.0.0.1 only" in command.notes


def test_the_static_figures_are_inside_what_jupyterlab_serves():
    """Each notebook's ../docs/figures/ image resolves inside the served root (JupyterLab
    fetches it through /files/, which refuses a path outside the root)."""
    import re

    command = lab.lab_command(browser=False, euid=1000)
    served = Path(next(a for a in command.argv if a.startswith("--ServerApp.root_dir="))
                  .split("=", 1)[1]).resolve()
    opened = next(a for a in command.argv if a.startswith("--FileContentsManager.preferred_dir="))
    assert (served / opened.split("=", 1)[1]) == lab.NOTEBOOKS.resolve()
    notebooks = [nb for nb in sorted(lab.NOTEBOOKS.rglob("*.ipynb"))
                 if not any(part.startswith(".") for part in nb.relative_to(lab.NOTEBOOKS).parts)]
    images = [(nb, src) for nb in notebooks
              for src in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", nb.read_text())]
    assert any("docs/figures/" in src for _, src in images)
    for nb, src in images:
        if "://" in src:
            continue
        image = (nb.parent / src).resolve()
        assert image.is_file() and image.is_relative_to(served), (nb.name, src)
    assert any(str(lab.NOTEBOOKS) in note for note in command.notes)


def test_a_container_listens_on_every_address_and_is_told_what_that_means():
    command = lab.lab_command(browser=False, euid=0, ip="0.0.0.0")
    assert "--ip=0.0.0.0" in command.argv and "--ip=127.0.0.1" not in command.argv
    assert any("publish the port on the host's loopback" in n for n in command.notes)


def test_labkit_lab_installs_the_kernel_then_becomes_jupyterlab(monkeypatch, capsys):
    installed, ran = [], []
    monkeypatch.setattr(lab, "install_kernel", lambda user=False: installed.append(user)
                        or Path("/k/labkit"))
    monkeypatch.setattr(classroom.os, "execv", lambda path, argv: ran.append(argv))
    assert cli.main(["lab", "--kernel-only", "--user"]) == 0
    assert installed == [True] and not ran
    assert cli.main(["lab", "--no-browser"]) == 0
    assert installed == [True, False] and ran[0][1] == "lab" and "--no-browser" in ran[0]
    assert "kernel `labkit` installed in /k/labkit" in capsys.readouterr().out
