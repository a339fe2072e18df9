"""The sample runs the notebooks read, and the notebooks as stored (they run headless in
test_binder)."""

import re
from pathlib import Path

import jupytext
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


# --- what a reader without a kernel sees, and the one kernel every notebook asks for ----

LABS = sorted((REPO / "notebooks/labs").glob("lab*.ipynb"))
STATIC = "static-figure"  # the tag of a markdown cell holding a figure's static copy
IMAGE = re.compile(r"!\[[^\]]+\]\(((?:\.\./)+)docs/figures/([\w.-]+\.svg)\)")
FIGURE_CALL = re.compile(r"^(?:plots\.\w+|widgets\.\w*explorer)\(")  # a cell that shows one
# Figures drawn with no static copy beside them, each with the reason: `labkit figures`
# (what `make samples` draws docs/figures/ with) draws one sample at a time, so a figure of
# several samples, one no figure set has, or one of the student's own run has none.
WITHOUT_COPY = {
    ("02-priority-queuing", "plots.collective_latency(run)"): "not in a run's figure set",
    ("03-adaptive-congestion-control", "plots.dctcp_queue(paper)"): "two samples",
    ("04-parallelism", "plots.parallelism_comparison(runs)"): "two samples",
    ("04-parallelism", "plots.parallelism_comparison({**runs, **more})"): "four samples",
    ("05-fabric-stack", 'plots.sweep_busbw({k: sweeps[k] for k in ("ring", "tree", '
                        '"halving_doubling")}, SCALE)'): "three sweeps",
    ("05-fabric-stack", "plots.sweep_busbw(hd, SCALE)"): "three sweeps",
    ("05-fabric-stack", 'plots.sweep_busbw({k: sweeps[k] for k in ("ring", "ring-lossy")}, '
                        "SCALE)"): "two sweeps",
    ("05-fabric-stack", "plots.victim_io(runs)"): "two samples",
    ("05-fabric-stack", 'plots.sweep_busbw(validation["nvlink"], "nvlink · tuned, then '
                        'measured again at every size")'): "five sweeps",
    ("05-fabric-stack", "widgets.sweep_explorer(sweeps, SCALE)"): "six sweeps",
    ("lab2-protect-the-collective", 'plots.op_time_cdf(run) if run is not None else "no run '
                                    'yet"'): "the student's own run",
    ("lab2-protect-the-collective", 'plots.queue_timeline(run) if run is not None else "no '
                                    'run yet"'): "the student's own run",
    ("lab3-write-a-controller", 'plots.valve_timeline(run, "mine", seconds=3) if run is not '
                                'None else "no run yet"'): "the student's own run",
    ("lab3-write-a-controller", 'plots.op_time_cdf(run) if run is not None else "no run '
                                'yet"'): "the student's own run",
}


def _shown(cell) -> str | None:
    """The figure call a code cell ends with (what it shows), if any."""
    lines = [line for line in cell.source.splitlines() if line.strip()]
    if cell.cell_type != "code" or not lines:
        return None
    last = " ".join(line.strip() for line in lines[next(
        (i for i in range(len(lines) - 1, -1, -1) if not lines[i].startswith(" ")), 0):])
    return last if FIGURE_CALL.match(last) else None


def _drawn_by_make_samples() -> set[str]:
    from labkit.runs import samples

    return {s.figure_file(f).name for s in samples.load() for f in s.figures}


@pytest.mark.parametrize("path", NOTEBOOKS + LABS, ids=lambda p: p.name)
def test_every_notebook_asks_for_the_labkit_kernel(path):
    """The kernel `make lab`, `labkit lab --kernel-only` and Binder's postBuild install,
    and a lab's release names: one name everywhere."""
    from labkit.ui import lab
    from labkit.ui.labs import handout

    for nb in (nbformat.read(path, as_version=4),
               jupytext.read(path.with_suffix(".py"))):
        assert dict(nb.metadata.kernelspec) == handout.KERNELSPEC
        assert nb.metadata.kernelspec.name == lab.KERNEL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_notebook_and_its_script_agree(path):
    """Paired by jupytext: the same cells, sources and tags (the labs': test_labs)."""
    ipynb, script = nbformat.read(path, as_version=4), jupytext.read(path.with_suffix(".py"))
    assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in ipynb.cells] == \
        [(c.cell_type, c.source, c.metadata.get("tags")) for c in script.cells], \
        f"jupytext --sync {path.with_suffix('.py').relative_to(REPO)}"


@pytest.mark.parametrize("path", NOTEBOOKS + LABS, ids=lambda p: p.name)
def test_every_figure_has_a_static_copy_that_make_samples_draws(path):
    """Browsed without a kernel (on GitHub, say) a notebook shows no output: each figure
    drawn from a sample has a markdown cell tagged static-figure right after it, whose
    images are in docs/figures/ and drawn there by `make samples` (samples.yaml names
    them). A figure with no copy is in WITHOUT_COPY, with the reason."""
    cells = nbformat.read(path, as_version=4).cells
    drawn, found = _drawn_by_make_samples(), 0
    for i, cell in enumerate(cells):
        if STATIC in cell.get("metadata", {}).get("tags", []):
            images = IMAGE.findall(cell.source)
            assert cell.cell_type == "markdown" and images, f"cell {i}: no image"
            assert i > 0 and _shown(cells[i - 1]), f"cell {i}: not right after a figure"
            for up, name in images:
                assert (path.parent / up).resolve() == REPO, f"cell {i}: {up} is not the checkout"
                assert (REPO / "docs/figures" / name).is_file(), name
                assert name in drawn, f"{name}: not among the figures samples.yaml names"
            found += 1
        elif (call := _shown(cell)) is not None:
            follows = cells[i + 1] if i + 1 < len(cells) else None
            copied = follows is not None and STATIC in follows.get("metadata", {}).get("tags", [])
            assert copied or (path.stem, call) in WITHOUT_COPY, f"cell {i}: {call} has no copy"
            assert not (copied and (path.stem, call) in WITHOUT_COPY), f"{call}: copied now"
    assert found or path in LABS, "a notebook shows no figure without a kernel"


def test_every_exception_still_draws_its_figure():
    """An entry of WITHOUT_COPY whose cell went is dropped, not kept to excuse another."""
    shown = {(p.stem, call) for p in NOTEBOOKS + LABS
             for cell in nbformat.read(p, as_version=4).cells if (call := _shown(cell))}
    assert set(WITHOUT_COPY) <= shown, set(WITHOUT_COPY) - shown
