"""What labkit may leave in the kernel, listed so tests can demand there is none."""

import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import suppress
from pathlib import Path

from labkit.kernel import bpf, cgroups, cpuquota, frr, registry
from labkit.kernel.netns import setns
from labkit.kernel.registry import marked


def net_namespaces() -> dict[int, str]:
    """Every network namespace alive, by inode: a path that reaches it and what holds it
    (a process's own, an open namespace fd, a bind mount in /run/netns)."""
    found: dict[int, str] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with suppress(OSError):
            found.setdefault((proc / "ns/net").stat().st_ino, str(proc / "ns/net"))
        with suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("net:["):
                        found.setdefault(int(link[5:-1]), str(fd))
    for mount in Path("/run/netns").glob("*"):
        with suppress(OSError):
            found.setdefault(mount.stat().st_ino, str(mount))
    return found


# a fabric's ports (labkit.model.topo), and the delay line's ends (labkit.kernel.fabric)
PORT_NAME = re.compile(r"[a-z][a-z0-9]{0,8}-eth\d+|dl\d+[ab]")


def _fabric_ports(path: str) -> list[str]:
    """The ports named as a fabric's in the namespace at ``path`` (entered from a thread
    of its own, as labkit.kernel.netns does)."""
    names: list[str] = []

    def look() -> None:
        with suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                setns(fd)
                names.extend(n for _, n in socket.if_nameindex() if PORT_NAME.fullmatch(n))
            finally:
                os.close(fd)

    t = threading.Thread(target=look)
    t.start()
    t.join()
    return names


# the machine's own namespaces, before any test built a fabric
MACHINE_NAMESPACES = set(net_namespaces())


def labkit_objects() -> dict[str, list[str]]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    progs = [f"{p['id']}:{p.get('name')}" for p in json.loads(out.stdout or "[]")
             if str(p.get("name", "")).startswith("lk_")]
    # a struct_ops map lives until the last socket that used it has closed; a registered
    # TCP congestion control is listed in tcp_available_congestion_control
    out = subprocess.run(["bpftool", "-j", "struct_ops", "show"], capture_output=True,
                         text=True)
    struct_ops = [f"{m.get('id')}:{m.get('name')}" for m in json.loads(out.stdout or "[]")
                  if str(m.get("name", "")).startswith("lk_")]
    struct_ops += [f"registered: {cc}" for cc in Path(
        "/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
                   if cc.startswith("lk_")]
    pins = [str(p) for p in bpf.PIN_ROOT.rglob("*")] if bpf.PIN_ROOT.exists() else []
    registries = [str(p) for pattern in ("*.jsonl", "*.json")  # *.json: an older labkit's
                  for p in registry.REGISTRY_DIR.glob(pattern)]
    procs = []
    commands = set(marked())  # what scenarios' command entries started, and their children
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(args).decode(errors="replace")
        if "labkit.traffic." in text or " -is mininet:" in text or "/_delayline" in text or \
                "/labkit-frr-" in text or int(cmdline.parent.name) in commands:
            procs.append(f"{cmdline.parent.name}: {text.strip()}")
    root = cgroups.cgroup2_root()
    top = root / cgroups.TOP if root else None
    groups = [str(p) for p in top.rglob("*") if p.is_dir()] if top and top.exists() else []
    if top and top.exists():
        groups.append(str(top))
    v1 = cpuquota.v1_cpu_root()  # a program's straggler's CPU quota, on a hybrid machine
    if v1 and (v1 / cgroups.TOP).exists():
        groups += [str(p) for p in (v1 / cgroups.TOP).rglob("*") if p.is_dir()]
        groups.append(str(v1 / cgroups.TOP))
    namespaces = [f"net:[{inode}] at {path}, with {', '.join(ports)}"
                  for inode, path in net_namespaces().items() if inode not in MACHINE_NAMESPACES
                  and (ports := _fabric_ports(path))]
    work = [str(p) for p in registry.WORK_DIR.glob("*")]
    # an MPI job's session directories (labkit.traffic.programs: tempfile's, then registered)
    work += [str(p) for p in Path(tempfile.gettempdir()).glob("labkit-mpi-*")]
    # a routed fabric's FRR files and pathspaces (labkit.kernel.frr: registered)
    work += [str(p) for p in Path(tempfile.gettempdir()).glob("labkit-frr-*")]
    work += [str(p) for p in frr.RUN_DIR.glob("labkit-frr-*")]
    return {"bpf_programs": progs, "struct_ops": struct_ops, "pins": pins,
            "registries": registries, "processes": procs, "cgroups": groups,
            "namespaces": namespaces, "work_dirs": work}


# what a run killed before the suite started left (named at the top of the suite's report:
# `sudo labkit clean` removes it), so that it is not counted as a test's leak
BEFORE = labkit_objects() if os.geteuid() == 0 else defaultdict(list)


def before_the_suite() -> list[str]:
    """What labkit objects were there before the suite ran, one line each."""
    return [f"{kind}: {item}" for kind, items in BEFORE.items() for item in items]


def without_leftovers_note(lines: list[str]) -> list[str]:
    """A command's stderr lines without the note `labkit run` prints while such
    objects are there (labkit.kernel.registry.leftovers_line)."""
    return [line for line in lines
            if not (line.startswith("note: ") and registry.LEFTOVERS in line)]


def assert_no_leaks(timeout_s: float = 5.0) -> None:
    """Fail unless nothing labkit creates is left (the kernel frees some objects lazily),
    besides what was there before the suite."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {k: [i for i in v if i not in BEFORE[k]] for k, v in labkit_objects().items()}
        left = {k: v for k, v in left.items() if v}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"labkit left objects behind: {left}"


def wait_for_ranks(proc: subprocess.Popen, script: str, ranks: int, seconds: float = 120
                   ) -> None:
    """Until ``ranks`` processes of the run ``proc`` (a user's program, ``script`` in their
    command lines) are running, then 2 s more (well into their collectives); fails if the
    run ends first or they never start."""
    deadline = time.monotonic() + seconds
    while sum(script in p for p in labkit_objects()["processes"]) < ranks:
        ended = proc.poll() is not None
        assert time.monotonic() < deadline and not ended, \
            f"the ranks never started: {ended and proc.stderr and proc.stderr.read()}"
        time.sleep(0.2)
    time.sleep(2)
