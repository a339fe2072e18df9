"""Without root, each command says what needs root and what still works."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import nobody
from tests.conftest import require

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

REPO = Path(__file__).resolve().parents[2]
as_nobody = nobody.labkit


@pytest.fixture
def can_drop_root():
    import os

    require(os.geteuid() == 0 and shutil.which("setpriv") is not None,
            "needs root and setpriv to run commands as an unprivileged user")


@pytest.mark.parametrize("command", [["run", "topologies/bottleneck.yaml"], ["clean"]])
def test_privileged_commands_explain(can_drop_root, command):
    proc = as_nobody(*command)
    assert proc.returncode == 1
    assert "needs root" in proc.stderr and "labkit report" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_doctor_names_root_as_the_fix(can_drop_root):
    proc = as_nobody("doctor")
    assert proc.returncode == 1
    assert "✗ running as root" in proc.stdout and "fix: run labkit as root" in proc.stdout


@pytest.mark.parametrize("command", [["report", "data/sample/bottleneck"], ["runs"]])
def test_analysis_works_without_root(can_drop_root, command):
    proc = as_nobody(*command)
    assert proc.returncode == 0, proc.stderr


def test_doctor_as_root_finds_everything_required(bpf_ready):
    proc = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "doctor"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    for feature in ("qdisc htb", "qdisc clsact", "cls_bpf", "multipath", "BTF", "bpffs"):
        assert any(line.startswith("✓") and feature in line
                   for line in proc.stdout.splitlines()), feature
    assert "(optional)" in proc.stdout
