"""A real browser (the system's headless Chromium, driven by Playwright): one Voilà server
renders every notebook on localhost, one control of each notebook's explorer moves and that
explorer's plot changes; on the pages ``labkit figures`` writes, the plots draw with the
network blocked."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port, require

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")

# An explorer panel (by its box's CSS class) as the browser holds it: its plot's title and
# each trace's name and number of points (plotly.js keeps them on the plot's div); "" while
# the plot is not drawn or has no traces.
SNAPSHOT = """css => {
    const gd = document.querySelector(`.lk-explorer .${css} .js-plotly-plot`);
    return gd && gd.data && gd.data.length ? JSON.stringify({
        title: ((gd.layout || {}).title || {}).text || "",
        traces: gd.data.map(t => [t.name, t.x ? t.x.length : 0])}) : "";
}"""


def _names(panel: dict) -> list[str]:
    return [name for name, _ in panel["traces"]]


def _control(page, label: str):
    """The explorer's control labelled ``label``."""
    return (page.locator(".lk-explorer .widget-inline-hbox")
            .filter(has=page.locator("label", has_text=label)))


class Pick:
    """Pick ``options`` in the list or drop-down labelled ``label``."""

    def __init__(self, label: str, options: list[str]):
        self.label, self.options = label, options

    def move(self, page) -> None:
        _control(page, self.label).locator("select").select_option(self.options)

    def shown(self, page) -> str:
        return json.dumps(_control(page, self.label).locator("select").evaluate(
            "s => [...s.selectedOptions].map(o => o.text)"))


class Press:
    """Press ``keys`` on a slider's ``handle`` (lower or upper), as a keyboard user would."""

    def __init__(self, label: str, handle: str, *keys: str):
        self.label, self.handle, self.keys = label, handle, keys

    def move(self, page) -> None:
        knob = _control(page, self.label).locator(f".noUi-handle-{self.handle}")
        knob.focus()
        for key in self.keys:
            knob.press(key)

    def shown(self, page) -> str:
        return _control(page, self.label).locator(".widget-readout").inner_text()


# notebook, how to move one control of its explorer, the panel (its box's CSS class) that
# must change, and what it must show then (given what it showed before)
MOVES = [
    ("01-bottleneck", Pick("ports", ["leaf1-eth4"]), "lk-queue",
     lambda now, was: "Queue at leaf1-eth4" in now["title"]),
    ("02-priority-queuing", Pick("lanes", ["vip"]), "lk-sojourn",
     lambda now, was: all(n.endswith(" · vip") for n in _names(now))),
    ("03-adaptive-congestion-control", Press("window", "lower", "PageUp", "PageUp"),
     "lk-queue",  # the window's second half: about half the samples of each policy
     lambda now, was: _names(now) == _names(was) and all(
         0 < n < 0.6 * m for (_, n), (_, m) in zip(now["traces"], was["traces"], strict=True))),
    ("04-parallelism", Pick("run", ["pipeline parallel"]), "lk-queue",
     lambda now, was: "pipeline-parallel" in now["title"]),
    ("05-fabric-stack", Pick("sweeps", ["ring", "ring-lossy"]), "lk-sweeps",
     lambda now, was: _names(now) == ["ring", "ring-lossy"]),
    ("06-sharing-the-fabric", Pick("policies", ["fair", "interleave"]), "lk-job-cdfs",
     lambda now, was: sorted(set(_names(now))) == ["fair", "interleave"]),
]


RUNNING_AT = re.compile(r"Voil. is running at:\s*http://127\.0\.0\.1:(\d+)/")


