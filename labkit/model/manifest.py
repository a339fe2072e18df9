"""What a recorded directory's ``manifest.json`` says, one type per kind (:data:`OF_KIND`):
a run (:class:`RunManifest`), a sweep, a tuning, a calibration and a batch, the first four
with the :class:`Provenance` of what recorded them (docs/data-model.md).

Each is written as it is recorded and rewritten as it ends: ``status`` first, then what
the recording was asked to do, then how it ended (``error``, ``end_time``) and the tables
it wrote. ``from_json`` reads every manifest labkit has written, those recorded before a
key existed included (see :mod:`labkit.model.records`), and ``to_json`` writes it back
key for key (each type a :class:`~labkit.model.records.Record`, its errors
:class:`ManifestError`). :func:`kind_of` tells the kinds apart without reading the rest; a
run's manifest has no ``kind``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from labkit.model import records
from labkit.model.records import DocumentError, Record, flat, when_set


class ManifestError(DocumentError):
    """A manifest does not fit its kind's type: the message names the key and why."""


@dataclass(frozen=True, kw_only=True)
class _Document(Record):
    """A manifest or a batch's point: ``record["key"]`` and ``record.get("key")``, as they
    were read before they had types, kept for one release with a DeprecationWarning."""

    ERROR: ClassVar[type[DocumentError]] = ManifestError
    DOCUMENT: ClassVar[str] = "manifest.json"

    def __getitem__(self, name: str) -> Any:
        warnings.warn(f"{type(self).__name__}[{name!r}] goes in the next release: read its "
                      "attributes (labkit.model.manifest)", DeprecationWarning, stacklevel=2)
        return self.to_json()[name]

    def get(self, name: str, default: Any = None) -> Any:
        warnings.warn(f"{type(self).__name__}.get({name!r}) goes in the next release: read "
                      "its attributes (labkit.model.manifest)", DeprecationWarning, stacklevel=2)
        return self.to_json().get(name, default)


@dataclass(frozen=True, kw_only=True)
class Provenance(Record):
    """What recorded a run, a sweep, a tuning or a calibration: the kernel, labkit's git
    revision (``-dirty``: with uncommitted changes), the BPF objects' and the hot path's
    SHA-256, Python and every Python package's version, requirements.lock's hash, the
    tools' versions (clang, bpftool, iproute2, Mininet, libbpf), the CPUs and the host."""

    kernel: str
    labkit_revision: str
    bpf_objects: dict[str, str]  # file name -> SHA-256
    python: str
    packages: dict[str, str]  # distribution -> version
    requirements_lock: str | None = None  # None: no lock file
    tools: dict[str, str] | None = when_set()  # tool -> its version line ("not found")
    cpus: int | None
    host: str | None = when_set()
    hotpath: str | None = None  # None: not built


@dataclass(frozen=True, kw_only=True)
class Rates:
    """What ``emulation.rate_factor`` did: the factor, the calibration it came from (None:
    the scenario's own number), the bottleneck's rate and the scale factor it gave."""

    factor: float
    calibration: str | None
    bottleneck_rate_mbps: float
    scale_factor: float


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The algorithm a model chose at one size, and why."""

    algo: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class AutoChoice(Choice):
    """What ``algo: auto`` chose for a run's All-Reduce: by the model in ``model``, for
    the ranks in ring order."""

    model: str
    ranks: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class AutoChoices:
    """What ``--algo auto`` chose for a sweep, per message size (its decimal string)."""

    model: str
    ranks: tuple[str, ...]
    choices: dict[str, Choice]


@dataclass(frozen=True, kw_only=True)
class UserClass:
    """A user's controller or traffic kind as its run keeps it: the class, and its source
    file in the run and that file's SHA-256 (None: its source could not be found)."""

    qualname: str = field(metadata=records.key("class"))
    source: str | None
    sha256: str | None


@dataclass(frozen=True, kw_only=True)
class KeptObject:
    """The user's classifier object as its run keeps it (a path in the run)."""

    object: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class BatchRef:
    """The batch a run is a point of: its id, the point's index and its parameters."""

    id: str
    point: int
    parameters: dict[str, Any]  # key path as written -> value as written


@dataclass(frozen=True, kw_only=True)
class RunManifest(_Document):
    """A run (``labkit run``): the scenario as run, its policies, seed and duration cap,
    the command line, the batch it is a point of, the users' classes and classifier it
    kept, what ``algo: auto`` and ``rate_factor`` chose; then each policy's fidelity (its
    summary's), what its teardown left to a process it did not start (``notes``: a host's
    namespace, emptied of its ports), and how it ended. ``tables``: the tables it wrote
    (None: recorded before that list, see docs/data-model.md)."""

    status: str = "incomplete"
    run_id: str
    scenario: dict[str, Any]  # Scenario.to_dict()
    scenario_sha256: str
    policies: tuple[str, ...]
    seed: int
    duration_s: float | None
    start_time: str
    argv: tuple[str, ...] | None
    batch: BatchRef | None = None
    controllers: dict[str, UserClass] | None = when_set()
    kinds: dict[str, UserClass] | None = when_set()
    classifier: KeptObject | None = None
    auto: AutoChoice | None = None
    rates: Rates | None = None
    provenance: Provenance = flat()
    fidelity: dict[str, dict[str, Any]] | None = when_set()  # policy -> its summary's fidelity
    notes: tuple[str, ...] | None = when_set()  # what its teardown left to another's process
    error: str | None = when_set()
    end_time: str | None = when_set()
    tables: tuple[str, ...] | None = when_set()


