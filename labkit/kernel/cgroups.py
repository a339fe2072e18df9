"""Control groups (cgroup v2) for the processes a run starts.

Each fabric's processes (the Mininet node shells, and every process labkit starts in a
node, with whatever they start in turn) run in ``<cgroup2>/labkit/<run-id>/<policy>/
labkit.fabric``, and each rank of a scenario's ``kind: program`` in a cgroup of its own,
``<cgroup2>/labkit/<run-id>/<policy>/<host>``, where ``<cgroup2>`` is wherever this
machine mounts the v2 hierarchy (``/sys/fs/cgroup`` on a pure v2 machine,
``/sys/fs/cgroup/unified`` on a hybrid one: read from ``/proc/self/mountinfo``). What a
cgroup gives labkit, for processes it did not write:

* every socket they open carries the cgroup, which the job marker
  (``bpf/jobmark.bpf.c``) reads on each packet: that is how the job's traffic is told
  apart, on whatever ports it uses;
* ``cgroup.kill`` ends every process in it at once, children included, however they
  were started and whatever they did to their environment (teardown and ``labkit
  clean`` kill a program's ranks so first, and the rest of a fabric's processes so once
  their polite stop is over);
* ``cpu.stat`` is the CPU the rank used, whatever threads and children it had.

No controller is enabled: the cgroups only group. Every directory is recorded in the
run registry as it is made (kind ``cgroup``) and removed, deepest first, once its
processes are gone; nothing is removed by name pattern. A Mininet node remounts
``/sys`` in its own mount namespace, so a process started in a node joins its cgroup
(the fabric's, or its rank's) through a descriptor of the cgroup's ``cgroup.procs``
opened outside, before it runs anything (:func:`joining`); a node's shell is moved in
by pid as the node is made, before it runs any command.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from labkit.kernel import bpf

MOUNTINFO = Path("/proc/self/mountinfo")
TOP = "labkit"  # labkit's cgroups live under <cgroup2>/labkit/
FABRIC = "labkit.fabric"  # a fabric's processes: a name no host or policy has (no ".")
KILL_WAIT_S = 5.0


class CgroupError(RuntimeError):
    """A cgroup could not be made, entered or removed; the message says what to do."""


def mounted(fstype: str, option: str | None = None, mountinfo: str | None = None
            ) -> Path | None:
    """Where the first mount of ``fstype`` (with ``option`` among its super options, a
    cgroup v1 hierarchy's controller) is, from ``/proc/self/mountinfo``, or None."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    for line in text.splitlines():
        described = line.split(" - ", 1)[1].split() if " - " in line else []
        if len(described) < 3:
            continue
        kind, _source, options = described[:3]
        if kind == fstype and (option is None or option in options.split(",")):
            return Path(line.split()[4].replace("\\040", " "))
    return None


def cgroup2_root(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (the first such mount), or None."""
    return mounted("cgroup2", mountinfo=mountinfo)


def problem() -> str | None:
    """Why this machine cannot give a program's ranks their cgroups, with the fix (None:
    it can)."""
    root = cgroup2_root()
    if root is None:
        return ("no cgroup v2 hierarchy is mounted: a program's ranks need one (mount it, "
                "e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`)")
    if not os.access(root, os.W_OK):
        return (f"the cgroup v2 hierarchy at {root} is not writable here: a program's ranks "
                "need cgroups of their own (run as root, outside a read-only container mount)")
    return None


def require_root() -> Path:
    """The cgroup v2 mount, or CgroupError with the fix."""
    root = cgroup2_root()
    if root is None:
        raise CgroupError("no cgroup v2 hierarchy is mounted: a program's ranks need one "
                          "(mount it, e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`; "
                          "see `labkit doctor`)")
    return root


@dataclass(frozen=True)
class Cgroup:
    """One cgroup: its directory, its id (the directory's inode, what
    ``bpf_skb_cgroup_id`` returns) and its depth below the hierarchy's root."""

    path: Path
    id: int
    level: int

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into this cgroup."""
        try:
            (self.path / "cgroup.procs").write_text(f"{pid}\n")
        except OSError as exc:
            raise CgroupError(f"cannot move pid {pid} into {self.path}: {exc.strerror}") \
                from exc

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def cpu_s(self) -> float:
        """CPU seconds its processes used (user + system), from ``cpu.stat``."""
        try:
            stat = dict(line.split() for line in (self.path / "cpu.stat").read_text()
                        .splitlines())
        except (OSError, ValueError):
            return 0.0
        return int(stat.get("usage_usec", 0)) / 1e6


def make(path: Path, record: bpf.Recorder | None = None, first: bool = False) -> Cgroup:
    """The cgroup at ``path`` (parents made as needed, each recorded when labkit made it);
    ``first``: teardown kills what is in it before it stops anything else (a program's
    rank). labkit's own top cgroup is every run's parent, never one run's: recorded as
    ``shared`` by each run that uses it, and removed only once it is empty."""
    root = require_root()
    rel = path.relative_to(root)
    here = root
    for part in rel.parts:
        here = here / part
        shared = here == root / TOP
        try:
            here.mkdir()
        except FileExistsError:
            if not shared:
                continue
        except OSError as exc:
            raise CgroupError(f"cannot make the cgroup {here}: {exc.strerror}") from exc
        if record:
            record("cgroup", path=str(here), **({"shared": True} if shared else
                                                  {"first": True} if first and here == path
                                                  else {}))
    return Cgroup(path, path.stat().st_ino, len(rel.parts))


def run_dir(run_id: str) -> Path:
    """The directory of a run's cgroups."""
    return require_root() / TOP / run_id


def fabric_dir(run_id: str, label: str) -> Path:
    """The directory of the cgroups of a run's fabric for ``label`` (its policy): the
    fabric's own (:data:`FABRIC`) and its ranks' (one per host)."""
    return run_dir(run_id) / label


def fabric_path(run_id: str, label: str) -> Path | None:
    """The cgroup of the processes of a run's fabric for ``label`` (its policy), or None
    where this machine has no writable cgroup v2 (``labkit doctor`` says so)."""
    return None if problem() else fabric_dir(run_id, label) / FABRIC


def joining(argv: list[str], fd: int) -> list[str]:
    """``argv`` run so that the process first joins a cgroup through ``fd`` (its
    ``cgroup.procs`` open for writing, handed to the process), closes it, then execs
    ``argv``: nothing it starts can run outside the cgroup. Bash, not sh: dash takes no
    descriptor above 9; ``-p`` so that nothing in the environment (``BASH_ENV``, exported
    functions) runs or stands in for the builtins first."""
    return ["/bin/bash", "-p", "-c", f'builtin echo 0 >&{fd} && builtin exec "$@" {fd}>&-',
            "labkit-join", *argv]


def kill(path: Path, wait_s: float = KILL_WAIT_S) -> list[int]:
    """End every process in the cgroup at ``path`` and its descendants (``cgroup.kill``,
    or SIGKILL to each pid where the kernel has no ``cgroup.kill``); wait until it is
    empty. Returns the pids that were in it."""
    group = Cgroup(path, 0, 0)
    found = group.pids()
    for sub in path.rglob("cgroup.procs"):
        found += Cgroup(sub.parent, 0, 0).pids()
    found = sorted(set(found))
    if not found:
        return []
    if (path / "cgroup.kill").exists():
        with suppress(OSError):
            (path / "cgroup.kill").write_text("1\n")
    else:
        for pid in found:
            with suppress(ProcessLookupError):
                os.kill(pid, 9)
    deadline = time.monotonic() + wait_s
    while populated(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def populated(path: Path) -> bool:
    """Whether any process is left in the cgroup at ``path`` or below it."""
    try:
        events = dict(line.split() for line in (path / "cgroup.events").read_text()
                      .splitlines())
    except (OSError, ValueError):
        return False
    return events.get("populated") == "1"


def remove(path: Path) -> str | None:
    """Kill what is left in the cgroup at ``path`` and remove its directory (and any
    cgroup a program made inside it, deepest first); None, or why it is still there."""
    if not path.exists():
        return None
    kill(path)
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with suppress(OSError):
            sub.rmdir()
    try:
        path.rmdir()
    except OSError as exc:
        return f"cgroup {path} ({exc.strerror}; pids {Cgroup(path, 0, 0).pids()})"
    return None
