"""The JSON Schema of scenario files: valid draft-07, the committed copy current, every
shipped scenario (and the scenario of every shipped grid) inside it; and the limits it is
made from match what they protect."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from labkit.model import scenario, schema
from labkit.traffic import hotpath

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "topologies").glob("*.yaml"))
VALIDATOR = jsonschema.Draft7Validator(schema.scenario_schema())


def test_the_schema_is_draft_7_and_its_copy_is_current():
    jsonschema.Draft7Validator.check_schema(schema.scenario_schema())
    committed = json.loads((REPO / "docs/scenario.schema.json").read_text())
    assert committed == schema.scenario_schema(), \
        "docs/scenario.schema.json is stale: labkit schema > docs/scenario.schema.json"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_scenario_fits_the_schema(path):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert not errors, errors


@pytest.mark.parametrize("path", sorted((REPO / "topologies/grids").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_point_of_every_shipped_grid_fits_the_schema(path):
    from labkit.model import grid

    g = grid.load(path)
    for p in g.points:
        doc = g.base_doc
        for axis in g.axes:
            doc = grid.apply(doc, axis.path, p.parameters[axis.key])
        assert VALIDATOR.is_valid(doc), p.label


def test_the_limits_fit_what_they_protect():
    limits = scenario.LIMITS
    assert scenario.MAX_MESSAGE_BYTES == hotpath.MAX_MESSAGE
    # the hosts' gates: horizon_ns x bytes/s in 64 bits at the fastest link, rate factor in
    fastest = limits["rate_mbps"].hi * scenario.MAX_RATE_FACTOR * 1e6 / 8
    assert limits["horizon_ms"].hi * 1e6 * fastest < 2**64
    # a rate of whole bytes per second, at the smallest rate factor too
    assert int(limits["rate_mbps"].lo * scenario.MIN_RATE_FACTOR * 1e6 / 8) > 0
    assert all(limit.lo <= limit.hi and limit.hi < float("inf") for limit in limits.values())
