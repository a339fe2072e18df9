"""A scenario's command entries run the user's own programs in the fabric.

One short `fifo` run of the bottleneck with an unmodified iperf3 (server on g1, client on
st1) beside the ring, a second command that fails at once (nobody listens), and a third
that leaves a process with an empty environment in a session of its own (only the
fabric's cgroup still knows it): the programs start, their output is kept, their packets
are counted at the bottleneck like any other traffic, the failure is reported, and
nothing outlives the run, not even the escapee.
"""

import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

import labkit
from tests.leaks import assert_no_leaks, labkit_objects

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

REPO = Path(__file__).resolve().parents[2]
ESCAPEE = "997.25"  # how long the escapee sleeps: how the test finds it


def escapees() -> list[str]:
    """The escapee's processes still alive."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", ESCAPEE.encode()]:
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def scenario_with_commands(tmp: Path) -> Path:
    doc = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
    doc["traffic"] = [doc["traffic"][0],  # the ring only: iperf3 is the competing traffic
                      {"kind": "command", "name": "bulk", "host": "st1",
                       "run": "iperf3 -c {g1} -t 600 -i 1 --forceflush",
                       "serve": {"host": "g1", "run": "iperf3 -s -i 1 --forceflush"}},
                      {"kind": "command", "name": "refused", "host": "g2",
                       "run": "iperf3 -c {g6} -p 5999 -t 2"},
                      {"kind": "command", "name": "escapee", "host": "g3",
                       "run": f"sh -c 'env -i setsid sleep {ESCAPEE} & exec sleep 600'"}]
    (tmp / "cmd.yaml").write_text(yaml.safe_dump(doc))
    return tmp / "cmd.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("commands")
    path = scenario_with_commands(tmp)
    out = tmp / "run"
    return labkit.run(path, ["fifo"], duration=4, out=out), out


def test_programs_ran_and_their_output_is_kept(fabric_ready, run):
    loaded, out = run
    rows = {(c.name, c.role): c for c in loaded.summary.policies["fifo"].commands}
    assert set(rows) == {("bulk", "run"), ("bulk", "serve"), ("refused", "run"),
                         ("escapee", "run")}
    assert rows["bulk", "run"].stopped_by_labkit and rows["bulk", "serve"].stopped_by_labkit
    assert rows["bulk", "run"].argv[2].startswith("10.")  # {g1} became g1's address
    client = (out / "agents/fifo/commands/bulk.out").read_text()
    server = (out / "agents/fifo/commands/bulk.serve.out").read_text()
    assert "connected to" in client and "bits/sec" in client
    assert "Accepted connection" in server


def test_a_failed_command_is_reported(fabric_ready, run):
    loaded, out = run
    refused = next(c for c in loaded.summary.policies["fifo"].commands if c.name == "refused")
    assert not refused.stopped_by_labkit and refused.exit not in (0, None)
    notes = loaded.summary.policies["fifo"].fidelity.notes
    assert any("command refused (run) on g2 exited" in n for n in notes), notes
    assert (out / "agents/fifo/commands/refused.err").stat().st_size > 0


def test_their_packets_are_counted_at_the_bottleneck(fabric_ready, run):
    loaded, _ = run
    last = loaded["lanes"].sort("t_ns").group_by("port", "lane").last()
    normal = last.filter((pl.col("port") == "spine1-eth0") & (pl.col("lane") == "normal"))
    assert normal["offered_bytes"].item() > 10_000_000  # iperf3 (port 5201) rides normal


def test_nothing_outlives_the_run(fabric_ready, run):
    assert_no_leaks()
    assert not escapees()  # gone with the fabric's cgroup


def test_kill_9_then_clean_stops_the_programs(fabric_ready, tmp_path):
    """A killed run's programs hold their namespaces: `labkit clean` stops them by the
    pids its registry recorded."""
    proc = subprocess.Popen([sys.executable, "-m", "labkit.ui.cli", "run",
                             str(scenario_with_commands(tmp_path)), "--policy", "fifo",
                             "--duration", "20", "--out", str(tmp_path / "run")], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (any("iperf3 -c" in p for p in labkit_objects()["processes"]) and escapees()):
        assert time.monotonic() < deadline and proc.poll() is None, \
            f"iperf3 never started: {proc.poll() is not None and proc.stderr.read()}"
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    assert any("iperf3 -c" in p for p in labkit_objects()["processes"])  # outlived labkit
    assert escapees()  # and so did the escapee, which no pid or marker names
    clean = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    assert "command bulk" in clean.stdout, clean.stdout
    assert "scratch directory" in clean.stdout, clean.stdout  # the run's work directory
    assert_no_leaks()
    assert not escapees()
