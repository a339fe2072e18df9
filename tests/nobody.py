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
HOME = ["env", "HOME=/tmp"]  # the user's home, for what the command writes there


def reachable(path: Path) -> bool:
    """Whether anyone may walk down to ``path`` (every directory on the way searchable)."""
    return all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents))


def labkit(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``labkit *argv`` (cwd: the checkout) as nobody when the tests run as root, else as
    the user running them."""
    return python("-m", "labkit.ui.cli", *argv, timeout=timeout)


def python(*argv: str, env: dict[str, str] | None = None, user: int = 65534,
           timeout: float = 60) -> subprocess.CompletedProcess:
    """This interpreter with ``argv`` (cwd: the checkout) as ``user`` (uid and gid, no
    other groups) when the tests run as root, else as the user running them; ``env``
    added to the environment."""
    def added(checkout: Path | str) -> list[str]:  # labkit from the checkout as seen: a
        # subprocess with another working directory (a notebook's kernel) finds it too
        return [f"{k}={v}" for k, v in {"PYTHONPATH": str(checkout), **(env or {})}.items()]

    if os.geteuid() != 0:
        return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **(env or {})})
    drop = [*dropping_root(user), *HOME]
    if reachable(REPO):
        return subprocess.run([*drop, *added(REPO), sys.executable, *argv],
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)
    python = Path(sys.executable)
    inside = python.is_relative_to(REPO)  # the checkout's own .venv
    with tempfile.TemporaryDirectory(prefix="labkit-nobody-") as seen:
        os.chmod(seen, 0o755)
        interpreter = str(Path(seen) / python.relative_to(REPO)) if inside else str(python)
        script = 'mount --bind "$0" "$1" && cd "$1" && shift && exec "$@"'
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
             str(REPO), seen, *drop, *added(seen), interpreter, *argv],
            capture_output=True, text=True, timeout=timeout)


def command(argv: list[str], cwd: Path, env: dict[str, str], user: int = 65534,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """``argv`` in ``cwd`` (a directory anyone can reach) with only ``env`` (and PATH) in
    its environment, as ``user`` when the tests run as root, else as the user running them."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    if os.geteuid() == 0:
        argv = [*dropping_root(user), *argv]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def dropping_root(user: int) -> list[str]:
    """The command prefix that runs what follows as ``user`` (uid and gid, no other
    groups)."""
    if not shutil.which("setpriv"):
        pytest.fail("setpriv (util-linux) is needed to drop root")
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
