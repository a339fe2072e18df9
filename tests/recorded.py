"""Manifests for tests that record without a fabric, as ``labkit.run``, ``.sweep`` and
``.calibrate`` start them, with a fixed provenance (gathering the real one runs clang,
bpftool and git)."""

from __future__ import annotations

import socket

from labkit.model.manifest import CalibrationManifest, Provenance, RunManifest, SweepManifest

START = "2026-12-03T10:00:00+00:00"
PROVENANCE = Provenance(kernel="6.18.44", labkit_revision="test", bpf_objects={},
                        python="3.11.2", packages={"labkit": "0"}, requirements_lock=None,
                        tools={}, cpus=2, host=socket.gethostname(), hotpath=None)


def run_manifest(run_id: str, **fields) -> RunManifest:
    """A run's manifest under ``run_id``: an empty scenario, seed 1, unless ``fields``
    say otherwise."""
    return RunManifest(**{"run_id": run_id, "scenario": {}, "scenario_sha256": "",
                          "policies": (), "seed": 1, "duration_s": None,
                          "start_time": START, "argv": None, "provenance": PROVENANCE,
                          **fields})


def sweep_manifest(run_id: str, **fields) -> SweepManifest:
    """A sweep's manifest under ``run_id``: All-Reduce, ring, 4 KiB, 5 timed ops per size,
    unless ``fields`` say otherwise."""
    return SweepManifest(**{"run_id": run_id, "scenario": {}, "scenario_sha256": "",
                            "op": "all_reduce", "algo": "ring", "sizes": (4096,),
                            "iters": 5, "start_time": START, "argv": None,
                            "provenance": PROVENANCE, **fields})


def calibration_manifest(run_id: str, **fields) -> CalibrationManifest:
    """A calibration's manifest under ``run_id`` (an empty scenario unless ``fields`` say
    otherwise)."""
    return CalibrationManifest(**{"run_id": run_id, "scenario": {}, "scenario_sha256": "",
                                  "start_time": START, "argv": None,
                                  "provenance": PROVENANCE, **fields})
