"""The shipped samples (``data/sample/``): what each one is and how it is recorded, read from
``data/sample/samples.yaml``, and recording them again (``labkit samples``, ``make samples``).

Each sample is recorded by the labkit command its entry names, in a process of its own,
into ``data/sample/.recording/<path>``; only when that recording is complete does it take
the old sample's place, so a failed or interrupted one leaves the shipped sample as it was
(the partial recording and its log stay in ``.recording/``, which git ignores). The figures
an entry names are then drawn from the new sample into ``docs/figures/``. How long it takes
is estimated from each sample's last recording (its manifest's start and end), else from
the entry's ``minutes``. The samples' folder and the checkout are where
:func:`labkit.model.paths.current` says, unless a function is told another ``root``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from labkit.model import inputs, paths
from labkit.runs.provenance import git_revision

STAGING = ".recording"
COMMANDS = ("run", "sweep", "tune", "calibrate")  # the labkit commands that record


class SamplesError(ValueError):
    """samples.yaml, or the request, is wrong: the message names the file and the key."""


@dataclass(frozen=True)
class Sample:
    """One shipped sample: where it lives under ``data/sample/``, the labkit command that
    records it (without ``--out``), the figures drawn from it, and the estimate for a
    sample recorded before it kept a manifest."""

    path: str
    command: tuple[str, ...]
    figures: tuple[str, ...] = ()
    minutes: float = 1.0

    @property
    def name(self) -> str:
        """The sample's path as one word (figure files: ``<figure>-<name>.svg``)."""
        return self.path.replace("/", "-")

    def figure_file(self, figure: str) -> Path:
        return figures_dir() / f"{figure}-{self.name}.svg"


def samples_file() -> Path:
    """The samples' own manifest: ``samples.yaml`` in the samples' folder."""
    return paths.current().samples / paths.SAMPLE_MARK


def figures_dir() -> Path:
    """Where the docs' figures drawn from the samples are: ``docs/figures`` of the
    checkout."""
    return paths.current().repo / "docs" / "figures"


def load(file: Path | None = None) -> list[Sample]:
    """Every sample in ``file`` (default :func:`samples_file`), in its order; SamplesError
    names the entry and key."""
    file = samples_file() if file is None else file
    try:
        _, doc = inputs.read_yaml(file)
    except inputs.InputError as exc:
        raise SamplesError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
        raise SamplesError(f"{file}: needs `samples:`, a list of entries")
    found: list[Sample] = []
    for i, entry in enumerate(doc["samples"]):
        where = f"{file}: samples[{i}]"
        if not isinstance(entry, dict):
            raise SamplesError(f"{where}: an entry is a mapping (path, command, ...)")
        if unknown := set(entry) - {"path", "command", "figures", "minutes"}:
            raise SamplesError(f"{where}: unknown key {sorted(unknown)[0]!r} (known: path, "
                               "command, figures, minutes)")
        path, command = entry.get("path"), entry.get("command")
        if not isinstance(path, str) or not path or path.startswith(("/", ".")) \
                or ".." in path.split("/"):
            raise SamplesError(f"{where}.path: a relative path under data/sample/, got {path!r}")
        argv = tuple(shlex.split(command)) if isinstance(command, str) else ()
        if not argv or argv[0] not in COMMANDS:
            raise SamplesError(f"{where}.command: a labkit command that records (one of "
                               f"{', '.join(COMMANDS)}), got {command!r}")
        if "--out" in argv:
            raise SamplesError(f"{where}.command: without --out (the sample's path is its "
                               "place)")
        figures = entry.get("figures", [])
        if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
            raise SamplesError(f"{where}.figures: a list of figure names, got {figures!r}")
        minutes = entry.get("minutes", 1.0)
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or minutes <= 0:
            raise SamplesError(f"{where}.minutes: a positive number, got {minutes!r}")
        if any(s.path == path for s in found):
            raise SamplesError(f"{where}.path: {path} is named twice")
        found.append(Sample(path, argv, tuple(figures), float(minutes)))
    return found


def select(samples: Sequence[Sample], only: Sequence[str]) -> list[Sample]:
    """The samples named in ``only`` (a path, or a folder of them), in the file's order; all
    when ``only`` is empty."""
    if not only:
        return list(samples)
    chosen = [s for s in samples if any(s.path == o.rstrip("/") or s.path.startswith(
        o.rstrip("/") + "/") for o in only)]
    missing = [o for o in only if not any(s.path == o.rstrip("/") or s.path.startswith(
        o.rstrip("/") + "/") for s in samples)]
    if missing:
        raise SamplesError(f"{samples_file()}: no sample {missing[0]!r} (known: "
                           f"{', '.join(s.path for s in samples)})")
    return chosen


