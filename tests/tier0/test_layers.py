"""labkit's layers (docs/architecture.md): a module imports only from its own layer or
the layers below it, and only the kernel layer (and the doctor, which probes it) talks to
the kernel's configuration libraries."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "labkit"
LAYERS = [  # bottom to top
    ("model", {"abi", "extend", "scenario", "fabric_spec", "grid", "topo", "traffic",
               "traffic.wire",
               "traffic.schedules", "traffic.jobs", "traffic.roce", "traffic.nvme",
               "traffic.configs", "traffic.timeline", "traffic.lines", "lossless",
               "autotune", "schema"}),
    ("kernel", {"netns", "bpf", "tc", "registry", "interrupts", "fabric", "lanes", "telemetry",
                "capture", "loss", "pauser", "pcap", "cgroups", "jobmark", "control.valve",
                "control.gates", "control.feed"}),
    ("traffic", {"agents", "traffic.hotpath", "traffic.rc", "traffic.collective",
                 "traffic.storage", "traffic.commands", "traffic.programs", "torch"}),
    ("control", {"control", "control.base", "control.reactive", "control.proactive",
                 "control.state_aware", "control.session"}),
    ("analysis", {"analysis", "nccltests", "calibration", "describe"}),
    ("run", {"experiment", "runner", "rundir", "batch"}),
    ("presentation", {"", "plots", "figures", "widgets", "cli", "doctor", "labs",
                      "labs.__main__", "labs.verdict", "labs.notebook", "labs.bottleneck",
                      "labs.lanes", "labs.controller", "labs.parallelism"}),
]
KERNEL_LIBRARIES = ("pyroute2", "mininet")
MAY_USE_THEM = LAYERS[1][1] | {"doctor"}


def modules() -> dict[str, ast.Module]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        name = ".".join(f.relative_to(PACKAGE).with_suffix("").parts).removesuffix("__init__")
        out[name.rstrip(".")] = ast.parse(f.read_text())
    return out


def imports(tree: ast.Module) -> set[str]:
    """Every module imported, anywhere in the file, absolute (labkit's without 'labkit.')."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "labkit":
                found |= {f"labkit.{a.name}" for a in node.names}
            else:
                found.add(node.module)
    return {n.removeprefix("labkit.") if n.startswith("labkit.") else n for n in found}


def layer_of(name: str) -> int:
    (index,) = [i for i, (_, members) in enumerate(LAYERS) if name in members]
    return index


def test_every_module_has_one_layer():
    assert set(modules()) == set().union(*(m for _, m in LAYERS))


def test_no_import_runs_back_up():
    ours = set(modules())
    upward = []
    for name, tree in modules().items():
        for dep in imports(tree) & ours:
            if layer_of(dep) > layer_of(name):
                upward.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {dep} "
                              f"({LAYERS[layer_of(dep)][0]})")
    assert not upward, upward


def test_only_the_kernel_layer_configures_the_kernel():
    users = {name for name, tree in modules().items()
             if any(dep.split(".")[0] in KERNEL_LIBRARIES for dep in imports(tree))}
    assert users <= MAY_USE_THEM, sorted(users - MAY_USE_THEM)
