"""A program's rank slowed for real: its cgroup's CPU quota (a straggler, ``slow`` on a
host whose rank is a program's).

A rank that computes on one CPU and is allowed ``1 / factor`` of one CPU takes ``factor``
times as long. Where the CPU quota is, depends on the machine:

* **cgroup v2 with its cpu controller** (a pure v2 machine, Debian's default): the
  controller is enabled down to the rank's cgroup (``+cpu`` in each ancestor's
  ``cgroup.subtree_control`` from labkit's own top cgroup down; the machine's root must
  give it to its children already, as systemd does) and its ``cpu.max`` is written
  (``max`` again when the straggler ends);
* **a hybrid machine** whose ``cpu`` controller is bound to cgroup v1: a v1 ``cpu``
  cgroup of the rank's own, ``<v1 cpu mount>/labkit/<run id>/<policy>/<host>``, made
  (each directory recorded in the run registry, kind ``cgroup``, removed with the run),
  the rank's processes moved in (their v2 cgroup, which marks and counts their packets,
  stays theirs: the hierarchies are apart), and its ``cpu.cfs_quota_us`` written (-1
  when the straggler ends). What the rank starts later stays in it.

Where neither is there, :func:`problem` says so, and a run with such a straggler is
refused as its events are built, before the traffic starts.
"""

from __future__ import annotations

from pathlib import Path

from labkit.kernel import bpf
from labkit.kernel.cgroups import TOP, Cgroup, CgroupError, cgroup2_root, mounted

PERIOD_US = 5_000  # the quota's period: short, so that a burst of compute longer than it is
# stretched by the factor (a period's quota is not saved up while the rank waits)


def v1_cpu_root(mountinfo: str | None = None) -> Path | None:
    """Where a cgroup v1 hierarchy with the ``cpu`` controller is mounted, or None."""
    return mounted("cgroup", "cpu", mountinfo)


def v2_offers_cpu() -> bool:
    """Whether the cgroup v2 root gives its children the cpu controller (labkit enables it
    below its own top cgroup, never at the machine's root: a global setting)."""
    root = cgroup2_root()
    try:
        return root is not None and \
            "cpu" in (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def problem() -> str | None:
    """Why a program's rank cannot be slowed on this machine (None: it can)."""
    if v2_offers_cpu() or v1_cpu_root():
        return None
    return ("this machine offers no cpu controller (neither cgroup v2's nor a v1 cpu "
            "hierarchy): a program's rank cannot be given a CPU quota")


def quota(group: Cgroup, factor: float, label: str, record: bpf.Recorder) -> None:
    """Allow the rank in ``group`` (its v2 cgroup) ``1 / factor`` of one CPU (factor 1:
    no limit); ``label`` names its v1 cgroup (``<run id>/<policy>/<host>``)."""
    share = int(PERIOD_US / factor)
    if v2_offers_cpu():
        _enable_cpu(group.path)
        _write(group.path / "cpu.max", f"{'max' if factor <= 1 else share} {PERIOD_US}")
        return
    root = v1_cpu_root()
    if root is None:
        raise CgroupError(problem() or "no cpu controller")
    here = root
    for part in (TOP, *label.split("/")):
        here = here / part
        if not here.exists():
            try:
                here.mkdir()
            except OSError as exc:
                raise CgroupError(f"cannot make the cgroup {here}: {exc.strerror}") from exc
            record("cgroup", path=str(here), **({"shared": True} if part == TOP else {}))
    for pid in group.pids():
        try:
            (here / "cgroup.procs").write_text(f"{pid}\n")
        except ProcessLookupError:
            continue  # it has just exited
        except OSError as exc:
            raise CgroupError(f"cannot move pid {pid} into {here}: {exc.strerror}") from exc
    _write(here / "cpu.cfs_period_us", str(PERIOD_US))
    _write(here / "cpu.cfs_quota_us", str(-1 if factor <= 1 else share))


def _enable_cpu(path: Path) -> None:
    """The cpu controller enabled from labkit's top cgroup down to ``path``'s parent."""
    root = cgroup2_root()
    assert root is not None, "v2_offers_cpu() said there is one"
    here = root
    for part in path.relative_to(root).parts[:-1]:
        here = here / part
        control = here / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            _write(control, "+cpu")


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value + "\n")
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc
