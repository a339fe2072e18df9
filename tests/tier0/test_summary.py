"""summary.json as a typed tree (labkit.model.summary): every recorded sample reads into
it and is written back byte for byte; documents that do not fit are refused by key path."""

import copy
import dataclasses
import json
import re
import warnings
from pathlib import Path

import pytest

from labkit.analysis import frames
from labkit.model.abi import LANES
from labkit.model.summary import (
    AllReduce,
    Job,
    PerLane,
    Program,
    Summary,
    SummaryError,
)
from labkit.runs.rundir import load_run
from labkit.ui import figures
from labkit.ui.cli import reports

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
RECORDED = Path(__file__).parent / "recorded"  # runs as older labkit wrote them
RUN_SUMMARIES = sorted(f for f in SAMPLE.rglob("summary.json")
                       if "policies" in json.loads(f.read_text()))


def _doc(name: str) -> dict:
    return json.loads((SAMPLE / name / "summary.json").read_text())


def _dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, default=str)


def test_the_samples_cover_every_workload_and_the_older_versions():
    assert len(RUN_SUMMARIES) >= 11
    kinds = {type(p.workload) for f in RUN_SUMMARIES
             for p in Summary.from_json(json.loads(f.read_text())).policies.values()}
    assert kinds == {AllReduce, Job, Program}
    old = Summary.from_json(json.loads((RECORDED / "bottleneck-20261130/summary.json")
                                       .read_text())).policies["fifo"]  # before transport
    assert old.transport is None and old.commands is None
    assert old.unrecorded == {"transport", "queues", "tcp", "lossless", "commands", "delays",
                              "jobs", "culprits", "reroutes"}


@pytest.mark.parametrize("path", RUN_SUMMARIES, ids=lambda p: str(p.parent.relative_to(SAMPLE)))
def test_every_sample_is_written_back_as_recorded(path):
    doc = json.loads(path.read_text())
    again = Summary.from_json(doc).to_json()
    assert again == doc
    assert _dumps(again) == _dumps(doc)  # key order too


def test_a_key_older_runs_lack_stays_missing_and_reads_as_its_default():
    doc = _doc("lossless/lossless")
    fid = doc["policies"]["fifo"]["fidelity"]
    del fid["generator_limited"], fid["dequeue"]["spine1-eth0"]["excess"]
    s = Summary.from_json(doc)
    read = s.policies["fifo"].fidelity
    assert read.generator_limited is False and read.dequeue["spine1-eth0"].excess is None
    assert _dumps(s.to_json()) == _dumps(doc)


def test_what_today_leaves_out_when_unset_is_not_written_as_null():
    s = Summary.from_json(_doc("lossless/lossy"))
    fifo = s.policies["fifo"]
    assert fifo.lossless is None and "lossless" not in fifo.to_json()
    lossless = Summary.from_json(_doc("lossless/lossless")).policies["fifo"]
    assert lossless.lossless is not None and lossless.lossless.lanes == ("vip",)


def test_documents_that_do_not_fit_are_refused_by_their_key_path():
    doc = _doc("bottleneck")
    cases = []
    missing = copy.deepcopy(doc)
    del missing["policies"]["fifo"]["bottleneck"]["port"]
    cases.append((missing, "policies.fifo.bottleneck: missing key 'port'"))
    unknown = copy.deepcopy(doc)
    unknown["policies"]["fifo"]["storage"]["speed"] = 1
    cases.append((unknown, "policies.fifo.storage: unknown key(s) ['speed']"))
    wrong = copy.deepcopy(doc)
    wrong["policies"]["fifo"]["bottleneck"]["lanes"]["low"]["drops"] = "many"
    cases.append((wrong, "policies.fifo.bottleneck.lanes.low.drops: expected int"))
    flag = copy.deepcopy(doc)
    flag["policies"]["isolated"]["cpu_bound"] = 0
    cases.append((flag, "policies.isolated.cpu_bound: expected bool"))
    two = copy.deepcopy(doc)
    two["policies"]["fifo"]["job"] = {}
    cases.append((two, "policies.fifo: expected one workload of allreduce, job, program"))
    for bad, message in cases:
        with pytest.raises(SummaryError, match=re.escape(message)):
            Summary.from_json(bad)
    with pytest.raises(SummaryError, match="the summary of a tune, not of a run"):
        Summary.from_json(json.loads((SAMPLE / "tune/nvlink/summary.json").read_text()))


def test_lanes_are_the_abis_in_its_order():
    assert [f.name for f in dataclasses.fields(PerLane) if f.name != "unrecorded"] == list(LANES)
    lanes = Summary.from_json(_doc("bottleneck")).policies["fifo"].bottleneck.lanes
    assert [lane for lane, _ in lanes.items()] == list(LANES)
    assert lanes.of("low") is lanes.low and list(lanes.values())[0] is lanes.vip
    with pytest.raises(KeyError, match="not a lane"):
        lanes.of("gold")


def test_reading_by_key_still_works_for_a_release_and_says_what_to_read():
    doc = _doc("bottleneck")
    s = Summary.from_json(doc)
    with pytest.deprecated_call(match=r"read summary\.policies instead"):
        fifo = s["policies"]["fifo"]
    assert fifo["allreduce"]["slowdown_p99"] == doc["policies"]["fifo"]["allreduce"]["slowdown_p99"]
    with pytest.deprecated_call(match=r"read summary\.run_id instead"):
        assert s.get("run_id") == doc["run_id"]
    with pytest.deprecated_call(match=r"summary\.keys\(\) is deprecated"):
        assert list(s.keys()) == list(doc)


def test_labkits_own_readers_read_attributes_not_keys(capsys):
    """The report, the summary's frames and every figure of every sample, with the
    deprecated key reads turned into errors."""
    makers = (frames.summary_frame, frames.fidelity_frame, frames.job_breakdown,
              frames.program_ops_frame, frames.stage_frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for path in RUN_SUMMARIES:
            run = load_run(path.parent)
            reports.print_summary(run.summary)
            for frame in makers:
                frame(run.summary)
            for _, build in figures.figure_set(run):
                build()
    assert capsys.readouterr().out.count(" · run ") == len(RUN_SUMMARIES)  # a report each
