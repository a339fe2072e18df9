"""`labkit lab`: the labkit kernel, and JupyterLab's command line as root and not."""

import json
import sys
from pathlib import Path

import pytest

from labkit.ui import cli, lab
from labkit.ui.cli import classroom


def test_the_kernel_is_this_interpreter_under_labkits_name(tmp_path):
    where = lab.install_kernel(prefix=str(tmp_path))
    assert where == tmp_path / "share/jupyter/kernels/labkit"
    spec = json.loads((where / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable and "ipykernel_launcher" in spec["argv"]
    assert spec["display_name"] == "labkit (Python)"


@pytest.mark.parametrize("euid, allowed, note", [(0, True, "live runs work"),
                                                 (1000, False, "needs JupyterLab started as root")])
def test_jupyterlab_opens_on_the_notebooks_and_says_what_works(euid, allowed, note):
    command = lab.lab_command(port=8899, browser=False, euid=euid)
    assert Path(command.argv[0]).name == "jupyter" and command.argv[1] == "lab"
    assert f"--ServerApp.root_dir={lab.NOTEBOOKS}" in command.argv
    assert {"--port=8899", "--no-browser", "--ip=127.0.0.1"} <= set(command.argv)
    assert ("--allow-root" in command.argv) == allowed
    assert any(note in n for n in command.notes)
    assert "listening on 127.0.0.1 only" in command.notes


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
