"""Run directories: ``data/runs/<run-id>/`` with Parquet tables, manifest and summary.

A run is written under a hidden temporary name (``.<run-id>.incomplete``) and
renamed when complete, so a directory without that prefix is always whole; a
crashed run keeps the temporary name and its manifest says ``incomplete``.
Nothing is ever overwritten: an existing target is an error.

:func:`load_run` reads a run back and checks every table against its schema
(docs/data-model.md) and its summary against :mod:`labkit.model.summary`, raising
:class:`RunDataError` that names the file and what is wrong; :func:`load_tuning` and
:func:`load_sweeps` read tunings and sweeps back. What recorded a run is gathered by
:mod:`labkit.runs.provenance`, the model store and the calibration search are
:mod:`labkit.runs.store`'s; their names are importable from here too. New runs go in the
runs' directory of :func:`labkit.model.paths.current` (``data/runs``, ``LABKIT_RUNS_DIR``)
unless given another; reading a run imports nothing of the kernel layer.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl
from polars.datatypes import DataTypeClass

from labkit.model import inputs, paths
from labkit.model import manifest as manifest_mod
from labkit.model.autotune import Model
from labkit.model.manifest import (
    BatchManifest,
    CalibrationManifest,
    Manifest,
    ManifestError,
    RunManifest,
    SweepManifest,
    TuneManifest,
)
from labkit.model.summary import Summary, SummaryError
from labkit.model.tables import TABLES
from labkit.model.tables import schema as row_schema
from labkit.runs import moved, store
from labkit.runs.provenance import (  # noqa: F401 (re-exported: their home before issue 29)
    git_revision,
    provenance,
    python_packages,
    sha256_file,
)
from labkit.runs.store import (  # noqa: F401 (re-exported: their home before issue 29)
    newest_calibration,
    newest_model,
    save_model,
)

if TYPE_CHECKING:
    from labkit.analysis.nccltests import Row
    from labkit.runs.result import PolicyResult

PolarsDataType = pl.DataType | DataTypeClass  # a dtype, or its class (pl.Int64)
M = TypeVar("M", RunManifest, SweepManifest, TuneManifest, CalibrationManifest, BatchManifest)
# every table's columns and their dtypes: its row type's (labkit.model.tables), "policy" first
SCHEMAS: dict[str, dict[str, PolarsDataType]] = {
    name: {"policy": pl.String, **row_schema(row)} for name, row in TABLES.items()}
# tables newer than the first runs: a manifest without a "tables" list predates them,
# and such a run loads with them empty (as does one whose list lacks them)
ADDED_LATER = {"ios", "controller", "gaps", "phases", "pauses", "program_ops", "bursts",
               "dctcp", "events", "job_lanes", "job_ranks", "job_shifts", "routes"}
# what older runs lack, and its value there
COLUMNS_ADDED_LATER = {("transport", "cnps"): 0, ("collectives", "resent"): 0}


class RunDataError(ValueError):
    """A run directory is missing a file or holds one that does not fit its schema."""


def host_label(name: str | None = None) -> str:
    """This machine's short host name (``name``: another's) as it appears in run ids:
    letters, digits and '-' only, at most 32 characters."""
    short = (name if name is not None else socket.gethostname()).split(".")[0]
    return re.sub(r"[^A-Za-z0-9-]+", "-", short).strip("-")[:32].strip("-") or "host"


def new_run_id(scenario: str) -> str:
    """``<date>-<time>-<host>-<scenario>``: unique across machines that record into one
    place (a batch's runs on a cluster), since one machine runs one run at a time. Runs
    recorded before the host was added have ``<date>-<time>-<scenario>``; nothing reads a
    run id apart, so both load alike. An id already taken in the runs' directory
    (:func:`labkit.model.paths.current`; two runs of one scenario in one second: a
    calibration's short trials) gets ``-2``, ``-3``, ..."""
    base = datetime.now().strftime("%Y%m%d-%H%M%S-") + f"{host_label()}-{scenario}"
    run_id, n = base, 1
    runs = paths.current().runs
    while (runs / run_id).exists() or incomplete_path(runs / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def tables_from(results: list[PolicyResult]) -> dict[str, pl.DataFrame]:
    """The run's tables: every policy's rows of each (its :class:`PolicyResult` attribute
    of the table's name), behind its policy."""
    return {name: pl.DataFrame([(r.policy, *row) for r in results for row in getattr(r, name)],
                               schema=schema, orient="row")
            for name, schema in SCHEMAS.items()}


def incomplete_path(target: Path) -> Path:
    """Where a run to ``target`` is written until it finishes (and stays if it does not)."""
    return target.parent / f".{target.name}.incomplete"


class RunWriter:
    """Write a run under a temporary name; :meth:`finish` renames it into place."""

    def __init__(self, target: Path):
        self.target = target
        if target.exists():
            raise FileExistsError(f"{target} already exists; labkit never overwrites a run "
                                  "(choose another --out)")
        self.tmp = incomplete_path(target)
        if self.tmp.exists():
            raise FileExistsError(f"{self.tmp} holds an earlier run to {target} that did not "
                                  "finish (its manifest says how it ended); labkit never "
                                  "overwrites a run: choose another --out, or move it away")
        self.tmp.mkdir(parents=True)
        self.agents_dir = self.tmp / "agents"
        self._manifest: Manifest | None = None

    def discard(self) -> None:
        """Remove the directory of a run that never started: all in it is this writer's
        (it refuses a directory that exists), none of it a measurement."""
        shutil.rmtree(self.tmp)

    @property
    def manifest(self) -> Manifest:
        """The manifest as last written."""
        if self._manifest is None:
            raise RuntimeError(f"{self.tmp}: no manifest written yet")
        return self._manifest

    def write_manifest(self, manifest: Manifest) -> None:
        """Write ``manifest`` (the whole of it: each write replaces the last)."""
        self._manifest = manifest
        _write_json(self.tmp / "manifest.json", manifest.to_json())

    def ended(self, status: str, error: str | None = None) -> None:
        """Say in the manifest that the recording ended without finishing: ``status``
        (interrupted, or incomplete with the ``error``)."""
        self.write_manifest(replace(self.manifest, status=status, error=error,
                                    end_time=now_iso()))

    def finish(self, tables: dict[str, pl.DataFrame], summary: Summary | dict) -> Path:
        """Write the tables (each file leads with a ``run_id`` column, so many runs read
        as one: ``pl.scan_parquet("data/runs/*/collectives.parquet")``), the summary (a
        run's :class:`Summary`, or the document of a sweep, tuning or batch), and move the
        run into place."""
        run_id = self.manifest.run_id
        for name, frame in tables.items():
            frame.select(pl.lit(run_id, pl.String).alias("run_id"), pl.all()).write_parquet(
                self.tmp / f"{name}.parquet")
        _write_json(self.tmp / "summary.json",
                    summary.to_json() if isinstance(summary, Summary) else summary)
        self.write_manifest(replace(self.manifest, status="complete", end_time=now_iso(),
                                    tables=tuple(sorted(tables))))
        if self.target.exists():
            raise FileExistsError(f"{self.target} appeared while the run was in progress; "
                                  f"the run stays in {self.tmp}")
        os.rename(self.tmp, self.target)
        return self.target


SweepRecord = dict[str, Any]  # a sweep's row as its files hold it: a Row's fields


def sweep_records(rows: Iterable[Row]) -> list[SweepRecord]:
    """Sweep rows as their files hold them (sweep.json, sweep.csv, tune.json, and the
    frames of sweep.parquet and tune.parquet): each :class:`Row`'s fields, in order."""
    return [asdict(r) for r in rows]


def finish_sweep(writer: RunWriter, rows: Sequence[Row]) -> Path:
    """Record a sweep (one row per message size) as a run directory: ``sweep.parquet``
    (led by ``run_id``, like every run table), ``sweep.csv`` and ``sweep.json``, and the
    manifest (kind ``sweep``)."""
    records = sweep_records(rows)
    with open(writer.tmp / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)
    (writer.tmp / "sweep.json").write_text(json.dumps(records, indent=2) + "\n")
    return writer.finish({"sweep": pl.DataFrame(records)},
                         {"kind": "sweep", "rows": len(records)})


def finish_tune(writer: RunWriter, sweeps: Mapping[str, Sequence[Row]], model: Model) -> Path:
    """Record a tuning (``labkit tune``) as a run directory: ``tune.parquet`` (every
    algorithm's sweep rows, ``algo`` first), ``model.json`` and the manifest (kind
    ``tune``)."""
    (writer.tmp / "model.json").write_text(model.to_json())
    records = [{**record, "algo": algo} for algo, rows in sweeps.items()
               for record in sweep_records(rows)]
    return writer.finish({"tune": pl.DataFrame(records).select("algo", pl.exclude("algo"))},
                         {"kind": "tune", "rows": len(records), "model": "model.json"})


@dataclass
class Tuning:
    """A tuning (``labkit tune``): every algorithm's sweep rows, the model fitted from them,
    its run directory (``path``, ``manifest``) and the file that keeps the model for
    ``algo: auto`` (``model_path``, see :func:`save_model`; None for a tuning read back
    whose model is not kept here, e.g. one recorded on another machine)."""

    path: Path
    sweeps: dict[str, list[SweepRecord]]
    model: Model
    model_path: Path | None
    manifest: TuneManifest


Tuned = Tuning  # its name before issue 29, for one release


def load_tuning(path: str | Path, models: Path | None = None) -> Tuning:
    """Read back a tuning that ``labkit tune`` recorded (its model kept in ``models``,
    default data/models, when it is there)."""
    path = Path(path)
    doc = read_documents(path, ("manifest.json",))["manifest.json"]
    if (kind := kind_of(path, doc)) != "tune":
        raise RunDataError(f"{path}: not a tuning (kind {kind!r})")
    manifest = manifest_of(path, doc, TuneManifest)
    rows = pl.read_parquet(path / "tune.parquet").drop("run_id", strict=False)
    sweeps = {algo: rows.filter(pl.col("algo") == algo).to_dicts()
              for algo in rows["algo"].unique(maintain_order=True)}
    f = path / "model.json"
    try:
        model = Model.from_json(inputs.read_text(f, inputs.JSON_BYTES), file=str(f))
    except inputs.InputError as exc:
        raise RunDataError(str(exc)) from None
    except ValueError as exc:
        raise RunDataError(f"{f}: {exc}") from None
    kept = store.kept_model(model.fabric_key, manifest.run_id, models)
    return Tuning(path, sweeps, model, kept if kept.is_file() else None, manifest)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)


@dataclass
class Run:
    """A recorded run: its directory, manifest, summary and typed tables."""

    path: Path
    manifest: RunManifest
    summary: Summary
    tables: dict[str, pl.DataFrame]

    def __getitem__(self, name: str) -> pl.DataFrame:
        return self.tables[name]


def read_documents(path: Path, names: tuple[str, ...] = ("manifest.json", "summary.json")
                   ) -> dict[str, dict]:
    """A run directory's JSON documents by file name, read within
    :mod:`labkit.model.inputs`' limits; RunDataError names what is wrong."""
    if not path.is_dir():
        raise RunDataError(f"{path}: not a run directory")
    docs = {}
    for name in names:
        f = path / name
        if not f.exists():
            raise RunDataError(_holds_runs(path) or f"{f}: missing (an incomplete or damaged "
                                                     "run)")
        try:
            docs[name] = inputs.read_json(f)
        except inputs.InputError as exc:
            raise RunDataError(str(exc)) from None
    return docs


def _holds_runs(path: Path) -> str | None:
    """What to say of ``path`` when it is a folder of recorded runs, not one (None: it
    is not)."""
    runs = sorted(d.name for d in path.iterdir()
                  if not d.name.startswith(".") and (d / "manifest.json").is_file())
    if not runs:
        return None
    shown = ", ".join(runs[-5:]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
    return (f"{path}: a folder of {len(runs)} recorded run{'s' * (len(runs) > 1)} ({shown}), "
            f"not a run itself: name one, e.g. {path / runs[-1]}")


def kind_of(path: Path, doc: dict) -> str:
    """What ``doc``, the manifest of the directory ``path``, records (one of
    :data:`labkit.model.manifest.KINDS`); RunDataError when it says none of them."""
    try:
        return manifest_mod.kind_of(doc)
    except ManifestError as exc:
        raise RunDataError(f"{path}/{exc}") from None


def read_manifest(path: Path, kind: type[M]) -> M:
    """The manifest of the directory ``path``, as ``kind``; RunDataError says when it is
    missing, another kind's, or does not fit."""
    return manifest_of(path, read_documents(path, ("manifest.json",))["manifest.json"], kind)


def manifest_of(path: Path, doc: dict, kind: type[M]) -> M:
    """``doc``, the manifest of the directory ``path``, as ``kind``; RunDataError says
    when it is another kind's, or does not fit."""
    found = kind_of(path, doc)
    if manifest_mod.OF_KIND[found] is not kind:
        raise RunDataError(f"{path}: a {found}, not a {manifest_mod.kind_name(kind)}")
    try:
        return kind.from_json(doc)
    except ManifestError as exc:
        raise RunDataError(f"{path}/{exc}") from None


def load_run(path: str | Path) -> Run:
    """Load and validate a run directory."""
    path = Path(path)
    docs = read_documents(path)
    kind = kind_of(path, docs["manifest.json"])
    if kind == "sweep":
        raise RunDataError(f"{path}: a sweep, not a run: its table is sweep.parquet "
                           "(also sweep.csv and sweep.json)")
    if kind == "tune":
        raise RunDataError(f"{path}: a tuning, not a run: its table is tune.parquet (every "
                           "algorithm's sweep rows), its model model.json")
    if kind == "calibration":
        raise RunDataError(f"{path}: a calibration, not a run: its summary.json lists the "
                           "trials, each a run of its own")
    if kind == "batch":
        raise RunDataError(f"{path}: a batch, not a run: labkit.load_runs({str(path)!r}) reads "
                           "its runs as one frame; each is in its runs/ folder")
    manifest = manifest_of(path, docs["manifest.json"], RunManifest)
    tables = {}
    required = set(manifest.tables if manifest.tables is not None else set(SCHEMAS) - ADDED_LATER)
    for name, schema in SCHEMAS.items():
        f = path / f"{name}.parquet"
        if not f.exists() and name not in required:
            tables[name] = pl.DataFrame(schema=schema)
            continue
        if not f.exists():
            raise RunDataError(f"{f}: missing (an incomplete or damaged run)")
        try:
            frame = pl.read_parquet(f)
        except Exception as exc:  # polars raises several types for a damaged file
            raise RunDataError(f"{f}: not a readable Parquet file ({exc})") from None
        for col, dtype in schema.items():
            if col not in frame.columns and (name, col) in COLUMNS_ADDED_LATER:
                frame = frame.with_columns(pl.lit(COLUMNS_ADDED_LATER[name, col], dtype)
                                           .alias(col))
            if col not in frame.columns:
                raise RunDataError(f"{f}: column {col!r} is missing")
            if frame.schema[col] != dtype:
                raise RunDataError(f"{f}: column {col!r} is {frame.schema[col]}, "
                                   f"expected {dtype}")
        tables[name] = frame.select(list(schema))
    return Run(path, manifest, read_summary(path, docs["summary.json"]), tables)


def read_summary(path: Path, doc: dict) -> Summary:
    """The run at ``path``'s summary from its summary.json document ``doc``; RunDataError
    names the file and the key that does not fit."""
    try:
        return Summary.from_json(doc, "summary")
    except SummaryError as exc:
        raise RunDataError(f"{path / 'summary.json'}: {exc}") from None


def list_runs(root: Path | None = None) -> list[dict]:
    """Every run under ``root`` (default: the runs' directory, :func:`labkit.model.paths.current`),
    complete or not, with its status and size."""
    out: list[dict] = []
    root = paths.current().runs if root is None else root
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not d.is_dir():
            continue
        status = "complete"
        name = d.name
        if name.startswith(".") and name.endswith(".incomplete"):
            status, name = "incomplete", name[1:-len(".incomplete")]
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        out.append({"run_id": name, "status": status, "path": str(d), "bytes": size,
                    "modified": time.strftime("%Y-%m-%d %H:%M",
                                              time.localtime(d.stat().st_mtime))})
    return out


@dataclass(frozen=True)
class Sweep:
    """A recorded sweep: its directory, its manifest (None: recorded before sweeps kept
    one) and its rows as sweep.json holds them."""

    path: Path
    manifest: SweepManifest | None
    rows: list[SweepRecord]


def load_sweep(path: str | Path) -> Sweep:
    """The sweep recorded in ``path`` (``sweep.json``, and the manifest when it has one);
    RunDataError names the file and what is wrong with it."""
    path = Path(path)
    rows = read_documents(path, ("sweep.json",))["sweep.json"]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise RunDataError(f"{path}/sweep.json: not a list of rows, one per message size")
    manifest = (read_manifest(path, SweepManifest) if (path / "manifest.json").exists()
                else None)
    return Sweep(path, manifest, rows)


def load_sweeps(root: str | Path) -> dict[str, list[SweepRecord]]:
    """The rows of every sweep under ``root`` (a directory holding ``sweep.json``), by the
    directory's name, in name order."""
    found = sorted(Path(root).glob("*/sweep.json"))
    if not found:
        raise RunDataError(f"{root}: no sweep directories (*/sweep.json)")
    try:
        return {f.parent.name: inputs.read_json(f) for f in found}
    except inputs.InputError as exc:
        raise RunDataError(str(exc)) from None


__getattr__ = moved.forward(__name__, {
    "RUNS_DIR": ("labkit.model.paths.current().runs", lambda: paths.current().runs)})
