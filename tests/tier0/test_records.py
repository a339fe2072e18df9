"""labkit's one JSON codec (labkit.model.records): every JSON document labkit writes is a
Record of it (summary, manifests, agent configs and results), read back by its fields'
types, written back key for key; each family words its errors its own way."""

import json
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import pytest

from labkit.model import manifest, records, summary
from labkit.model.records import DocumentError, Record, flat, one_of, when_set
from labkit.model.traffic import configs, results


class Pair(NamedTuple):
    t_ns: int
    what: str


@dataclass(frozen=True)
class Inner:
    a: int
    b: float


@dataclass(frozen=True)
class Cat(Record):
    KEY = "cat"
    lives: int


@dataclass(frozen=True)
class Dog(Record):
    KEY = "dog"
    name: str


@dataclass(frozen=True)
class Doc(Record):
    pet: Cat | Dog = one_of({"cat": Cat, "dog": Dog}, "pet")
    n: int
    ratio: float
    pairs: tuple[Pair, ...]
    fixed: tuple[tuple[int, str], ...]
    by_rank: dict[int, str]
    blob: bytes
    anything: Any
    inner: Inner | None = flat(default=None)
    note: str | None = when_set()
    since_v2: int = 0


DOC = {"dog": {"name": "rex"}, "n": 3, "ratio": 4, "pairs": [[1, "x"]], "fixed": [[2, "y"]],
       "by_rank": {"0": "g1"}, "blob": "0aff", "anything": {"k": [1]}, "a": 1, "b": 2.5,
       "since_v2": 7}


def test_every_type_reads_and_writes_back_byte_for_byte():
    d = Doc.from_json(json.loads(json.dumps(DOC)))
    assert d.pet == Dog(name="rex") and d.pairs == (Pair(1, "x"),) and d.fixed == ((2, "y"),)
    assert d.by_rank == {0: "g1"} and d.blob == b"\x0a\xff" and d.inner == Inner(1, 2.5)
    assert d.ratio == 4 and isinstance(d.ratio, int)  # a float may be written 4000
    assert json.dumps(d.to_json()) == json.dumps(DOC)
    assert "inner" not in Doc.from_json({k: v for k, v in DOC.items() if k not in "ab"}).to_json()


def test_a_key_a_document_predates_stays_missing_unless_it_is_set():
    old = {k: v for k, v in DOC.items() if k != "since_v2"}
    d = Doc.from_json(old)
    assert d.unrecorded == {"since_v2", "note"} and d.since_v2 == 0
    assert json.dumps(d.to_json()) == json.dumps(old)
    assert replace(d, since_v2=2).to_json()["since_v2"] == 2  # set since: written
    assert replace(d, note="n").to_json()["note"] == "n"


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("n"), "Doc: 'n' is missing"),
    (lambda d: d.update(extra=1), "Doc: unknown key 'extra'"),
    (lambda d: d.update(n=True), "Doc.n: expected an integer, got a boolean"),
    (lambda d: d.update(ratio="1"), "Doc.ratio: expected an integer or a number, got a string"),
    (lambda d: d.update(pairs=[[1, 2]]), "Doc.pairs[0][1]: expected a string, got an integer"),
    (lambda d: d.update(pairs=[[1]]), "Doc.pairs[0]: expected 2 items, got 1"),
    (lambda d: d.update(by_rank={"x": "g1"}), "Doc.by_rank: expected an integer, got a string"),
    (lambda d: d.update(blob="zz"), "Doc.blob: not hex text"),
    (lambda d: d.update(cat={"lives": 9}), "Doc: expected one pet of cat, dog, found"),
    (lambda d: d.update(dog={"name": 1}), "Doc.dog.name: expected a string, got an integer"),
    (lambda d: d.pop("b"), "Doc: 'b' is missing"),
])
def test_a_document_that_does_not_fit_names_the_key(change, message):
    doc = json.loads(json.dumps(DOC))
    change(doc)
    with pytest.raises(DocumentError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Doc.from_json(doc)


def test_each_family_words_its_errors_and_they_are_document_errors():
    with pytest.raises(summary.SummaryError, match=r"Storage: missing key 'entries'"):
        summary.Storage.from_json({"goodput_mbps": 1.0})
    with pytest.raises(summary.SummaryError, match=r"Storage.goodput_mbps: expected float, "
                                                   r"got 'x'"):
        summary.Storage.from_json({"goodput_mbps": "x", "entries": {}})
    with pytest.raises(manifest.ManifestError, match=r"manifest.json: 'run_id' is missing"):
        manifest.CalibrationManifest.from_json({})
    assert issubclass(summary.SummaryError, DocumentError)
    assert issubclass(manifest.ManifestError, DocumentError)
    with pytest.raises(DocumentError, match="EngineResult.ranks"):
        results.EngineResult.from_json({"ranks": {}})


def test_one_record_machinery_for_every_document():
    for cls in (summary.Summary, summary.PolicySummary, manifest.RunManifest,
                manifest.BatchPoint, configs.Engine, configs.Storage, results.EngineResult,
                results.StorageResult, results.CommandEnd, results.ProgramRankEnd):
        assert issubclass(cls, Record), cls
    assert summary.Record is Record
    assert records.keys(summary.Summary) == ("scenario", "run_id", "scale_factor", "policies")
