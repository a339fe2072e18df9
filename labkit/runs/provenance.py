"""What recorded a run: labkit's git revision, the files' hashes, the Python packages and
the tools' versions (clang, bpftool, iproute2, Mininet, libbpf), gathered as the
:class:`~labkit.model.manifest.Provenance` every recording's manifest keeps. The kernel
layer (Mininet's, libbpf's versions) is imported only when they are gathered: reading a
recorded run never loads it."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from labkit.model import paths
from labkit.model.manifest import Provenance
from labkit.traffic.hotpath import LIBRARY as HOTPATH


def git_revision() -> str:
    """labkit's commit, ``-dirty`` when a tracked file has changed outside ``data/`` and
    ``docs/figures/``: the revision names the code that recorded, and those hold
    recordings and the figures drawn from them (``make samples`` replaces the shipped ones
    as it goes)."""
    # root (sudo) in a user's checkout: git refuses a repository another user owns unless
    # told it is safe; and status writes nothing (the index stays the user's)
    repo = paths.current().repo
    git = ["git", "-c", f"safe.directory={repo}", "--no-optional-locks", "-C", str(repo)]
    try:
        rev = subprocess.run([*git, "rev-parse", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)data", ":(exclude)docs/figures"],
                               capture_output=True, text=True).stdout
        return rev + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stamp(places: Iterable[str]) -> tuple[tuple[str, int | None], ...]:
    """Each path's modification time (None: not there). Installing or removing a package
    or a tool changes its folder's: what was read from them holds while this does (a
    notebook's or the tests' process records many runs; reading it all again took 90 ms
    a run)."""
    def mtime(path: str) -> int | None:
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return None
    return tuple((p, mtime(p)) for p in places)


def python_packages() -> dict[str, str]:
    """Every Python distribution importable here, by its canonical name: its version. The
    first one on ``sys.path`` wins, as for an import: copies vendored inside other packages
    (setuptools puts its own on the path once something imports it) come later."""
    return dict(_packages(_stamp(sys.path)))


@lru_cache(maxsize=1)
def _packages(_: tuple) -> tuple[tuple[str, str], ...]:
    from importlib.metadata import distributions

    found: dict[str, str] = {}
    for d in distributions():
        if d.metadata["Name"]:
            found.setdefault(d.metadata["Name"].lower().replace("_", "-"), d.version)
    return tuple(sorted(found.items()))


def provenance() -> Provenance:
    """What records here: this machine, its tools and labkit's own files."""
    where = paths.current()
    lock = where.repo / "requirements.lock"
    objects = sorted(where.bpf_build.glob("*.bpf.o"))
    return Provenance(
        kernel=platform.release(), labkit_revision=git_revision(),
        bpf_objects={o.name: sha256_file(o) for o in objects},
        python=platform.python_version(), packages=python_packages(),
        requirements_lock=sha256_file(lock) if lock.exists() else None,
        tools=_tool_versions(), cpus=os.cpu_count(), host=socket.gethostname(),
        hotpath=sha256_file(HOTPATH) if HOTPATH.exists() else None)


TOOLS = (("clang", ["clang", "--version"]), ("bpftool", ["bpftool", "version"]),
         ("iproute2", ["ip", "-V"]))


def _tool_versions() -> dict[str, str]:
    """Each tool's version line (the binaries' found on ``PATH``, read again when one
    changes), Mininet's and libbpf's (loaded once by a process)."""
    found = [shutil.which(argv[0]) or argv[0] for _, argv in TOOLS]
    return dict(_tools(_stamp(found)))


@lru_cache(maxsize=1)
def _tools(_: tuple) -> tuple[tuple[str, str], ...]:
    from labkit.kernel import bpf, fabric

    out = {}
    for name, argv in TOOLS:
        try:
            out[name] = subprocess.run(argv, capture_output=True, text=True,
                                       timeout=10).stdout.splitlines()[0].strip()
        except (OSError, IndexError, subprocess.TimeoutExpired):
            out[name] = "not found"
    out["mininet"] = fabric.mininet_version()
    out["libbpf"] = bpf.libbpf_version()
    return tuple(out.items())
