"""``labkit doctor``: can this machine run labkit, and if not, what to do about it.

Kernel features are detected for real, not assumed: a probe process runs in a
throwaway network namespace (``unshare --net``), makes a veth pair there and
tries each qdisc, clsact with a BPF classifier, and a multipath route. The
namespace, and everything in it, ends with the probe.

Without root, the checks that only root can pass say so (``needs_root``), and the report
ends with what a user without root does instead (:func:`report`).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.kernel import bpf, cgroups, frr, registry
from labkit.kernel.skeletons import CLASSIFIER
from labkit.model import paths
from labkit.model.scenario_spec import DEFAULT_PYTHON
from labkit.traffic import hotpath

REQUIRED_QDISCS = ("htb", "bfifo", "clsact")
OPTIONAL_QDISCS = ("fq", "netem", "prio", "red", "fq_codel", "tbf")
TC_H_ROOT = 0xFFFFFFFF
TOOLS = {"mnexec": "mininet", "clang": "clang", "bpftool": "bpftool", "iperf3": "iperf3",
         "tcpdump": "tcpdump", "tshark": "tshark", "ping": "iputils-ping", "unshare": "util-linux"}
PACKAGES = ("mininet", "pyroute2", "scapy", "polars", "plotly", "ipywidgets")
ROOT_FIX = "run labkit as root (sudo); recorded runs can be analysed without root"
NEEDS_ROOT = "needs root (the end of this report says what to do without it)"


def without_root(serving: Path | None) -> list[str]:
    """What a user without root does instead: ``labkit serve`` (listening at ``serving``,
    or not here yet), root on a machine of their own, and what needs no root."""
    serve = (f"`labkit serve` listens here ({serving}): lab 2's live cells run through it"
             if serving else "your instructor runs `sudo labkit serve` for your group, and "
             "your notebooks' live cells (lab 2) run through it")
    return ["without root: a run needs root (it builds network namespaces and loads eBPF "
            "programs)",
            f"  · on a shared machine, {serve} (docs/classroom.md)",
            "  · on a machine of your own: `sudo .venv/bin/labkit doctor`, then `sudo "
            ".venv/bin/labkit run ...`",
            "  · without root you can analyse recorded runs (`labkit report "
            "data/sample/bottleneck`, `labkit figures`, `labkit runs`), use the notebooks and "
            "labs 1, 4 and 5 (`make lab`), and check or draw a scenario (`labkit validate`, "
            "`labkit inspect`)"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    fix: str = ""
    required: bool = True
    needs_root: bool = False  # fails (or cannot be checked) only because we are not root


def _mounted(path: str) -> bool:
    return os.path.ismount(path)


def checks() -> list[Check]:
    root = os.geteuid() == 0
    out = [Check("running as root", root, "", ROOT_FIX, needs_root=not root)]
    out.append(Check("kernel BTF (/sys/kernel/btf/vmlinux)",
                     Path("/sys/kernel/btf/vmlinux").exists(), "",
                     "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"))
    out.append(Check("bpffs mounted at /sys/fs/bpf", _mounted("/sys/fs/bpf"), "",
                     "mount -t bpf bpf /sys/fs/bpf   (make setup does this)"))
    out.append(Check("tracefs mounted at /sys/kernel/tracing", _mounted("/sys/kernel/tracing"),
                     "", "mount -t tracefs tracefs /sys/kernel/tracing   (make setup does this)"))
    try:
        tracepoints = all(Path(f"/sys/kernel/tracing/events/qdisc/{e}").exists()
                          for e in ("qdisc_enqueue", "qdisc_dequeue"))
        detail = ""
    except PermissionError:
        tracepoints, detail = False, "tracefs is readable by root only"
    out.append(Check("qdisc tracepoints (qdisc:qdisc_enqueue, qdisc_dequeue)", tracepoints,
                     detail, "needs root, tracefs mounted and CONFIG_NET_SCHED tracepoints",
                     needs_root=bool(detail)))
    out += _kernel_probe()
    for tool, pkg in TOOLS.items():
        path = shutil.which(tool)
        out.append(Check(f"tool {tool}", path is not None, path or "",
                         f"apt-get install {pkg}   (make setup does this)"))
    for pkg in PACKAGES:
        try:
            importlib.import_module(pkg)
            out.append(Check(f"python package {pkg}", True))
        except ImportError as exc:
            out.append(Check(f"python package {pkg}", False, str(exc),
                             "make setup   (creates .venv with Debian's Mininet visible)"))
    for name in bpf.object_names():
        out.append(_bpf_object_check(name))
    problem = hotpath.stale()
    out.append(Check("the rank agents' hot path (labkit/traffic/_hotpath.so)", problem is None,
                     problem or "built", "make hotpath   (make setup does this)"))
    out.append(_cgroup_check(root))
    torch = subprocess.run([DEFAULT_PYTHON, "-c", "import torch.distributed"],
                           capture_output=True, text=True, timeout=120) \
        if os.path.exists(DEFAULT_PYTHON) else None
    out.append(Check(f"PyTorch for {DEFAULT_PYTHON} (topologies/pytorch-ddp.yaml, optional)",
                     torch is not None and torch.returncode == 0,
                     "importable" if torch is not None and torch.returncode == 0
                     else "not installed", "make torch   (Debian's python3-torch)",
                     required=False))
    routing = frr.problem()
    out.append(Check("FRR for routed fabrics (fabric.routing: bgp, topologies/faults.yaml; "
                     "optional)", routing is None,
                     routing or f"zebra, bfdd and bgpd in {frr.FRR_DIR}",
                     "apt-get install frr   (make setup does this)", required=False))
    leftovers = registry.leftovers_line()
    out.append(Check("no objects left by a killed run (optional)", leftovers is None,
                     leftovers or "", "sudo labkit clean", required=False))
    chromium = shutil.which("chromium")
    out.append(Check("Chromium for figure export (labkit figures, optional)", chromium is not None,
                     chromium or "not installed: HTML figures only",
                     "apt-get install chromium   (make setup does this)", required=False))
    return out


def _cgroup_check(root: bool) -> Check:
    """cgroup v2: mounted, and writable (without root a mounted hierarchy is not: that
    needs root, not a mount)."""
    name = "cgroup v2 (a program's ranks; every fabric's processes, killed as one)"
    mounted = cgroups.cgroup2_root()
    problem = cgroups.problem()
    if problem is None:
        return Check(name, True, str(mounted or ""), required=False)
    if mounted is not None and not root:
        return Check(name, False, problem, "a run as root makes them (sudo, or labkit serve)",
                     required=False, needs_root=True)
    return Check(name, False, problem, "mount -t cgroup2 none /sys/fs/cgroup/unified",
                 required=False)


def _bpf_object_check(name: str) -> Check:
    path = bpf.object_path(name)
    label = f"BPF object {path.name}"
    source = paths.REPO_ROOT / "bpf" / f"{name}.bpf.c"
    if not path.exists():
        return Check(label, False, "not built", "make bpf")
    if source.exists() and source.stat().st_mtime > path.stat().st_mtime:
        return Check(label, False, "older than its source", "make bpf")
    if os.geteuid() != 0:
        return Check(label, True, "built (loading it needs root)")
    try:
        with bpf.BpfObject(path):
            return Check(label, True, "built and accepted by the verifier")
    except bpf.BpfError as exc:
        reason = " | ".join(str(exc).strip().splitlines()[-3:])
        return Check(label, False, reason, "make clean-build bpf; if it persists, report it")


def _kernel_probe() -> list[Check]:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return [Check("kernel traffic-control features", False,
                      "the probe needs root and unshare(1)", "run labkit doctor as root",
                      needs_root=os.geteuid() != 0)]
    proc = subprocess.run(["unshare", "--net", "--", sys.executable, "-m", "labkit.ui.doctor",
                           "--probe"], capture_output=True, text=True, timeout=60)
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [Check("kernel traffic-control features", False,
                      (proc.stderr or proc.stdout).strip()[-300:], "report this as a bug")]
    out = []
    for q in REQUIRED_QDISCS:
        out.append(Check(f"qdisc {q}", found[q] is True, "" if found[q] is True else found[q],
                         f"load the kernel module for {q} (sch_{q}) or use a kernel with it"))
    out.append(Check("cls_bpf classifier on clsact (bpf_tc_attach)", found["cls_bpf"] is True,
                     "" if found["cls_bpf"] is True else found["cls_bpf"],
                     "needs CONFIG_NET_CLS_BPF and CONFIG_NET_SCH_INGRESS"))
    out.append(Check("IPv4 multipath routing (ECMP)", found["multipath"] is True,
                     "" if found["multipath"] is True else found["multipath"],
                     "needs CONFIG_IP_ROUTE_MULTIPATH"))
    for q in OPTIONAL_QDISCS:
        out.append(Check(f"qdisc {q} (optional)", found[q] is True,
                         "available" if found[q] is True else "not available: features that "
                         "need it stay off", "", required=False))
    return out


def report(found: list[Check], root: bool, serving: Path | None = None) -> list[str]:
    """The checks as lines of rich markup, then the verdict. As root, one line per check
    and its fix; without root, the checks that need it say so, and the report ends with
    what to do instead (:func:`without_root`; ``serving``: where `labkit serve` listens)."""
    lines = [_check_line(c, root) for c in found]
    failed = [c for c in found if c.required and not c.ok]
    if not failed:
        return [*lines, "", "[green]ready[/]"]
    verdict = f"[red]{len(failed)} required check(s) failed[/]"
    rootless = [c for c in failed if c.needs_root]
    if root or not rootless:
        return [*lines, "", verdict]
    others = len(failed) - len(rootless)
    verdict += (f": {len(rootless)} need root ({', '.join(_short(c) for c in rootless)})"
                + (f", {others} other(s) above" if others else ""))
    return [*lines, "", verdict, "", *without_root(serving)]


def _check_line(c: Check, root: bool) -> str:
    """One check: its mark, name and detail, and what fixes it if it failed."""
    if c.ok:
        mark = "[green]✓[/]"
    elif c.required:
        mark = "[red]✗[/]"
    else:
        mark = "[dim]○[/]"
    line = f"{mark} {c.name}"
    if c.detail:
        line += f" [dim]— {c.detail}[/]"
    if c.ok:
        return line
    if c.needs_root and not root and c.fix != ROOT_FIX:  # the root check: its fix stands
        return line + f"\n    {NEEDS_ROOT}"
    return line + (f"\n    fix: {c.fix}" if c.fix else "")


def _short(c: Check) -> str:
    """A check's name without its parenthesis."""
    return c.name.split(" (")[0]