@dataclass(frozen=True, kw_only=True)
class SweepManifest(_Document):
    """A sweep (``labkit sweep``): the op, algorithm, sizes and timed ops per size, what
    ``--algo auto`` chose, the rates, and what a lossless fabric's pauser could not do
    (``notes``)."""

    status: str = "incomplete"
    run_id: str
    kind: str = field(default="sweep", init=False)
    scenario: dict[str, Any]
    scenario_sha256: str
    op: str
    algo: str
    sizes: tuple[int, ...]
    iters: int
    start_time: str
    auto: AutoChoices | None = None
    rates: Rates | None = None
    argv: tuple[str, ...] | None
    provenance: Provenance = flat()
    notes: tuple[str, ...] | None = when_set()
    error: str | None = when_set()
    end_time: str | None = when_set()
    tables: tuple[str, ...] | None = when_set()


@dataclass(frozen=True, kw_only=True)
class TuneManifest(_Document):
    """A tuning (``labkit tune``): the algorithms swept, the sizes, timed ops per size and
    ranks in ring order, the rates; then the algorithms left out of the fit
    (``not_fitted``) and the pauser's notes."""

    status: str = "incomplete"
    run_id: str
    kind: str = field(default="tune", init=False)
    scenario: dict[str, Any]
    scenario_sha256: str
    algos: tuple[str, ...]
    sizes: tuple[int, ...]
    iters: int
    ranks: tuple[str, ...]
    start_time: str
    rates: Rates | None = None
    argv: tuple[str, ...] | None
    provenance: Provenance = flat()
    not_fitted: tuple[str, ...] | None = when_set()
    notes: tuple[str, ...] | None = when_set()
    error: str | None = when_set()
    end_time: str | None = when_set()
    tables: tuple[str, ...] | None = when_set()


@dataclass(frozen=True, kw_only=True)
class CalibrationManifest(_Document):
    """A calibration (``labkit calibrate``): the scenario as written (its rate factor is
    what the calibration finds); its trials are runs of their own."""

    status: str = "incomplete"
    run_id: str
    kind: str = field(default="calibration", init=False)
    scenario: dict[str, Any]
    scenario_sha256: str
    start_time: str
    argv: tuple[str, ...] | None
    provenance: Provenance = flat()
    error: str | None = when_set()
    end_time: str | None = when_set()
    tables: tuple[str, ...] | None = when_set()


@dataclass(frozen=True, kw_only=True)
class GridRecord:
    """The grid a batch ran: its file, hash, name and description, axes (key path ->
    values), policy sets, seeds and duration cap."""

    file: str
    sha256: str
    name: str
    description: str | None
    axes: dict[str, tuple[Any, ...]]
    policies: tuple[tuple[str, ...], ...]
    seeds: tuple[int, ...]
    duration_s: float | None


@dataclass(frozen=True, kw_only=True)
class ScenarioFile:
    """The scenario file a batch's grid names: its path, hash and name."""

    file: str
    sha256: str
    name: str


POINT_STATUSES = ("pending", "submitted", "running", "complete", "failed", "interrupted",
                  "cancelled")


@dataclass(frozen=True, kw_only=True)
class BatchPoint(_Document):
    """One point of a batch as it stands: its index, name, parameters, policies and seed,
    its run directory (relative to the batch; None: it kept none), status (one of
    :data:`POINT_STATUSES`), run id, host, Slurm job id and error, and once said, its job's
    log, and when it started and ended."""

    point: int
    name: str
    parameters: dict[str, Any]
    policies: tuple[str, ...]
    seed: int
    run: str | None
    status: str = "pending"
    run_id: str | None = None
    host: str | None = None
    job_id: str | None = None
    error: str | None = None
    log: str | None = when_set()
    start_time: str | None = when_set()
    end_time: str | None = when_set()


STOPPED = ("interrupted", "incomplete")  # how a batch that did not finish ended


@dataclass(frozen=True, kw_only=True)
class BatchManifest(_Document):
    """A batch (``labkit batch``, docs/batches.md): the grid, the scenario file, the
    executor, the host that ran it, and every point as it stands. ``error`` is said once
    the batch stopped before its end (status :data:`STOPPED`; None: interrupted)."""

    status: str = "running"
    run_id: str
    kind: str = field(default="batch", init=False)
    grid: GridRecord
    scenario: ScenarioFile
    executor: str
    host: str
    start_time: str
    argv: tuple[str, ...] | None
    labkit_revision: str
    points: tuple[BatchPoint, ...]
    error: str | None = when_set()
    end_time: str | None = when_set()
    tables: tuple[str, ...] | None = when_set()

    def to_json(self) -> dict[str, Any]:
        return records.written(self, nulls={"error"} if self.status in STOPPED else set())


Manifest = RunManifest | SweepManifest | TuneManifest | CalibrationManifest | BatchManifest
OF_KIND: dict[str, type[Manifest]] = {
    "run": RunManifest, "sweep": SweepManifest, "tune": TuneManifest,
    "calibration": CalibrationManifest, "batch": BatchManifest}
KINDS = tuple(OF_KIND)


def kind_of(doc: Any) -> str:
    """What a manifest document records: one of :data:`KINDS` (a run's has no ``kind``)."""
    kind = doc.get("kind", "run") if isinstance(doc, dict) else None
    if kind not in KINDS:
        raise ManifestError(f"manifest.json: kind {kind!r} is none of {', '.join(KINDS)}")
    return kind


def kind_name(kind: type[Manifest]) -> str:
    """The kind a manifest type records (one of :data:`KINDS`)."""
    return next(name for name, cls in OF_KIND.items() if cls is kind)


def from_json(doc: Any) -> Manifest:
    """The manifest ``doc`` holds, as its kind's type."""
    return OF_KIND[kind_of(doc)].from_json(doc)
