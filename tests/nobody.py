"""labkit as an unprivileged user, from this checkout wherever root cloned it.

Root may clone into ``/root`` (mode 0700), which user ``nobody`` cannot enter. Then the
command runs in a private mount namespace of its own, where the checkout is bind-mounted on
an empty directory under /tmp that anyone can reach; the mount ends with the command, and
the directory is removed. Everything else (the interpreter's packages, Mininet) is where it
always is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/tmp"]


def reachable(path: Path) -> bool:
    """Whether anyone may walk down to ``path`` (every directory on the way searchable)."""
    return all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents))


def labkit(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``labkit *argv`` (cwd: the checkout) as nobody when the tests run as root, else as
    the user running them."""
    if os.geteuid() != 0:
        return subprocess.run([sys.executable, "-m", "labkit.ui.cli", *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)
    if not shutil.which("setpriv"):
        pytest.fail("setpriv (util-linux) is needed to drop root")
    if reachable(REPO):
        return subprocess.run([*NOBODY, sys.executable, "-m", "labkit.ui.cli", *argv],
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)
    python = Path(sys.executable)
    inside = python.is_relative_to(REPO)  # the checkout's own .venv
    with tempfile.TemporaryDirectory(prefix="labkit-nobody-") as seen:
        os.chmod(seen, 0o755)
        interpreter = str(Path(seen) / python.relative_to(REPO)) if inside else str(python)
        script = 'mount --bind "$0" "$1" && cd "$1" && shift && exec "$@"'
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
             str(REPO), seen, *NOBODY, interpreter, "-m", "labkit.ui.cli", *argv],
            capture_output=True, text=True, timeout=timeout)
