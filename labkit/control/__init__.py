"""Adaptive congestion control: the controllers that move the host valves
(:mod:`labkit.kernel.valve`) from the fabric telemetry they see
(:mod:`labkit.kernel.feed`) — ``reactive`` (:mod:`.reactive`), ``proactive``
(:mod:`.proactive`) and ``state-aware`` (:mod:`.state_aware`) — or a user's own
(:func:`load`: any subclass of :class:`Controller` in a Python file), and the
:mod:`.session` that wires a policy's valves, feed, gates and controller together.
docs/control.md states each control path and its latency, and how to write a controller.
"""

from __future__ import annotations

from labkit.control.base import Controller, Plant
from labkit.control.proactive import Proactive
from labkit.control.reactive import Reactive
from labkit.control.state_aware import StateAware
from labkit.model.extend import check_class, load_class

__all__ = ["CONTROLLERS", "Controller", "Plant", "check", "load"]
CONTROLLERS: dict[str, type[Controller]] = {
    c.name: c for c in (Reactive, Proactive, StateAware)}


def load(spec: str) -> type[Controller]:
    """The controller class ``spec`` ("path/to/file.py:ClassName") names; ValueError says
    what is wrong with it."""
    return load_class(spec, Controller, "step")


def check(cls) -> None:
    """ValueError unless ``cls`` is a usable controller class."""
    check_class(cls, Controller, "step")
