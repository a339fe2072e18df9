"""Under sudo, what labkit writes belongs to the user who ran it, and nothing else changes
hands (labkit.runs.owner): it needs root, to own files and give them away."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.runs.owner import hand_back, invoking_user
from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
USER = (65534, 65534)


@pytest.fixture
def as_root():
    require(os.geteuid() == 0, "needs root to own files and give them away")


def test_sudo_names_the_user_and_root_alone_names_nobody():
    sudo = {"SUDO_UID": "1000", "SUDO_GID": "1001"}
    assert invoking_user(sudo, euid=0) == (1000, 1001)
    assert invoking_user(sudo, euid=1000) is None  # not root: nothing to hand back
    assert invoking_user({}, euid=0) is None
    assert invoking_user({"SUDO_UID": "0", "SUDO_GID": "0"}, euid=0) is None


def test_only_what_root_made_since_the_command_began_is_handed_back(as_root, tmp_path):
    old = tmp_path / "old.txt"
    old.write_text("before")
    os.utime(old, ns=(1, 1))
    began = time.time_ns() - 1_000_000_000
    (tmp_path / "run/agents").mkdir(parents=True)
    (tmp_path / "run/agents/g1.log").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git/index").write_text("git's")
    (tmp_path / "run/passwd").symlink_to("/etc/passwd")
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("a user's")
    os.chown(theirs, 1000, 1000)

    changed = hand_back([tmp_path], USER, began)
    owner = {p.relative_to(tmp_path).as_posix(): (os.lstat(p).st_uid, os.lstat(p).st_gid)
             for p in tmp_path.rglob("*")}
    assert owner["run"] == owner["run/agents"] == owner["run/agents/g1.log"] == USER
    assert owner["run/passwd"] == USER and os.stat("/etc/passwd").st_uid == 0  # the link
    assert owner["old.txt"] == (0, 0) and owner[".git/index"] == (0, 0)
    assert owner["theirs.txt"] == (1000, 1000)
    assert changed == 5  # tmp_path itself, run, agents, g1.log, the link
    assert hand_back([tmp_path], USER, began) == 0


@pytest.mark.parametrize("command", [["figures", "data/sample/nvlink/inside", "--out", "{}/f"],
                                     ["inspect", "topologies/bottleneck.yaml", "--html",
                                      "{}/page.html"]])
def test_labkit_under_sudo_leaves_what_it_wrote_to_the_user(as_root, tmp_path, command):
    env = {**os.environ, "SUDO_UID": "65534", "SUDO_GID": "65534",
           "PYTHONDONTWRITEBYTECODE": "1"}  # the checkout's own files stay as they are
    done = subprocess.run([sys.executable, "-m", "labkit.ui.cli",
                           *(a.format(tmp_path) for a in command)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    files = list(tmp_path.rglob("*"))
    assert files and all(os.lstat(f).st_uid == 65534 for f in files)
    assert os.lstat(tmp_path).st_uid == 0  # made by the test, before labkit ran


def test_root_names_the_revision_of_a_checkout_another_user_owns(as_root, tmp_path):
    """sudo in a user's clone: git refuses a repository root does not own unless told it
    is safe; labkit tells it, and leaves the user's index untouched."""
    from dataclasses import replace

    from labkit.model import paths
    from labkit.runs.provenance import git_revision

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["chown", "-R", f"{USER[0]}:{USER[1]}", str(clone)], check=True)
    head = subprocess.run(["git", "-c", f"safe.directory={clone}", "-C", str(clone),
                           "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    index = (clone / ".git/index").stat()
    with paths.use(replace(paths.current(), repo=clone)):
        assert git_revision() == head
    assert (clone / ".git/index").stat().st_uid == USER[0]
    assert (clone / ".git/index").stat().st_mtime_ns == index.st_mtime_ns
