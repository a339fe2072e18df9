"""Manifests as types (labkit.model.manifest): every manifest of every kind and version
reads as its kind's type and writes back byte for byte: the sample runs and tunings under
data/sample, and, for what they lack, manifests as the code before these types wrote them
(tests/tier0/manifests: sweeps, calibrations, batches, runs that failed or were stopped)."""

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.model import manifest
from labkit.model.manifest import ManifestError

SAMPLES = Path(__file__).resolve().parents[2] / "data/sample"
WRITTEN = Path(__file__).resolve().parent / "manifests"
ALL = sorted([*SAMPLES.rglob("manifest.json"), *WRITTEN.glob("*.json")])


def dumped(doc) -> str:
    return json.dumps(doc, indent=2, default=str)


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_manifest_reads_and_writes_back_byte_for_byte(path):
    doc = json.loads(path.read_text())
    m = manifest.from_json(doc)
    assert type(m) is manifest.OF_KIND[doc.get("kind", "run")]
    assert dumped(m.to_json()) == dumped(doc)
    assert manifest.from_json(m.to_json()) == m


def test_every_kind_and_its_endings_are_pinned():
    kinds = {manifest.kind_of(json.loads(p.read_text())) for p in ALL}
    assert kinds == set(manifest.KINDS)
    statuses = {json.loads(p.read_text())["status"] for p in ALL}
    assert {"complete", "incomplete", "interrupted"} <= statuses


def read(name: str) -> dict:
    return json.loads((WRITTEN / f"{name}.json").read_text())


def test_a_run_recorded_before_a_key_existed_writes_it_back_absent():
    """A key written as null today (rates, auto, batch, the lock's hash, ...) is left out
    again for a manifest recorded before it existed; the attribute reads None either way."""
    doc = read("run-complete")
    old = {k: v for k, v in doc.items() if k not in ("rates", "batch", "hotpath")}
    m = manifest.RunManifest.from_json(old)
    assert m.rates is None and m.batch is None and m.provenance.hotpath is None
    # every key it lacks (error and notes: None)
    assert m.unrecorded == {"rates", "batch", "error", "notes"}
    assert m.provenance.unrecorded == {"hotpath"}
    assert list(m.to_json()) == list(old)
    new = replace(m, unrecorded=frozenset(),
                  provenance=replace(m.provenance, unrecorded=frozenset()))
    assert new.to_json()["rates"] is None and "hotpath" in new.to_json()


def test_attributes_are_typed_records():
    run = manifest.RunManifest.from_json(read("run-complete"))
    assert run.rates == manifest.Rates(factor=0.5, calibration=run.rates.calibration,
                                       bottleneck_rate_mbps=50.0, scale_factor=8000.0)
    assert run.controllers["mine"].qualname == "Mine" and run.kinds["incast"].source is None
    assert run.batch.point == 3 and run.auto.ranks == ("g1", "g2")
    assert run.policies == ("fifo", "mine") and run.tables == ("cpu",)
    sweep = manifest.SweepManifest.from_json(read("sweep-complete"))
    assert sweep.kind == "sweep" and sweep.auto.choices["65536"].algo == "ring"
    assert sweep.notes == ("a pause the pauser could not send",)
    b = manifest.BatchManifest.from_json(read("batch-stopped"))
    assert [p.status for p in b.points] == ["complete", "failed", "interrupted", "cancelled"]
    assert b.points[0].log == "slurm/17_0_log.err" and b.points[3].start_time is None


def test_a_batch_says_its_error_once_it_stopped():
    b = manifest.BatchManifest.from_json(read("batch-complete"))
    running = replace(b, status="running", end_time=None, tables=None)
    assert "error" not in running.to_json()
    interrupted = replace(running, status="interrupted", end_time="t")
    assert list(interrupted.to_json())[-3:] == ["points", "error", "end_time"]
    assert interrupted.to_json()["error"] is None


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("run_id"), "manifest.json: 'run_id' is missing"),
    (lambda d: d.update(seeds=[1]), "manifest.json: unknown key 'seeds'"),
    (lambda d: d.update(seed="1"), r"manifest.json.seed: expected an integer, got a string"),
    (lambda d: d.update(policies="fifo"), r"manifest.json.policies: expected a list"),
    (lambda d: d["rates"].pop("factor"), r"manifest.json.rates: 'factor' is missing"),
    (lambda d: d.update(cpus=True), r"manifest.json.cpus: expected an integer, got a boolean"),
    (lambda d: d["controllers"]["mine"].update({"class": 3}),
     r"manifest.json.controllers.mine.class: expected a string, got an integer"),
    (lambda d: d.update(kind="sweep"), r"manifest.json: 'op' is missing"),
    (lambda d: d.update(kind="nightly"), "kind 'nightly' is none of run, sweep"),
])
def test_a_manifest_that_does_not_fit_names_the_key(change, message):
    doc = read("run-complete")
    change(doc)
    with pytest.raises(ManifestError, match=message):
        manifest.from_json(doc)


def test_a_kind_is_its_type_s_constant():
    doc = read("sweep-complete")
    with pytest.raises(ManifestError, match="manifest.json.kind: expected 'tune', got 'sweep'"):
        manifest.TuneManifest.from_json({**doc, "algos": [], "ranks": []})


def test_reading_by_key_still_works_for_one_release_and_says_so():
    run = manifest.RunManifest.from_json(read("run-complete"))
    with pytest.warns(DeprecationWarning, match=r"RunManifest\['status'\] goes.*attributes"):
        assert run["status"] == "complete"
    with pytest.warns(DeprecationWarning, match=r"RunManifest.get\('rates'\)"):
        assert run.get("rates")["factor"] == 0.5
    point = manifest.BatchManifest.from_json(read("batch-stopped")).points[0]
    with pytest.warns(DeprecationWarning, match=r"BatchPoint\['log'\]"):
        assert point["log"] == point.log
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run.status == "complete"
