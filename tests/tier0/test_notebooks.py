"""The sample runs the notebooks read, and the notebooks as stored (they run headless in
test_binder)."""

from pathlib import Path

import nbformat
import pytest

from labkit.runs import rundir

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_sample_runs_load():
    run = rundir.load_run(REPO / "data/sample/bottleneck")
    assert run.manifest.status == "complete"
    assert set(run.summary.policies) == {"isolated", "fifo", "priority"}
    for name in ("checkpoint-burst", "checkpoint-burst-dcqcn", "tensor-parallel",
                 "pipeline-parallel", "data-parallel", "expert-parallel", "lossless/lossy",
                 "lossless/lossless", "pytorch-ddp", "fidelity/x1", "fidelity/x8",
                 "checkpoint-burst-dctcp", "dctcp-paper/dctcp", "dctcp-paper/reno"):
        assert rundir.load_run(REPO / "data/sample" / name).manifest.status == "complete"
    assert len(list((REPO / "data/sample/sweeps").glob("*/sweep.json"))) == 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_finds_its_data_wherever_it_is_copied(path):
    """labkit.sample() and labkit.scenario_file(), not paths from the notebook's folder."""
    text = path.with_suffix(".py").read_text()
    assert '"..")' not in text and "Path(" not in text, "use labkit.sample(name)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    """(Each runs headless, with no error or warning, in test_binder: in the environment
    Binder builds, as a user without root.)"""
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "outputs are stripped in git"
