"""Module paths from before the layer folders (issue 29) work for one release: each imports
as the very module at its new path, with a DeprecationWarning naming that path; the API
(``import labkit``) needs none of them."""

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import labkit
from labkit import _MOVED

REPO = Path(__file__).resolve().parents[2]


def _warns(old: str, new: str):
    return pytest.warns(DeprecationWarning, match=re.escape(f"{old} is now {new};"))


@pytest.mark.parametrize("old", sorted(_MOVED))
def test_an_old_module_path_is_the_new_module_with_a_warning(old):
    new = _MOVED[old]
    sys.modules.pop(old, None)  # imported before, by another test: import it afresh
    with _warns(old, new) as record:
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new and module.__spec__.name == new
    (ours,) = [w for w in record if str(w.message).startswith(f"{old} is now")]
    assert ours.filename == __file__  # the warning points at the line that imported it


def test_a_moved_packages_modules_moved_with_it():
    sys.modules.pop("labkit.labs.verdict", None)
    with _warns("labkit.labs.verdict", "labkit.ui.labs.verdict"):
        from labkit.labs.verdict import Verdict
    from labkit.ui.labs.verdict import Verdict as new
    assert Verdict is new


def test_the_names_the_docs_used_are_the_same_objects():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="labkit")
        from labkit.control import Controller  # not moved: no warning
    from labkit.control.base import Controller as base
    from labkit.model.extend import TrafficKind as kind
    from labkit.runs.rundir import load_run

    assert Controller is base
    sys.modules.pop("labkit.extend", None)
    with _warns("labkit.extend", "labkit.model.extend"):
        from labkit.extend import TrafficKind
    assert TrafficKind is kind
    vars(importlib.import_module("labkit.analysis")).pop("summary_frame", None)  # warned
    from labkit.analysis.frames import summary_frame as frames_summary_frame
    with _warns("labkit.analysis.summary_frame", "labkit.analysis.frames.summary_frame"):
        from labkit.analysis import summary_frame
    with _warns("labkit.analysis.metrics.summary_frame", "labkit.analysis.frames.summary_frame"):
        from labkit.analysis.metrics import summary_frame as metrics_summary_frame
    assert summary_frame is metrics_summary_frame is frames_summary_frame
    sys.modules.pop("labkit.rundir", None)
    vars(labkit).pop("rundir", None)
    with _warns("labkit.rundir", "labkit.runs.rundir"):
        assert labkit.rundir.load_run is load_run  # an attribute, as a submodule was
    with pytest.raises(AttributeError):
        labkit.analysis.no_such_thing  # noqa: B018


def test_python_m_runs_an_old_path():
    proc = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m",
                           "labkit.labs", "--help"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: python -m labkit.ui.labs" in proc.stdout, proc
    assert "labkit.labs is now labkit.ui.labs;" in proc.stderr


def test_the_api_imports_no_old_path():
    code = ("import sys, warnings; warnings.filterwarnings('error', message='labkit'); "
            "import labkit; [getattr(labkit, name) for name in labkit.__all__]; "
            "print(sorted(set(sys.modules) & set(labkit._MOVED)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and proc.stdout == "[]\n", proc
