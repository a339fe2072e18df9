"""``emulation.rate_factor``: a number runs the scenario at its rates times the factor;
``auto`` takes the factor of the newest calibration of the scenario on this machine."""

import json
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from labkit.analysis import calibration
from labkit.model import scenario
from labkit.model.manifest import Rates
from labkit.model.scenario import ScenarioError
from labkit.runs import resolve
from tests.recorded import PROVENANCE, calibration_manifest

REPO = Path(__file__).resolve().parents[2]
SOURCE = str(REPO / "topologies/bottleneck.yaml")


def bottleneck(**emulation) -> scenario.Scenario:
    doc = yaml.safe_load(Path(SOURCE).read_text())
    doc["emulation"] = emulation
    return scenario.parse(doc, SOURCE)


@pytest.mark.parametrize("value", ["fast", 0, 32, True, [2], float("nan")])
def test_a_bad_factor_is_refused_with_its_key_and_what_it_may_be(value):
    with pytest.raises(ScenarioError, match=r"emulation\.rate_factor.*must be `auto` .* or a "
                                            r"number from 0.0625 to 16"):
        bottleneck(rate_factor=value)


def test_a_number_scales_rates_compute_times_and_the_scale_factor():
    written = bottleneck()
    assert resolve.resolve_rates(written, SOURCE) == (written, None)
    sc, rates = resolve.resolve_rates(bottleneck(rate_factor=2), SOURCE)
    assert calibration.bottleneck_rate(sc) == 2 * calibration.bottleneck_rate(written)
    assert sc.scale_factor == written.scale_factor / 2
    assert sc.allreduce.compute_ms == written.allreduce.compute_ms / 2
    assert sc.emulation.rate_factor == 1.0  # applied once
    assert rates == Rates(factor=2.0, calibration=None,
                          bottleneck_rate_mbps=2 * calibration.bottleneck_rate(written),
                          scale_factor=written.scale_factor / 2)


def record_calibration(root: Path, sc: scenario.Scenario, best: float | None, start: str,
                       host: str | None = None) -> Path:
    """A calibration's record as labkit.calibrate leaves it (the parts auto reads)."""
    d = root / f"{start}-{host or 'here'}-calibrate-{sc.name}"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(calibration_manifest(
        d.name, scenario=calibration.as_written(sc).to_dict(), start_time=start,
        provenance=replace(PROVENANCE, host=host or socket.gethostname())).to_json()))
    (d / "summary.json").write_text(json.dumps({
        "kind": "calibration", "best_factor": best,
        "advice": "no rate down to x0.0625 held on this machine" if best is None else ""}))
    return d


def test_auto_takes_the_newest_calibration_of_this_scenario_on_this_machine(labkit_paths):
    runs = labkit_paths.runs
    auto = bottleneck(rate_factor="auto")
    with pytest.raises(ScenarioError, match=r"emulation\.rate_factor.*run `labkit calibrate`"):
        resolve.resolve_rates(auto, SOURCE)
    record_calibration(runs, auto, 0.5, "2026-11-30T09:00:00")  # older
    elsewhere = replace(bottleneck(), path="/elsewhere/bottleneck.yaml", seed=7)
    chosen = record_calibration(runs, elsewhere, 2.0, "2026-11-30T10:00:00")
    record_calibration(runs, auto, 4.0, "2026-11-30T11:00:00", host="elsewhere")
    record_calibration(runs, replace(auto, name="other"), 8.0, "2026-11-30T12:00:00")
    interrupted = record_calibration(runs, auto, 8.0, "2026-11-30T13:00:00")
    (interrupted / "summary.json").unlink()
    sc, rates = resolve.resolve_rates(auto, SOURCE)
    assert rates.factor == 2.0 and rates.calibration == str(chosen)
    assert calibration.bottleneck_rate(sc) == 2 * calibration.bottleneck_rate(bottleneck())


def test_auto_says_so_when_no_rate_held(labkit_paths):
    record_calibration(labkit_paths.runs, bottleneck(), None, "2026-11-30T10:00:00")
    with pytest.raises(ScenarioError, match="found no rate this machine holds: no rate down"):
        resolve.resolve_rates(bottleneck(rate_factor="auto"), SOURCE)


def lossless(**emulation) -> scenario.Scenario:
    """topologies/lossless.yaml with the least buffer that holds a pause's headroom at its
    own rates (as the refusal of a smaller one names it), so not at twice them: the
    headroom grows with the rates that keep arriving while a pause takes hold."""
    doc = yaml.safe_load((REPO / "topologies/lossless.yaml").read_text())
    kb = 16
    for _ in range(10):  # each refusal names one port's need; the last one's holds for all
        doc["defaults"]["link"]["buffer_kb"] = kb
        try:
            scenario.parse(doc, "lossless.yaml")
            break
        except ScenarioError as exc:
            kb = int(re.search(r"fabric\.lossless: .* needs buffer_kb >= (\d+)", str(exc))[1])
    doc["emulation"] = emulation
    return scenario.parse(doc, "lossless.yaml")


def test_a_factor_whose_rates_outgrow_a_lossless_buffer_is_refused_before_the_run(
        labkit_paths):
    lossless()  # at its own rates: fine
    headroom = r"emulation\.rate_factor.*at 2 times its rates, link .* needs buffer_kb >= \d+"
    with pytest.raises(ScenarioError, match=headroom):  # `labkit validate` says so too
        lossless(rate_factor=2)
    auto = lossless(rate_factor="auto")
    chosen = record_calibration(labkit_paths.runs, auto, 2.0, "2026-11-30T10:00:00")
    chose = rf"auto chose 2 \(the calibration {re.escape(str(chosen))}\): "
    with pytest.raises(ScenarioError,
                       match=chose + headroom.removeprefix(r"emulation\.rate_factor.*")):
        resolve.resolve_rates(auto, "lossless.yaml")
    # a scenario changed after parsing is checked where its rates are resolved
    with pytest.raises(ScenarioError, match=headroom):
        resolve.resolve_rates(replace(lossless(), emulation=replace(
            lossless().emulation, rate_factor=2.0)), "lossless.yaml")
