"""Tier 0's files in the order ``make test`` hands them to its two processes: the slowest
first (pytest-xdist's ``--dist loadfile --no-loadscope-reorder`` gives each process the next
file as it runs low), so that no long file starts last and runs on alone at the end.
The others keep their order after them."""

from pathlib import Path

# the slowest files, slowest first: seconds each took in a recent tier 0 run on 2 cores
# (pytest --durations=0, summed per file); a file not named here goes after them
SLOWEST = {
    "test_binder.py": 95,  # builds Binder's environment, then runs the notebooks in it
    "test_browser.py": 82,  # Voilà and Chromium, a notebook a test
    "test_handouts.py": 49,  # grades every lab for four students
    "test_figures.py": 30,
    "test_input_fuzz.py": 18,
    "test_bad_input_property.py": 15,
    "test_figure_canvas.py": 7,
    "test_summary.py": 6,
    "test_scenario_doc.py": 5,
    "test_programs.py": 4,
}
TIER0 = Path(__file__).parent


def pytest_collection_modifyitems(items):
    """Tier 0's items sorted by how slow their file is, in the places tier 0's items held
    (tier 1 and 2 stay where they were); a file's own tests keep their order."""
    places = [i for i, item in enumerate(items) if Path(str(item.fspath)).parent == TIER0]
    ours = sorted((items[i] for i in places),
                  key=lambda item: -SLOWEST.get(Path(str(item.fspath)).name, 0))
    for i, item in zip(places, ours, strict=True):
        items[i] = item