@pytest.fixture(scope="module")
def voila(tmp_path_factory):
    """One Voilà server over notebooks/ (each page gets its own kernel): the URL notebooks
    render under, and the server's log."""
    require(CHROMIUM is not None, "needs the system Chromium (make setup)")
    port = free_port()
    log_path = tmp_path_factory.mktemp("voila") / "voila.log"
    log = open(log_path, "w")
    renderer = "tests.tier0.voila_images.LinkImagesOutsideRoot"  # the static figures' images
    server = subprocess.Popen(
        [sys.executable, "-m", "voila", "--no-browser", f"--port={port}",
         "--Voila.ip=127.0.0.1", f"--VoilaExporter.markdown_renderer_class={renderer}"],
        cwd=REPO / "notebooks", stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    try:
        # the port it says it listens on: another process (the other test worker's kernels)
        # may have taken the free one first, and Voilà moves on to the next
        deadline = time.monotonic() + 60
        while not (found := RUNNING_AT.search(log_path.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.3)
        yield f"http://127.0.0.1:{found[1]}/voila/render/", log_path
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the kernels it started
        server.wait(timeout=20)
        log.close()


@pytest.fixture(scope="module")
def browser():
    """Headless system Chromium, one for the whole module."""
    from playwright.sync_api import sync_playwright

    require(CHROMIUM is not None, "needs the system Chromium (make setup)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def _until(page, panel: str, ok, seconds: float) -> dict | None:
    """The panel as soon as ``ok`` holds for it (a redraw passes through partial states:
    traces replaced, then the title), or None after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = page.evaluate(SNAPSHOT, panel)
        if now and ok(json.loads(now)):
            return json.loads(now)
        page.wait_for_timeout(200)
    return None


@pytest.mark.parametrize(("notebook", "move", "panel", "shows"), MOVES,
                         ids=[m[0] for m in MOVES])
def test_moving_a_control_changes_the_plot(voila, browser, notebook, move, panel, shows):
    url, log = voila
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        page.goto(f"{url}{notebook}.ipynb", timeout=60_000)
        before = _until(page, panel, lambda p: True, 90)
        assert before, (f"the explorer's plot was not drawn\nthe browser's errors: {errors}"
                        f"\n{_log_tail(log)}")
        unmoved = move.shown(page)
        after = None
        for _ in range(3):  # a control redrawn as the page settled forgets a move: again
            move.move(page)
            after = _until(page, panel, lambda p: p != before and shows(p, before), 30)
            if after or move.shown(page) != unmoved:
                break
        after = after or _until(page, panel, lambda p: p != before and shows(p, before), 60)
        assert after, (f"the control shows {move.shown(page)} (before the move "
                       f"{unmoved}), the plot still {page.evaluate(SNAPSHOT, panel)}"
                       f"\nthe browser's errors: {errors}\n{_log_tail(log)}")
    finally:
        page.close()  # its kernel stays until the server stops


def _log_tail(log: Path) -> str:
    """The server's log without the lines every kernel start writes."""
    routine = ("Kernel started", "Kernel is running over TCP", "Adapting from protocol",
               "Connecting to kernel", "Starting buffering", "is not trusted")
    lines = [line for line in log.read_text().splitlines()
             if not any(r in line for r in routine)]
    return "\n".join(lines[-40:])


def test_figure_pages_draw_their_plots_without_the_network(tmp_path, browser):
    """The pages ``labkit figures`` writes load plotly.js from beside them: with every
    request that is not a local file aborted, each page still draws its traces."""
    from labkit.runs import rundir
    from labkit.ui import figures

    run = rundir.load_run(REPO / "data/sample/bottleneck")
    pages = figures.write(run, tmp_path, images=False)
    assert {p.stem for p in pages} >= {"funnel", "three-stages"}
    blocked: list[str] = []

    def only_files(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context = browser.new_context()
    try:
        context.route("**/*", only_files)
        page = context.new_page()
        for html in pages:
            page.goto(html.as_uri(), timeout=30_000)
            page.wait_for_selector(f"#{html.stem}.js-plotly-plot .main-svg", timeout=30_000)
            traces = page.locator(f"#{html.stem} .main-svg .trace").count()
            assert traces > 0, f"{html.name}: no trace drawn"
            if html.stem == "funnel":
                assert page.locator("#funnel .sankey-node").count() > 0
    finally:
        context.close()
    assert blocked == [], f"the pages asked the network for {blocked}"
