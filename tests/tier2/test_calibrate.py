"""`labkit calibrate` for real on a tiny fabric, then a run that says
`emulation.rate_factor: auto` runs at the rates the calibration found and says so."""

from dataclasses import replace

import pytest

from labkit.analysis import calibration
from labkit.model import paths, scenario
from labkit.runs import rundir, runner
from tests.leaks import assert_no_leaks

DOC = {"name": "calibrate-test", "scale_factor": 4000,
       "defaults": {"link": {"rate_mbps": 100, "mtu": 9000, "buffer_kb": 512}},
       "fabric": {"routers": ["r1"], "hosts": {"gpu": {"r1": ["g1", "g2"]}},
                  "links": [], "bottlenecks": [["r1", "g1"]]},
       "traffic": [{"kind": "allreduce", "ranks": "gpu", "size_bytes": "256KiB",
                    "iterations": 200}],
       "policies": ["isolated"]}


@pytest.fixture
def runs_here(tmp_path):
    """The runs recorded in the test's directory, the rest where it is."""
    with paths.use(replace(paths.current(), runs=tmp_path / "runs")):
        yield


def test_calibrate_then_run_at_the_rate_it_found(fabric_ready, tmp_path, runs_here):
    sc = scenario.parse(DOC)
    found = runner.calibrate(sc, seconds=2)
    assert found.best is not None, found.to_dict()
    assert all(t.held == (t.factor <= found.best.factor) for t in found.trials)

    auto = replace(sc, emulation=replace(sc.emulation, rate_factor="auto"))
    done = runner.run(auto, duration=2)
    rates = done.manifest.rates
    assert rates.factor == found.best.factor
    assert rates.calibration.startswith(str(tmp_path / "runs"))
    assert "calibrate-" in rates.calibration
    assert done.summary.scale_factor == 4000 / found.best.factor
    bottleneck = done.summary.policies["isolated"].bottleneck.rate_mbps
    assert bottleneck == 100 * found.best.factor == calibration.bottleneck_rate(
        calibration.scaled(sc, found.best.factor))
    assert_no_leaks()


def test_no_run_takes_the_machine_between_trials(fabric_ready, tmp_path):
    """A calibration holds the run lock from its first trial to its last: runs started
    meanwhile are refused, none of its trials is lost, and its record is complete."""
    import os
    import subprocess
    import sys
    import time

    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(DOC))
    env = {**os.environ, "LABKIT_RUNS_DIR": str(tmp_path / "runs")}
    labkit = [sys.executable, "-m", "labkit.ui.cli"]
    cal = subprocess.Popen([*labkit, "calibrate", str(path), "--seconds", "1", "--out",
                            str(tmp_path / "cal")], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    from labkit.kernel.registry import RunLock

    while cal.poll() is None and not ((h := RunLock.holder()) and h.pid == cal.pid):
        time.sleep(0.05)  # until the calibration holds the machine
    refused = 0
    while cal.poll() is None:
        other = subprocess.run([*labkit, "run", str(path), "--duration", "1", "--out",
                                str(tmp_path / f"other{refused}")], env=env,
                               capture_output=True, text=True)
        if cal.poll() is not None and other.returncode == 0:
            break  # it started after the calibration ended
        assert other.returncode == 1 and "is in progress" in other.stderr, other.stderr
        assert not (tmp_path / f"other{refused}").exists()
        refused += 1
    out, err = cal.communicate()
    assert cal.returncode == 0, out + err
    assert refused >= 2
    record = rundir.read_documents(tmp_path / "cal", ("manifest.json",))["manifest.json"]
    assert record["status"] == "complete"
    assert_no_leaks()
