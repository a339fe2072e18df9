"""A run's provenance: the Python packages it lists are read once a process, and again
as soon as one is installed or removed (a notebook records many runs)."""

from __future__ import annotations

import time

from labkit.runs.provenance import _packages, python_packages


def test_a_package_installed_between_two_runs_is_listed_by_the_second(tmp_path,
                                                                        monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    first = python_packages()
    assert "lk-fake" not in first
    hits = _packages.cache_info().hits
    assert python_packages() == first  # read once: the second from what the first read
    assert _packages.cache_info().hits == hits + 1
    time.sleep(0.01)  # the folder's modification time moves on
    info = tmp_path / "lk_fake-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lk_fake\nVersion: 1.2\n")
    assert python_packages()["lk-fake"] == "1.2"
