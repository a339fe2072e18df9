"""The recording context ``run``, ``sweep``, ``tune`` and ``calibrate`` share
(``runner._recording``), without a fabric: the manifest first, the scratch directory and
the lock for the recording's length, how a recording that did not finish ended, and
nothing recorded when a check fails before the writer is used."""

import gc
import json

import pytest

from labkit.kernel import registry
from labkit.kernel.registry import RunLock
from labkit.model.scenario import ScenarioError
from labkit.runs import rundir, runner
from tests.recorded import sweep_manifest


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch, labkit_paths):
    # the kernel's run lock and scratch directories: their own globals, until
    # labkit.kernel.registry reads labkit.model.paths (labkit_paths.lock, .work)
    monkeypatch.setattr(RunLock, "path", tmp_path / "run.lock")
    monkeypatch.setattr(registry, "WORK_DIR", tmp_path / "work")


def manifest_in(path):
    return json.loads((path / "manifest.json").read_text())


def test_the_manifest_comes_first_and_the_scratch_goes_with_the_recording(tmp_path):
    with runner._recording("x", tmp_path / "out", lambda rec: sweep_manifest(rec.run_id)
                           ) as rec:
        assert RunLock.holder().run_id == rec.run_id and rec.run_id.endswith("-x")
        assert manifest_in(rec.writer.tmp) == sweep_manifest(rec.run_id).to_json()
        assert rec.manifest == sweep_manifest(rec.run_id)
        assert rec.work.is_dir() and gc.get_freeze_count() > 0
    assert not rec.work.exists() and RunLock.holder() is None
    assert gc.get_freeze_count() == 0
    assert rec.writer.finish({}, {"kind": "sweep"}) == tmp_path / "out"


def test_a_calibration_leaves_the_collector_alone_and_makes_no_scratch(tmp_path):
    with runner._recording("calibrate-x", None, lambda rec: sweep_manifest(rec.run_id),
                           freeze=False) as rec:
        assert gc.get_freeze_count() == 0
        assert rec.writer.tmp == rundir.incomplete_path(tmp_path / "runs" / rec.run_id)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("raised, status", [(ValueError("agent died"), "incomplete"),
                                            (KeyboardInterrupt(), "interrupted")])
def test_a_recording_that_does_not_finish_says_how_it_ended(tmp_path, raised, status):
    with pytest.raises(runner.RunFailed if status == "incomplete" else KeyboardInterrupt):
        with runner._recording("x", tmp_path / "out",
                               lambda rec: sweep_manifest(rec.run_id)) as rec:
            raise raised
    doc = manifest_in(rec.writer.tmp)
    assert doc["status"] == status and doc["end_time"]
    assert doc.get("error") == ("ValueError: agent died" if status == "incomplete" else None)
    assert not (tmp_path / "work").exists()  # the body used none
    assert RunLock.holder() is None and gc.get_freeze_count() == 0


def test_a_check_that_fails_before_the_writer_records_nothing(tmp_path):
    made = []

    def manifest(rec):
        made.append(rec.work)  # e.g. the user's classifier, compiled in the scratch
        raise ScenarioError("x.yaml", "lanes.program", "does not load")

    with pytest.raises(ScenarioError):
        with runner._recording("x", tmp_path / "out", manifest):
            raise AssertionError("the body ran")
    assert not made[0].exists() and RunLock.holder() is None
    assert not (tmp_path / "out").exists() and not rundir.incomplete_path(
        tmp_path / "out").exists()


def test_an_out_that_exists_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError, match="never overwrites"):
        with runner._recording("x", tmp_path / "out", lambda rec: sweep_manifest(rec.run_id)):
            raise AssertionError("the body ran")
    assert list((tmp_path / "out").iterdir()) == [] and RunLock.holder() is None
    assert not rundir.incomplete_path(tmp_path / "out").exists()
