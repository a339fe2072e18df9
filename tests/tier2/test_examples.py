"""The extension examples in docs/examples/ run on a real fabric."""

import json
from pathlib import Path

import polars as pl
import yaml

import labkit
from tests.leaks import assert_no_leaks

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs/examples"


def test_the_example_controller_holds_storage_while_the_bottleneck_queues(fabric_ready,
                                                                          tmp_path):
    run = labkit.run(REPO / "topologies/checkpoint-burst.yaml", ["calm"], duration=4,
                     controllers={"calm": f"{EXAMPLES / 'controller.py'}:Calm"},
                     out=tmp_path / "run")
    decisions = run["controller"].filter(pl.col("policy") == "calm")
    held = decisions.filter(pl.col("reason").str.starts_with("backlog"))
    opened = decisions.filter(pl.col("reason").str.starts_with("no backlog"))
    assert held.height > 0 and opened.height > 0  # it closed and opened the valves
    assert (held["new_mbps"] < held["old_mbps"]).all()
    manifest = json.loads((run.path / "manifest.json").read_text())
    recorded = manifest["controllers"]["calm"]
    source = (run.path / recorded["source"]).read_text()
    assert source == (EXAMPLES / "controller.py").read_text() and recorded["sha256"]
    assert run.summary.policies["calm"].controller.decisions == decisions.height
    assert_no_leaks()


def lanes_at_bottleneck(run: labkit.Run) -> dict[str, int]:
    """Packets offered per lane to the watched ports (both ends of the bottleneck link),
    over the whole run."""
    last = (run["lanes"].group_by("port", "lane").agg(pl.col("offered_packets").max())
            .group_by("lane").agg(pl.col("offered_packets").sum()))
    return dict(zip(last["lane"], last["offered_packets"], strict=True))


def test_the_example_classifier_sorts_small_storage_packets_into_normal(fabric_ready,
                                                                        tmp_path):
    doc = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
    rules = {"vip": [{"roce": True}], "low": [{"tcp_port": 4420}]}
    doc["lanes"] = rules
    (tmp_path / "builtin.yaml").write_text(yaml.safe_dump(doc))
    doc["lanes"] = {"program": str(EXAMPLES / "classifier.bpf.c"), **rules}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(doc))
    builtin = labkit.run(tmp_path / "builtin.yaml", ["priority"], duration=3,
                         out=tmp_path / "builtin")
    mine = labkit.run(tmp_path / "mine.yaml", ["priority"], duration=3, out=tmp_path / "mine")
    before, after = lanes_at_bottleneck(builtin), lanes_at_bottleneck(mine)
    # the rules alone: storage is all low, normal has only the few packets no rule matches
    assert before.get("normal", 0) < 50
    # the example: storage's ACKs and capsules (~1 in 5 of its packets) leave the low lane
    assert after["normal"] > 10 * max(before.get("normal", 0), 10)
    assert after["low"] > 1000 and after["vip"] > 1000
    manifest = json.loads((mine.path / "manifest.json").read_text())
    assert manifest["classifier"]["object"] == "programs/classifier.bpf.o"
    assert (mine.path / "programs/classifier.bpf.c").read_text() == \
        (EXAMPLES / "classifier.bpf.c").read_text()
    assert_no_leaks()


def test_the_example_traffic_kind_runs_its_senders_and_leaves_nothing(fabric_ready, tmp_path):
    doc = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
    doc["kinds"] = {"incast": str(EXAMPLES / "traffic.py") + ":Incast"}
    doc["traffic"] = [doc["traffic"][0],  # the ring, and the incast as competing traffic
                      {"kind": "incast", "to": "g1", "senders": ["st1", "g5"],
                       "bytes": "1MiB", "every_ms": 200}]
    (tmp_path / "incast.yaml").write_text(yaml.safe_dump(doc))
    run = labkit.run(tmp_path / "incast.yaml", ["fifo"], duration=4, out=tmp_path / "run")
    rows = {(c.name, c.role) for c in run.summary.policies["fifo"].commands}
    assert rows == {(f"incast-{h}", r) for h in ("st1", "g5") for r in ("run", "serve")}
    client = (run.path / "agents/fifo/commands/incast-st1.serve.out").read_text()
    assert client.count("Accepted connection") >= 3  # transfer after transfer
    assert lanes_at_bottleneck(run)["normal"] > 1000  # iperf3's port rides normal
    assert json.loads((run.path / "manifest.json").read_text())["kinds"]["incast"]["sha256"]
    assert (run.path / "kinds/incast.py").read_text() == (EXAMPLES / "traffic.py").read_text()
    assert_no_leaks()  # the shell loops' iperf3 children were stopped too
