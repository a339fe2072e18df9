"""The notebooks' live panel starts a short real run and shows it, in about 20 s."""

import time
from pathlib import Path

import pytest

from labkit.ui import widgets
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]


def test_run_button_runs_a_short_scenario_and_draws_it(fabric_ready, tmp_path):
    panel = widgets.live_panel(REPO / "topologies/bottleneck.yaml", runs_dir=tmp_path)
    (load, size, hosts), (button, _, bar) = panel.children[0].children, panel.children[1].children
    status, figures = panel.children[2], panel.children[3]
    load.value, size.value, hosts.value = 1.0, "1M", 4
    started = time.monotonic()
    button.click()
    while button.disabled and time.monotonic() - started < 90:
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    assert bar.value == 100 and "recorded in" in status.value, status.value
    assert elapsed < 35  # about 20 s on this machine; generous for a noisy one
    assert len(figures.outputs) == 2  # completion-time CDFs and the queue
    (recorded,) = tmp_path.iterdir()
    assert recorded.name.endswith("bottleneck-live") and (recorded / "summary.json").exists()
    assert_no_leaks()


@pytest.mark.untimed
def test_stop_ends_the_run_and_keeps_what_it_recorded(fabric_ready, tmp_path):
    panel = widgets.live_panel(REPO / "topologies/bottleneck.yaml", runs_dir=tmp_path)
    (button, stop, bar), status = panel.children[1].children, panel.children[2]
    button.click()
    started = time.monotonic()
    while bar.description != "isolated running" and time.monotonic() - started < 60:
        time.sleep(0.1)
    assert not stop.disabled
    stop.click()
    while button.disabled and time.monotonic() - started < 60:
        time.sleep(0.1)
    assert time.monotonic() - started < 30
    assert bar.description == "stopped" and "stopped" in status.value, status.value
    (kept,) = tmp_path.iterdir()
    assert kept.name.endswith(".incomplete") and (kept / "manifest.json").exists()
    assert '"interrupted"' in (kept / "manifest.json").read_text()
    assert_no_leaks()
