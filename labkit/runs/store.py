"""What this machine keeps for later runs: the model store (``data/models/<fabric key>/
<run id>.json``, the cost models ``algo: auto`` chooses by) and the search for the newest
calibration of a scenario among the recorded runs (``rate_factor: auto``). Both are
where :func:`labkit.model.paths.current` says (``models``, ``runs``) unless told another.

Below :mod:`labkit.runs.rundir`, which re-exports these names."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from labkit.model import inputs, paths
from labkit.model import manifest as manifest_mod
from labkit.model.autotune import Model
from labkit.model.manifest import CalibrationManifest
from labkit.runs import moved


def save_model(model: Model, run_id: str, models: Path | None = None) -> Path:
    """Keep a fitted :class:`labkit.model.autotune.Model` as ``<models>/<fabric key>/<run id>.json``
    (a new file each tuning: none is ever replaced); returns its path."""
    path = kept_model(model.fabric_key, run_id, models)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")  # written whole, then renamed into place
    tmp.write_text(json.dumps(json.loads(model.to_json()), indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def kept_model(fabric_key: str, run_id: str, models: Path | None = None) -> Path:
    """Where :func:`save_model` keeps the model a tuning ``run_id`` fitted."""
    return (models or paths.current().models) / fabric_key / f"{run_id}.json"


def newest_model(fabric_key: str, models: Path | None = None) -> tuple[Model, Path] | None:
    """(the newest model of the fabric ``fabric_key``, its path), or None when it was never
    tuned (run ids start with their date and time, so the last name is the newest)."""
    found = sorted(((models or paths.current().models) / fabric_key).glob("*.json"))
    if not found:
        return None
    text = inputs.read_text(found[-1], inputs.JSON_BYTES)
    return Model.from_json(text, fabric_key, str(found[-1])), found[-1]


def newest_calibration(scenario: dict, root: Path | None = None
                       ) -> tuple[Path, dict] | None:
    """The newest complete calibration of ``scenario`` (a ``Scenario.to_dict()``; its rate
    factor, path and seed aside) recorded on this machine under ``root`` (default: the
    runs' directory): its directory and summary."""
    root = paths.current().runs if root is None else root
    want, newest = _as_calibrated(scenario), None
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        if d.name.startswith(".") or not (d / "summary.json").is_file():
            continue  # an interrupted calibration, or not a run
        try:
            doc = inputs.read_json(d / "manifest.json")
            if manifest_mod.kind_of(doc) != "calibration":
                continue
            manifest = CalibrationManifest.from_json(doc)
        except (OSError, ValueError):  # not readable, or not a manifest labkit wrote
            continue
        if (manifest.provenance.host == socket.gethostname()
                and _as_calibrated(manifest.scenario) == want
                and (newest is None or manifest.start_time >= newest[0])):
            newest = (manifest.start_time, d)
    return newest and (newest[1], inputs.read_json(newest[1] / "summary.json"))


def _as_calibrated(scenario: dict) -> str:
    """A scenario as a calibration compares it: what it emulates, whatever rate factor it
    says, wherever its file is, whatever its seed (the machine's capacity does not depend
    on them)."""
    doc = {k: v for k, v in scenario.items() if k not in ("sha256", "path", "seed",
                                                         "description")}
    doc["emulation"] = {**(doc.get("emulation") or {}), "rate_factor": 1.0}
    return json.dumps(doc, sort_keys=True)


__getattr__ = moved.forward(__name__, {
    "MODELS_DIR": ("labkit.model.paths.current().models", lambda: paths.current().models)})
