"""Names that left a module of this layer, still served at their old place for one release
with a DeprecationWarning that names the new one: the old module sets its ``__getattr__``
to :func:`forward`'s."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from functools import partial
from importlib import import_module
from typing import Any

Moved = Mapping[str, tuple[str, Callable[[], object]]]  # old name -> (new path, its value)


def forward(module: str, moved: Moved) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``module`` that gives each name of ``moved`` its value now, with
    the warning, and refuses any other name as Python does."""

    def __getattr__(name: str) -> Any:  # what the name was, as mypy sees it
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new, value = moved[name]
        warnings.warn(f"{module}.{name} is now {new}; the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return value()

    return __getattr__


def to_module(new_module: str, *names: str) -> dict[str, tuple[str, Callable[[], object]]]:
    """Each of ``names`` as the same name in ``new_module`` (imported when first asked)."""
    return {name: (f"{new_module}.{name}", partial(_attribute, new_module, name))
            for name in names}


def _attribute(module: str, name: str) -> object:
    return getattr(import_module(module), name)
