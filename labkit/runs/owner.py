"""Files belong to the person who ran labkit: what labkit writes under ``sudo`` (run
directories, models, figures, Python's byte-code caches in a checkout) is handed to the
user sudo names (``SUDO_UID``/``SUDO_GID``), not left to root.

Only what root owns and what changed since the command began is handed back, and only below
the paths given: such a file is labkit's, made under sudo (a ``--out`` of ``/tmp`` hands
back what labkit wrote there, not the rest of /tmp). Nothing is followed through a
symbolic link.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SKIP = frozenset({".git", ".venv"})  # the venv is make's (its own hand-back), git's is git's


def invoking_user(environ: Mapping[str, str] | None = None,
                  euid: int | None = None) -> tuple[int, int] | None:
    """(uid, gid) of the user who ran labkit with sudo; None when not under sudo as root."""
    env = os.environ if environ is None else environ
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    try:
        uid, gid = int(env["SUDO_UID"]), int(env["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return None if uid == 0 else (uid, gid)


def hand_back(paths: Iterable[Path], owner: tuple[int, int], since_ns: int = 0,
              skip: frozenset = SKIP) -> int:
    """Give ``owner`` every file and directory at or below ``paths`` that root owns and
    that was modified from ``since_ns`` (wall clock) on (folders named in ``skip`` are not
    entered); how many changed."""
    uid, gid = owner
    changed = 0

    def mine(path: str) -> None:
        nonlocal changed
        try:
            st = os.lstat(path)
            if st.st_uid == 0 and st.st_mtime_ns >= since_ns:
                os.chown(path, uid, gid, follow_symlinks=False)
                changed += 1
        except FileNotFoundError:  # gone meanwhile
            pass

    for top in paths:
        if not top.exists():
            continue
        mine(str(top))
        if not top.is_dir() or top.is_symlink():
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in skip]
            for name in dirs + files:
                mine(os.path.join(root, name))
    return changed
