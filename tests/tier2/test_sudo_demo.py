"""Tier 2: `sudo make demo` in a student's fresh clone leaves nothing of root's in it.

The clone belongs to the student (here nobody); make runs as root with the environment
sudo gives it (SUDO_UID, SUDO_GID and SUDO_USER are what make's and labkit's hand-back
read; a real sudo would need a sudoer account made on this machine). Everything of
`make demo` runs for real: its setup (the venv from the lock, the BPF objects, the hot
path), run by `sudo make setup` beside the suite's first tests (tests/student_clone.py:
it takes no run lock), and the demo's run (one policy, a few seconds: DEMO_ARGS), which
records into the clone's data/runs. Afterwards no file in the clone, .git included, is
root's, and the run names the clone's revision."""

import json
import subprocess

import pytest

from tests import student_clone
from tests.leaks import assert_no_leaks

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure


def test_sudo_make_demo_leaves_no_file_of_roots_in_the_clone(fabric_ready):
    clone = student_clone.ready()  # `sudo make setup` done beside the first tests
    proc = subprocess.run(["make", "demo", "DEMO_ARGS=--policy fifo --duration 3"],
                          cwd=clone, env={**student_clone.sudo_environment("make demo"),
                                          **student_clone.NO_COMPILE},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    roots = [str(p.relative_to(clone)) for p in (clone, *clone.rglob("*"))
             if p.lstat().st_uid == 0]
    assert not roots, f"root owns {len(roots)} files in the clone: {roots[:10]}"
    (run,) = (clone / "data/runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    head = subprocess.run(["git", "-c", f"safe.directory={clone}", "-C", str(clone),
                           "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert manifest["labkit_revision"] == head, manifest["labkit_revision"]
    assert_no_leaks()

