"""Where labkit reads and writes on this machine, in one frozen :class:`Paths`: labkit's
checkout, the recorded runs, the tuned models, the shipped samples, the figures, the
built BPF objects and the state directory (the run lock, the registries, the runs'
scratch directories).

The default is built from the environment when first asked (:meth:`Paths.from_env`:
``LABKIT_RUNS_DIR``, ``LABKIT_MODELS_DIR``, ``LABKIT_SAMPLE_DIR``, ``LABKIT_FIGURES_DIR``,
``LABKIT_BPF_BUILD``, ``LABKIT_STATE_DIR``, ``LABKIT_SERVE``; else under the checkout, and
``/run/labkit``). A test or a user hands in another with :func:`use`, for good or for a
``with`` block; the code reads :func:`current`, never a copy of its own. Child processes
inherit the environment, not the object: :meth:`Paths.environ` gives one that makes
them see it.

:func:`sample` and :func:`scenario_file` find the shipped recorded runs (``data/sample``)
and scenario files (``topologies/``) for notebooks, like MNE's ``data_path()``: in the
checkout labkit is installed from, else in the checkout the current directory is in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[2]  # labkit's checkout (installed: its parent)
SAMPLE_MARK = "samples.yaml"  # what tells data/sample from any folder of that name
ENVIRONMENT = {  # field -> the variable that sets it
    "runs": "LABKIT_RUNS_DIR", "models": "LABKIT_MODELS_DIR", "samples": "LABKIT_SAMPLE_DIR",
    "figures": "LABKIT_FIGURES_DIR", "bpf_build": "LABKIT_BPF_BUILD",
    "state": "LABKIT_STATE_DIR", "serve": "LABKIT_SERVE"}


@dataclass(frozen=True)
class Paths:
    """Where labkit reads and writes (the module docstring)."""

    repo: Path = REPO_ROOT  # the checkout: topologies/, bpf/, notebooks/, docs/
    runs: Path = REPO_ROOT / "data" / "runs"  # new runs, sweeps, tunings, batches
    models: Path = REPO_ROOT / "data" / "models"  # tuned cost models (algo: auto)
    samples: Path = REPO_ROOT / "data" / "sample"  # the shipped recorded runs
    figures: Path = REPO_ROOT / "data" / "figures"  # `labkit figures` without --out
    bpf_build: Path = REPO_ROOT / "bpf" / "build"  # the built eBPF objects
    state: Path = Path("/run/labkit")  # the run lock, registries, scratch directories
    serve: Path = Path("/run/labkit/serve.sock")  # `labkit serve`'s socket

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, repo: Path = REPO_ROOT
                 ) -> Paths:
        """The paths ``environ`` (default: this process's environment) sets, the others
        under ``repo`` (and ``/run/labkit``)."""
        env = os.environ if environ is None else environ
        under = {"runs": repo / "data" / "runs", "models": repo / "data" / "models",
                 "samples": repo / "data" / "sample", "figures": repo / "data" / "figures",
                 "bpf_build": repo / "bpf" / "build"}
        given = {name: Path(env[var]) for name, var in ENVIRONMENT.items() if env.get(var)}
        return cls(repo=repo, **{**under, **given})

    def under(self, root: Path) -> Paths:
        """These paths with everything labkit writes moved below ``root`` (runs, models,
        figures, state, the serve socket), what it only reads (the checkout, samples,
        BPF objects) kept: a test's sandbox."""
        return replace(self, runs=root / "runs", models=root / "models",
                       figures=root / "figures", state=root / "state",
                       serve=root / "state" / "serve.sock")

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment (``base``, default this process's) in which a child labkit
        process builds these same paths."""
        env = dict(os.environ if base is None else base)
        env.update({var: str(getattr(self, name)) for name, var in ENVIRONMENT.items()})
        return env

    @property
    def work(self) -> Path:
        """The runs' scratch directories, one per run id."""
        return self.state / "work"

    @property
    def registry(self) -> Path:
        """The run registries (what each run created in the kernel)."""
        return self.state / "registry"

    @property
    def lock(self) -> Path:
        """The run lock: one experiment at a time on this machine."""
        return self.state / "run.lock"

    @property
    def topologies(self) -> Path:
        """The shipped scenario files."""
        return self.repo / "topologies"


assert set(ENVIRONMENT) <= {f.name for f in fields(Paths)}
_given: list[Paths] = []  # handed in by use(), innermost last
_default: list[Paths] = []  # from the environment, once asked


def current() -> Paths:
    """The paths in force: the last handed in by :func:`use`, else the environment's."""
    if _given:
        return _given[-1]
    if not _default:
        _default.append(Paths.from_env())
    return _default[0]


def use(paths: Paths) -> Using:
    """Hand in ``paths``: in force from now on, or, in a ``with`` block, until its end::

        paths.use(paths.Paths.from_env().under(tmp_path))  # from now on
        with paths.use(paths.Paths(runs=Path("elsewhere"))):
            ...  # only here
    """
    _given.append(paths)
    return Using(paths)


@dataclass(frozen=True)
class Using:
    """The paths :func:`use` handed in; leaving a ``with`` block on it gives back the ones
    in force before."""

    paths: Paths

    def __enter__(self) -> Paths:
        return self.paths

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for i in range(len(_given) - 1, -1, -1):
            if _given[i] is self.paths:
                del _given[i]
                return


class SampleNotFound(FileNotFoundError):
    """labkit's shipped samples or scenario files are not on this machine, or not the one
    named; the message says where they were looked for and what to do."""


def sample(name: str = "") -> Path:
    """The shipped recorded run, sweep or tuning ``name`` (a folder of ``data/sample``:
    ``"bottleneck"``, ``"lossless/lossy"``, ``"sweeps/ring"``, ``"tune/leaf-spine"``;
    ``""``: the folder of them all), for ``labkit.load_run`` and its kin.

    Found where :func:`current` says (``LABKIT_SAMPLE_DIR``, else the checkout labkit is
    installed from), else in ``data/sample`` of the checkout the current directory is in:
    a notebook copied elsewhere still finds them. :class:`SampleNotFound` says what to do
    when they are not on this machine, or lists the samples when ``name`` is not one."""
    root = _found(current().samples, Path("data") / "sample", SAMPLE_MARK, "sample runs",
                  "set LABKIT_SAMPLE_DIR to a copy of its data/sample")
    path = root / name
    if not path.is_dir():
        raise SampleNotFound(f"{name!r} is not a sample in {root}; the samples: "
                             f"{', '.join(_listed(root))}")
    return path


def scenario_file(name: str) -> Path:
    """The shipped scenario file ``name`` (``"bottleneck"``: ``topologies/bottleneck.yaml``),
    found as :func:`sample` finds the samples."""
    root = _found(current().topologies, Path("topologies"), "bottleneck.yaml",
                  "scenario files", "hand labkit.model.paths.use() Paths(repo=<the clone>)")
    path = root / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if not path.is_file():
        raise SampleNotFound(f"{name!r} is not a scenario file in {root}; they are: "
                             f"{', '.join(sorted(p.stem for p in root.glob('*.yaml')))}")
    return path


def _found(configured: Path, relative: Path, mark: str, what: str, instead: str) -> Path:
    """``configured`` if it holds ``mark``, else ``relative`` in the current directory or
    the nearest of its parents that has it."""
    if (configured / mark).is_file():
        return configured
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / relative / mark).is_file():
            return folder / relative
    raise SampleNotFound(
        f"labkit's {what} are not at {configured}, nor in {relative} of a checkout above "
        f"{here}: they come with labkit's repository, not with its package. Work in a "
        f"clone of the repository (`make setup` there), or {instead}.")


def _listed(root: Path) -> list[str]:
    """The samples under ``root``: each folder with a manifest.json, by its relative path."""
    return sorted(str(m.parent.relative_to(root)) for m in root.rglob("manifest.json")
                  if not any(part.startswith(".") for part in m.relative_to(root).parts))
