"""`labkit doctor`'s report: as root, one line per check and its fix; without root, which
checks need root and what a student does instead (`labkit serve`, what needs no root).
Stand-in check results; the whole command as nobody (it makes no kernel object then)."""

from pathlib import Path

from labkit.ui import doctor
from labkit.ui.doctor import Check
from tests import nobody

FOUND = [Check("running as root", False, "", doctor.ROOT_FIX, needs_root=True),
         Check("kernel BTF (/sys/kernel/btf/vmlinux)", True),
         Check("qdisc tracepoints (qdisc:qdisc_enqueue)", False, "tracefs is readable by "
               "root only", "needs root, tracefs mounted", needs_root=True),
         Check("tool iperf3", False, "", "apt-get install iperf3"),
         Check("cgroup v2 (ranks)", False, "not writable here", "a run as root makes them",
               required=False, needs_root=True),
         Check("Chromium (optional)", False, "not installed", "apt-get install chromium",
               required=False)]


def test_as_root_each_failed_check_has_its_fix_and_the_verdict_counts_them():
    assert doctor.report(FOUND, root=True) == [
        "[red]✗[/] running as root\n    fix: " + doctor.ROOT_FIX,
        "[green]✓[/] kernel BTF (/sys/kernel/btf/vmlinux)",
        "[red]✗[/] qdisc tracepoints (qdisc:qdisc_enqueue) [dim]— tracefs is readable by "
        "root only[/]\n    fix: needs root, tracefs mounted",
        "[red]✗[/] tool iperf3\n    fix: apt-get install iperf3",
        "[dim]○[/] cgroup v2 (ranks) [dim]— not writable here[/]\n    fix: a run as root "
        "makes them",
        "[dim]○[/] Chromium (optional) [dim]— not installed[/]\n    fix: apt-get install "
        "chromium",
        "", "[red]3 required check(s) failed[/]"]
    assert doctor.report(FOUND[1:2], root=True)[1:] == ["", "[green]ready[/]"]


def test_without_root_the_checks_that_need_it_say_so_and_serve_is_the_way():
    lines = doctor.report(FOUND, root=False)
    text = "\n".join(lines)
    assert lines[0].endswith("fix: " + doctor.ROOT_FIX)  # the root check keeps its fix
    assert lines[2].endswith(doctor.NEEDS_ROOT) and lines[4].endswith(doctor.NEEDS_ROOT)
    assert lines[3].endswith("fix: apt-get install iperf3")  # not root's: its own fix
    assert lines[7] == ("[red]3 required check(s) failed[/]: 2 need root (running as root, "
                        "qdisc tracepoints), 1 other(s) above")
    assert lines[9:] == doctor.without_root(None)
    assert "sudo labkit serve" in text and "mount" not in text
    for works in ("labkit report", "make lab", "labkit validate", "labkit inspect"):
        assert works in text


def test_without_root_a_listening_service_is_named():
    lines = doctor.report(FOUND[:1], root=False, serving=Path("/run/labkit/serve.sock"))
    assert "`labkit serve` listens here (/run/labkit/serve.sock)" in lines[-3]


def test_without_root_nothing_to_say_when_only_other_checks_fail():
    assert doctor.report(FOUND[3:4], root=False)[-1] == "[red]1 required check(s) failed[/]"


def test_a_mounted_cgroup_hierarchy_needs_root_not_a_mount(monkeypatch):
    monkeypatch.setattr(doctor.cgroups, "cgroup2_root", lambda: Path("/sys/fs/cgroup"))
    monkeypatch.setattr(doctor.cgroups, "problem", lambda: "not writable here")
    student, root = doctor._cgroup_check(False), doctor._cgroup_check(True)
    assert student.needs_root and "mount" not in student.fix
    assert not root.needs_root and root.fix.startswith("mount -t cgroup2")
    monkeypatch.setattr(doctor.cgroups, "cgroup2_root", lambda: None)
    assert doctor._cgroup_check(False).fix.startswith("mount -t cgroup2")


def test_doctor_as_a_user_without_root():
    done = nobody.labkit("doctor", timeout=120)  # as root: as nobody, via setpriv
    assert done.returncode == 1, done.stderr
    assert "✗ running as root" in done.stdout and "fix: run labkit as root" in done.stdout
    assert "need root (running as root" in done.stdout and "labkit serve" in done.stdout
