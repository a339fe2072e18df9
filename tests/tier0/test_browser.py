"""A real browser (the system's headless Chromium, driven by Playwright): on a served
notebook, Voilà renders 02-priority-queuing on localhost, a widget moves and the plot
changes; on the pages ``labkit figures`` writes, the plots draw with the network blocked."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served_notebook(tmp_path):
    require(CHROMIUM is not None, "needs the system Chromium (make setup)")
    port = _free_port()
    log = open(tmp_path / "voila.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "voila", "02-priority-queuing.ipynb", "--no-browser",
         f"--port={port}", "--Voila.ip=127.0.0.1"],
        cwd=REPO / "notebooks", stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "voila.log").read_text()
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the kernels it started
        server.wait(timeout=20)
        log.close()


def test_moving_a_widget_changes_the_plot(served_notebook):
    from playwright.sync_api import sync_playwright

    def legend(page) -> list[str]:  # the explorer's figure: its traces are "policy · lane"
        names = page.locator(".js-plotly-plot .legendtext").evaluate_all(
            "nodes => nodes.map(n => n.textContent)")
        return [n for n in names if " · " in n]

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(served_notebook, timeout=60_000)
            page.wait_for_selector(".js-plotly-plot .legendtext >> text=fifo · low",
                                   timeout=90_000)
            before = legend(page)
            assert "fifo · low" in before and "fifo · vip" in before
            page.locator("select[multiple]").nth(1).select_option(["vip"])  # lanes: vip only
            page.wait_for_function(  # redrawn: entries again, none of them low
                "() => { const names = Array.from(document.querySelectorAll("
                "'.js-plotly-plot .legendtext')).map(n => n.textContent)"
                ".filter(n => n.includes(' · '));"
                " return names.length > 0 && !names.some(n => n.endsWith(' · low')); }",
                timeout=30_000)
            after = legend(page)
            assert after and all(name.endswith("vip") for name in after) and after != before
        finally:
            browser.close()


def test_figure_pages_draw_their_plots_without_the_network(tmp_path):
    """The pages ``labkit figures`` writes load plotly.js from beside them: with every
    request that is not a local file aborted, each page still draws its traces."""
    from playwright.sync_api import sync_playwright

    from labkit import figures, rundir

    require(CHROMIUM is not None, "needs the system Chromium (make setup)")
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

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context()
            context.route("**/*", only_files)
            page = context.new_page()
            for html in pages:
                page.goto(html.as_uri(), timeout=30_000)
                page.wait_for_selector(f"#{html.stem}.js-plotly-plot .main-svg",
                                       timeout=30_000)
                traces = page.locator(f"#{html.stem} .main-svg .trace").count()
                assert traces > 0, f"{html.name}: no trace drawn"
                if html.stem == "funnel":
                    assert page.locator("#funnel .sankey-node").count() > 0
        finally:
            browser.close()
    assert blocked == [], f"the pages asked the network for {blocked}"
