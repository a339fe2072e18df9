"""A student's fresh clone of this checkout, set up by `sudo make setup` beside the suite's
first tests, for tests/tier2/test_sudo_demo.py to run `sudo make demo` in.

`make demo` is `make setup` (the venv from the lock, the BPF objects, the hot path: half
a minute of pip and clang, and no run) and then the demo's run. The setup needs no run
lock, so it runs in the background from the moment the suite's tests are collected
(tests/conftest.py starts it when test_sudo_demo.py is among them and this is root),
beside the kernel tests that check no time; the test waits for it, then runs
`sudo make demo`, whose setup is then done and whose run has the machine to itself. The
clone is the student's (user nobody) from the start; make runs as root with the
environment sudo gives it. Stopped by its process group, and its folder removed, when the
session ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from labkit.runs import owner

REPO = Path(__file__).resolve().parents[1]
STUDENT = 65534
# the venv's packages not byte-compiled (a site may set this too): pip's compiling was half
# the setup; the demo's imports then compile what they use, as root, and the hand-back
# must give those files to the student as well
NO_COMPILE = {"PIP_NO_COMPILE": "1"}

_setup: tuple[subprocess.Popen, Path] | None = None


def sudo_environment(command: str) -> dict[str, str]:
    """What sudo's env_reset leaves ``command`` run by the student (Debian's sudoers), and
    this machine's settings for reaching the package index (which a site keeps with
    env_keep where it needs them)."""
    kept = {k: v for k, v in os.environ.items()
            if k.startswith("PIP_") or k.lower().endswith("_proxy")
            or k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "LANG", "TERM")}
    return {**kept, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
            "SUDO_USER": "nobody", "SUDO_UID": str(STUDENT), "SUDO_GID": str(STUDENT),
            "SUDO_COMMAND": f"/usr/bin/{command}"}


def start() -> None:
    """Clone this checkout for the student, then `sudo make setup` in it, in the
    background (a session of its own, so that :func:`stop` ends all it started)."""
    global _setup
    top = Path(tempfile.mkdtemp(prefix="labkit-student-"))
    os.chmod(top, 0o755)
    clone = top / "labkit"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)],
                   check=True, timeout=120)
    owner.hand_back([clone], (STUDENT, STUDENT), skip=frozenset())
    with (top / "setup.log").open("w") as log:
        proc = subprocess.Popen(["make", "setup"], cwd=clone,
                                env={**sudo_environment("make setup"), **NO_COMPILE},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _setup = (proc, clone)


def ready(timeout_s: float = 600) -> Path:
    """The clone once its setup has ended well (started now if nothing started it)."""
    if _setup is None:
        start()
    assert _setup is not None
    proc, clone = _setup
    code = proc.wait(timeout=timeout_s)
    log = (clone.parent / "setup.log").read_text()
    assert code == 0, f"sudo make setup in the student's clone exited {code}:\n{log[-3000:]}"
    return clone


def stop() -> None:
    """End the setup if it still runs (its process group, which it leads), and remove the
    clone."""
    global _setup
    if _setup is None:
        return
    proc, clone = _setup
    _setup = None
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    shutil.rmtree(clone.parent, ignore_errors=True)
