"""What labkit may leave in the kernel, listed so tests can demand there is none."""

import json
import subprocess
import time
from pathlib import Path

from labkit import bpf, registry
from labkit.traffic.commands import MARKER


def labkit_objects() -> dict[str, list[str]]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    progs = [f"{p['id']}:{p.get('name')}" for p in json.loads(out.stdout or "[]")
             if str(p.get("name", "")).startswith("lk_")]
    pins = [str(p) for p in bpf.PIN_ROOT.rglob("*")] if bpf.PIN_ROOT.exists() else []
    registries = [str(p) for p in registry.REGISTRY_DIR.glob("*.json")]
    procs = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(args).decode(errors="replace")
        if "labkit.traffic." in text or " -is mininet:" in text or _is_command(cmdline.parent):
            procs.append(f"{cmdline.parent.name}: {text.strip()}")
    return {"bpf_programs": progs, "pins": pins, "registries": registries, "processes": procs}


def _is_command(proc: Path) -> bool:
    """A program a scenario's command entry started (labkit marks its environment)."""
    try:
        return any(v.startswith(MARKER.encode() + b"=")
                   for v in (proc / "environ").read_bytes().split(b"\0"))
    except OSError:
        return False


def assert_no_leaks(timeout_s: float = 5.0) -> None:
    """Fail unless nothing labkit creates is left (the kernel frees some objects lazily)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {k: v for k, v in labkit_objects().items() if v}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"labkit left objects behind: {left}"