def estimate_s(sample: Sample, root: Path | None = None) -> float:
    """Seconds the sample's last recording took (its manifest's start and end, under
    ``root``: default the samples' folder), or its entry's ``minutes`` when it has no such
    manifest."""
    try:
        m = inputs.read_json((root or paths.current().samples) / sample.path / "manifest.json")
        took = (datetime.fromisoformat(m["end_time"])
                - datetime.fromisoformat(m["start_time"])).total_seconds()
    except (ValueError, KeyError, TypeError):  # InputError too: unreadable, not JSON
        return sample.minutes * 60
    return took if took > 0 else sample.minutes * 60


def check_revision(allow_dirty: bool) -> str:
    """The revision the samples will name; SamplesError when it has uncommitted changes
    (or is not known) and ``allow_dirty`` is not set: a sample names a clean revision."""
    rev = git_revision()
    if not allow_dirty and (rev == "unknown" or rev.endswith("-dirty")):
        raise SamplesError(f"labkit's revision is {rev}: commit (or stash) first, so that "
                           "every sample names the code that recorded it (--allow-dirty "
                           "records anyway, and the manifests then say -dirty)")
    return rev


@dataclass(frozen=True)
class Recorded:
    """A sample recorded again: how long it took and the figures drawn from it."""

    sample: Sample
    seconds: float
    figures: tuple[Path, ...]


def labkit_argv(*args: str) -> list[str]:
    """A labkit command in a process of its own: this environment's ``labkit`` script (what
    its manifest then names), or this interpreter's ``-m labkit.ui.cli``."""
    script = Path(sys.executable).parent / "labkit"
    return [str(script) if script.exists() else sys.executable,
            *(() if script.exists() else ("-m", "labkit.ui.cli")), *args]


def record(sample: Sample, root: Path | None = None, figures: Path | None = None,
           runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> Recorded:
    """Record ``sample`` again: into ``root/.recording/<path>`` (``root``: default the
    samples' folder; its log beside it), then in the old one's place; then its figures
    (into ``figures``, default :func:`figures_dir`). RuntimeError (naming the log) when the
    command fails; the shipped sample is then untouched."""
    root = paths.current().samples if root is None else root
    staging = root / STAGING / sample.path
    log = staging.with_name(staging.name + ".log")
    for unfinished in (staging, staging.with_name(f".{staging.name}.incomplete")):
        if unfinished.exists():  # a recording of ours that did not finish (the second:
            shutil.rmtree(unfinished)  # the name labkit gives a run until it completes)
    staging.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "w") as out:
        done = runner(labkit_argv(*sample.command, "--out", str(staging)),
                      cwd=paths.current().repo,
                      stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode in (130, -2):  # Ctrl-C: the run tore down what it built
        raise KeyboardInterrupt
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{sample.path}: `labkit {shlex.join(sample.command)}` failed "
                           f"(exit {done.returncode}); the shipped sample is unchanged; the "
                           f"log is {log}:\n  " + "\n  ".join(tail))
    took = time.monotonic() - start
    final = root / sample.path
    old = staging.with_name(staging.name + ".previous")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return Recorded(sample, took, draw_figures(sample, root, figures, runner))


def draw_figures(sample: Sample, root: Path | None = None, figures: Path | None = None,
                 runner: Callable[..., subprocess.CompletedProcess] = subprocess.run
                 ) -> tuple[Path, ...]:
    """The figures ``sample`` names, drawn from its run under ``root`` (default: the
    samples' folder) as SVG into ``figures`` (default :func:`figures_dir`;
    ``<figure>-<name>.svg``, replacing the one before)."""
    if not sample.figures:
        return ()
    root = paths.current().samples if root is None else root
    figures = figures_dir() if figures is None else figures
    drawn = root / STAGING / f"{sample.name}.figures"
    if drawn.exists():
        shutil.rmtree(drawn)
    done = runner(labkit_argv("figures", str(root / sample.path), "--out", str(drawn)),
                  cwd=paths.current().repo,
                  capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{sample.path}: `labkit figures` failed: "
                           f"{(done.stderr or done.stdout).strip()}")
    out = []
    for figure in sample.figures:
        svg = drawn / f"{figure}.svg"
        if not svg.exists():
            raise RuntimeError(f"{sample.path}: the run has no {figure} figure (it drew "
                               f"{', '.join(sorted(p.stem for p in drawn.glob('*.svg')))})")
        target = figures / f"{figure}-{sample.name}.svg"
        shutil.copyfile(svg, target)
        out.append(target)
    shutil.rmtree(drawn)
    return tuple(out)
