"""What users extend labkit with, from files of their own: loading a class named
``file.py:Class`` (controllers, traffic kinds), its source for the run's record, and the
base class of a traffic kind.

A traffic kind turns a scenario entry of its kind into ``kind: command`` entries (each a
program run in a host, optionally with a server in another, see docs/scenarios.md): its
traffic then starts, stops, is counted per lane and held under control exactly like any
program a scenario names. docs/examples/traffic.py is one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path


class TrafficKind:
    """Subclass it, name the entry's keys, and define :meth:`expand`."""

    keys: frozenset[str] = frozenset()  # what an entry may hold besides ``kind``
    required: frozenset[str] = frozenset()  # ... and must

    def expand(self, entry: dict, hosts: dict[str, tuple[str, ...]]) -> list[dict]:
        """The command entries (``name``, ``host``, ``run``, optional ``serve``) that
        ``entry`` stands for; ``hosts`` maps each role (gpu, storage) to its hosts.
        Raise ValueError with a reason when the entry makes no sense."""
        raise NotImplementedError


def load_class(spec: str, base: type, method: str) -> type:
    """The class ``spec`` ("path/to/file.py:ClassName") names. ValueError says what is
    wrong: no such file, the file fails to import, no such class, not a subclass of
    ``base``, or no ``method`` of its own."""
    path, _, name = spec.rpartition(":")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{file} does not exist")
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(f"labkit_user_{digest}", file)
    if module_spec is None or module_spec.loader is None:  # a suffix Python cannot import
        raise ValueError(f"{file} is not a Python source file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # so that inspect finds its source
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: whatever it raises, say where
        del sys.modules[module_spec.name]
        raise ValueError(f"{file} fails to import: {type(exc).__name__}: {exc}") from exc
    cls = getattr(module, name, None)
    if cls is None:
        raise ValueError(f"{file} defines no {name}")
    check_class(cls, base, method)
    return cls


def check_class(cls, base: type, method: str) -> None:
    """ValueError unless ``cls`` subclasses ``base`` and defines ``method`` itself."""
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise ValueError(f"{cls!r} is not a subclass of {base.__module__}.{base.__name__}")
    if getattr(cls, method) is getattr(base, method):
        raise ValueError(f"{cls.__name__} does not define {method}()")


def source_of(cls: type) -> str | None:
    """The source text of the module that defines ``cls`` (None when Python cannot tell:
    a class typed into an interpreter)."""
    module = inspect.getmodule(cls)
    for where in (cls,) if module is None else (module, cls):
        try:
            return inspect.getsource(where)
        except (OSError, TypeError):
            continue
    return None
