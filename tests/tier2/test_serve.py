"""labkit serve: lab 2 with the instructor's answers, its live cell run from a notebook
kernel that is not root by the service, every check passing on that run (lab 2's one test
on a real fabric), the run owned by the student; a user outside the service's group is
refused."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import nobody
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
LAB2 = "notebooks/labs/lab2-protect-the-collective.ipynb"
NOBODY, DAEMON = 65534, 1  # nobody's group is nogroup (65534); daemon's is daemon (1)


@pytest.fixture
def place():
    """A folder anyone may enter (pytest's own is root's alone)."""
    where = Path(tempfile.mkdtemp(prefix="labkit-serve-test-"))
    os.chmod(where, 0o755)
    yield where
    shutil.rmtree(where)


@pytest.fixture
def service(fabric_ready, place):
    """labkit serve (root) for group nogroup, on a socket under ``place``."""
    sock = place / "serve.sock"
    proc = subprocess.Popen([sys.executable, "-m", "labkit.ui.cli", "serve", "--group",
                             "nogroup", "--socket", str(sock)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(200):
            if sock.is_socket() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert sock.is_socket(), proc.communicate(timeout=5)[0]
        yield sock
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
        print(out)
    assert not sock.exists()  # the service removes its socket
    assert_no_leaks()


def home_of(tmp_path: Path, name: str, uid: int) -> Path:
    home = tmp_path / name
    home.mkdir()
    os.chown(home, uid, uid)
    return home


def test_lab2s_live_cell_runs_through_the_service_as_the_student(service, place):
    home = home_of(place, "student", NOBODY)
    runs = home / "runs"
    done = nobody.python("-m", "labkit.ui.labs", LAB2, "--solution", timeout=420,
                         env={"HOME": str(home), "LABKIT_SERVE": str(service),
                              "LABKIT_RUNS_DIR": str(runs)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[pass]" in done.stdout and "[todo]" not in done.stdout, done.stdout
    (run,) = list(runs.iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["policies"] == ["isolated", "priority"]
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in (run, *run.rglob("*"))}
    assert owners == {(NOBODY, NOBODY)}, owners


def test_a_user_outside_the_group_is_refused(service, place):
    home = home_of(place, "other", DAEMON)
    asked = nobody.python(
        "-c", "from labkit.ui import serve; import sys\n"
        "try:\n    serve.request({}, 'x', out=sys.argv[1], path=sys.argv[2])\n"
        "except serve.Refused as exc:\n    print(exc); sys.exit(3)",
        str(home / "runs"), str(service), user=DAEMON, env={"HOME": str(home)})
    assert asked.returncode == 3, asked.stdout + asked.stderr
    assert "admits root and its group only" in asked.stdout
    assert not any((home / "runs").iterdir())
