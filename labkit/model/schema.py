"""The JSON Schema of scenario files, rendered from their declaration
(:data:`labkit.model.scenario_doc.SCENARIO`: keys, types, limits, name patterns and
choices), the one :func:`labkit.model.scenario.parse` checks against too.

Editors check and complete scenario files with it (docs/scenarios.md); `labkit schema`
prints it and docs/scenario.schema.json holds a copy. labkit itself checks a scenario with
:func:`labkit.model.scenario.parse`, which also checks what a schema cannot say: references
between keys (routers, hosts, links), the address plan, port names, sizes written with
units (``1024G``), combinations (``busy_share`` below ``idle_share``) and the keys of the
scenario's own traffic kinds. Pure: nothing here touches anything.
"""

from __future__ import annotations

from typing import Any

from labkit.model.scenario_doc import FILE

DRAFT = FILE.draft  # what editors' YAML extensions read


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of a scenario file."""
    return FILE.schema()
