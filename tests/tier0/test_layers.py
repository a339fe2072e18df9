"""labkit's layers (docs/architecture.md) are its folders: a module imports only from its
own layer or the layers below it, no import goes round in a circle, and only the kernel
layer (and the doctor, which probes it) talks to the kernel's configuration libraries."""

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "labkit"
LAYERS = ["model", "kernel", "traffic", "control", "analysis", "runs", "ui"]  # bottom to top
TOP_LEVEL = {  # the only modules outside the folders
    "": "ui",  # labkit/__init__.py: `import labkit`, the API
    "torch": "traffic",  # labkit/torch.py: users' training jobs import `labkit.torch`
}
KERNEL_LIBRARIES = ("pyroute2", "mininet")


@cache
def modules() -> dict[str, ast.Module]:
    """Every module of the package by its name without 'labkit.' (the package's own: ''),
    parsed once per test session."""
    out = {}
    for f in PACKAGE.rglob("*.py"):
        name = ".".join(f.relative_to(PACKAGE).with_suffix("").parts).removesuffix("__init__")
        out[name.rstrip(".")] = ast.parse(f.read_text())
    return out


def imported(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """Every import anywhere in the file (functions' too): (module, names from it)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names]))
    return found


def imports(tree: ast.Module, ours: set[str]) -> set[str]:
    """The modules a file imports: labkit's by their names in ``ours`` (a name imported
    from a package counts as that module when it is one), others as written."""
    found = set()
    for module, names in imported(tree):
        if module != "labkit" and not module.startswith("labkit."):
            found.add(module)
            continue
        base = module.removeprefix("labkit").removeprefix(".")
        subs = {f"{base}.{n}".lstrip(".") for n in names} & ours
        found |= subs or {base}
    return found


def layer_of(name: str) -> int:
    return LAYERS.index(TOP_LEVEL.get(name, name.split(".")[0]))


def test_every_module_is_in_a_layer_folder():
    assert all((PACKAGE / layer / "__init__.py").is_file() for layer in LAYERS)
    strays = [n for n in modules() if n not in TOP_LEVEL and n.split(".")[0] not in LAYERS]
    assert not strays, f"modules outside the layer folders {LAYERS}: {sorted(strays)}"


def test_imports_name_labkits_modules():
    """Nothing in labkit imports an old path (the shims in labkit/__init__.py serve users),
    so the layers and circles below see every import."""
    ours = set(modules())
    wrong = [f"{name} imports {module}" for name, tree in modules().items()
             for module, _ in imported(tree)
             if module.startswith("labkit.") and module.removeprefix("labkit.") not in ours]
    wrong += [f"{name} imports {n} from labkit" for name, tree in modules().items()
              for module, names in imported(tree) if module == "labkit"
              for n in names if n not in ours]
    assert not wrong, wrong


def test_no_import_runs_back_up():
    ours = set(modules())
    upward = []
    for name, tree in modules().items():
        for dep in imports(tree, ours) & ours:
            if layer_of(dep) > layer_of(name):
                upward.append(f"{name} ({LAYERS[layer_of(name)]}) imports {dep} "
                              f"({LAYERS[layer_of(dep)]})")
    assert not upward, upward


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Each import circle found by a depth-first walk, as 'a -> b -> a'."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    assert circles({"a": {"a"}}) == ["a -> a"]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_circle():
    ours = set(modules())
    graph = {name: imports(tree, ours) & ours for name, tree in modules().items()}
    assert not circles(graph), circles(graph)


def test_only_the_kernel_layer_configures_the_kernel():
    users = {name for name, tree in modules().items()
             if any(dep.split(".")[0] in KERNEL_LIBRARIES
                    for dep in imports(tree, set(modules())))}
    assert {u for u in users if layer_of(u) != LAYERS.index("kernel")} <= {"ui.doctor"}