def probe() -> dict:
    """Run inside a fresh network namespace: try each feature on a veth pair."""
    from pyroute2 import IPRoute

    from labkit.kernel import tc

    found: dict = {}
    with IPRoute() as ipr:
        ipr.link("add", ifname="lkprobe0", kind="veth", peer="lkprobe1")
        (idx,) = ipr.link_lookup(ifname="lkprobe0")
        (peer,) = ipr.link_lookup(ifname="lkprobe1")
        for i in (idx, peer):
            ipr.link("set", index=i, state="up")
        for q in REQUIRED_QDISCS[:2] + OPTIONAL_QDISCS:
            try:
                kwargs = {"default": 0x10} if q == "htb" else {}
                if q == "bfifo":
                    kwargs = {"limit": 100000}
                if q == "tbf":
                    kwargs = {"rate": 125000, "burst": 10000, "latency": 50000}
                ipr.tc("add", q, idx, 0x10000, **kwargs)
                found[q] = True
                ipr.tc("del", index=idx, handle=0x10000, parent=TC_H_ROOT)
            except Exception as exc:  # the kernel's refusal is the answer
                found[q] = f"refused: {exc}"
        try:
            tc.shape(ipr, tc.PortShape("lkprobe0", 100, 65536, 1500, "lanes"))
        except Exception as exc:
            found["htb"] = f"HTB lanes refused: {exc}"
        try:
            with CLASSIFIER.open() as obj:
                att = bpf.tc_attach(obj.programs.lk_classify, idx)
                att.detach()
            found["clsact"] = found["cls_bpf"] = True
        except Exception as exc:
            found["clsact"] = found.get("clsact", True)
            found["cls_bpf"] = f"refused: {exc}"
        try:
            ipr.addr("add", index=idx, address="10.255.0.1", prefixlen=24)
            ipr.addr("add", index=peer, address="10.255.1.1", prefixlen=24)
            ipr.route("add", dst="10.254.0.0/24", family=socket.AF_INET,
                      multipath=[{"gateway": "10.255.0.2"}, {"gateway": "10.255.1.2"}])
            found["multipath"] = True
        except Exception as exc:
            found["multipath"] = f"refused: {exc}"
    return found


if __name__ == "__main__" and sys.argv[1:] == ["--probe"]:
    print(json.dumps(probe()))
