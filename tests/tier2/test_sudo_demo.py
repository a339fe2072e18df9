"""Tier 2: `sudo make demo` in a student's fresh clone leaves nothing of root's in it.

The clone belongs to the student (here nobody); make runs as root with the environment
sudo gives it (sudo_environment: SUDO_UID, SUDO_GID and SUDO_USER are what make's and
labkit's hand-back read; a real sudo would need a sudoer account made on this machine).
Everything of `make demo` runs for real: the venv from the lock, the BPF objects, the hot
path, and the demo's run (one policy, a few seconds: DEMO_ARGS), which records into the
clone's data/runs. Afterwards no file in the clone, .git included, is root's, and the run
names the clone's revision. About half a minute: the venv's packages come from pip's
cache, not byte-compiled (PIP_NO_COMPILE, which a site may set too: pip's compiling was
half of it), so the demo's imports compile what they use, as root, and the hand-back must
give those files to the student as well."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from labkit.runs import owner
from tests.leaks import assert_no_leaks

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

REPO = Path(__file__).resolve().parents[2]
STUDENT = 65534


def test_sudo_make_demo_leaves_no_file_of_roots_in_the_clone(fabric_ready, tmp_path):
    clone = tmp_path / "labkit"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)],
                   check=True, timeout=120)
    owner.hand_back([clone], (STUDENT, STUDENT), skip=frozenset())  # the student's clone
    proc = subprocess.run(["make", "demo", "DEMO_ARGS=--policy fifo --duration 3"],
                          # pip reads a "--no-" option's variable as the option's value:
                          # 0 is --no-compile
                          cwd=clone, env={**sudo_environment(), "PIP_NO_COMPILE": "0"},
                          capture_output=True, text=True,
                          timeout=600)
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


def sudo_environment() -> dict[str, str]:
    """What sudo's env_reset leaves a command run by the student (Debian's sudoers), and
    this machine's settings for reaching the package index (which a site keeps with
    env_keep where it needs them)."""
    kept = {k: v for k, v in os.environ.items()
            if k.startswith("PIP_") or k.lower().endswith("_proxy")
            or k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "LANG", "TERM")}
    return {**kept, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
            "SUDO_USER": "nobody", "SUDO_UID": str(STUDENT), "SUDO_GID": str(STUDENT),
            "SUDO_COMMAND": "/usr/bin/make demo"}
