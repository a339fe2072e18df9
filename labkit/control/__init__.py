"""Adaptive congestion control: host valves (:mod:`.valve`), the fabric telemetry a
controller sees (:mod:`.feed`), and the controllers that move the valves —
``reactive`` (:mod:`.reactive`), ``proactive`` (:mod:`.proactive`) and
``state-aware`` (:mod:`.state_aware`). docs/control.md states each control path
and its latency."""

from __future__ import annotations

from labkit.control.base import Controller, Plant
from labkit.control.proactive import Proactive
from labkit.control.reactive import Reactive
from labkit.control.state_aware import StateAware

CONTROLLERS: dict[str, type[Controller]] = {
    c.name: c for c in (Reactive, Proactive, StateAware)}


def make(name: str, plant: Plant) -> Controller:
    return CONTROLLERS[name](plant)
