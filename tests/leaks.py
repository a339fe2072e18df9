"""What labkit may leave in the kernel, listed so tests can demand there is none."""

import json
import subprocess
import time
from pathlib import Path

from labkit import bpf, cgroups, registry
from labkit.registry import marked


def labkit_objects() -> dict[str, list[str]]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    progs = [f"{p['id']}:{p.get('name')}" for p in json.loads(out.stdout or "[]")
             if str(p.get("name", "")).startswith("lk_")]
    pins = [str(p) for p in bpf.PIN_ROOT.rglob("*")] if bpf.PIN_ROOT.exists() else []
    registries = [str(p) for p in registry.REGISTRY_DIR.glob("*.json")]
    procs = []
    commands = set(marked())  # what scenarios' command entries started, and their children
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(args).decode(errors="replace")
        if "labkit.traffic." in text or " -is mininet:" in text or \
                int(cmdline.parent.name) in commands:
            procs.append(f"{cmdline.parent.name}: {text.strip()}")
    root = cgroups.cgroup2_root()
    top = root / cgroups.TOP if root else None
    groups = [str(p) for p in top.rglob("*") if p.is_dir()] if top and top.exists() else []
    if top and top.exists():
        groups.append(str(top))
    return {"bpf_programs": progs, "pins": pins, "registries": registries, "processes": procs,
            "cgroups": groups}


def assert_no_leaks(timeout_s: float = 5.0) -> None:
    """Fail unless nothing labkit creates is left (the kernel frees some objects lazily)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {k: v for k, v in labkit_objects().items() if v}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"labkit left objects behind: {left}"
