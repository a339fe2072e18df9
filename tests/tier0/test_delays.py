"""A link's propagation delay in a scenario (issue 49): the keys, their limits, jitter within
the delay, and what `labkit inspect` says the delay stands for; no root needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.model import scenario
from labkit.model.topo import Topology

BASE = {
    "name": "delays", "scale_factor": 4000,
    "defaults": {"link": {"rate_mbps": 100, "mtu": 1500, "buffer_kb": 256}},
    "fabric": {"routers": ["r1", "r2"], "hosts": {"gpu": {"r1": ["g1"], "r2": ["g2"]}},
               "links": [{"between": ["r1", "r2"], "delay_ms": 8, "jitter_ms": 1}],
               "bottlenecks": [["r1", "r2"]]},
    "traffic": [{"kind": "allreduce", "ranks": ["g1", "g2"], "size_bytes": 1024,
                 "iterations": 1}],
}


def test_a_links_delay_reaches_its_ports_and_defaults_to_none():
    topo = Topology(scenario.parse(BASE, "t.yaml").fabric)
    delays = {(a.node, b.node): (a.link.delay_ms, a.link.jitter_ms) for a, b in topo.links}
    assert delays[("r1", "r2")] == (8.0, 1.0)
    assert delays[("r1", "g1")] == (0.0, 0.0)


def test_defaults_give_every_link_a_delay():
    doc = {**BASE, "defaults": {"link": {**BASE["defaults"]["link"], "delay_ms": 0.5}}}
    topo = Topology(scenario.parse(doc, "t.yaml").fabric)
    assert {a.link.delay_ms for a, _ in topo.links} == {0.5, 8.0}


@pytest.mark.parametrize("props, key, words", [
    ({"delay_ms": 101}, "fabric.links[0].delay_ms", "between 0 and 100"),
    ({"delay_ms": -1}, "fabric.links[0].delay_ms", "between 0 and 100"),
    ({"delay_ms": 2, "jitter_ms": 3}, "fabric.links[0].jitter_ms", "more than the link's"),
    ({"jitter_ms": 1}, "fabric.links[0].jitter_ms", "delay_ms (0)"),
])
def test_a_bad_delay_is_refused_with_its_key(props, key, words):
    doc = {**BASE, "fabric": {**BASE["fabric"],
                              "links": [{"between": ["r1", "r2"], **props}]}}
    with pytest.raises(scenario.ScenarioError) as err:
        scenario.parse(doc, "t.yaml")
    assert key in str(err.value) and words in str(err.value)


def test_inspect_says_what_the_delay_stands_for(tmp_path):
    import yaml

    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(BASE))
    out = subprocess.run([sys.executable, "-m", "labkit.ui.cli", "inspect", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "8 ± 1 ms" in out
    assert "8 ms: 2 µs" in out  # 8 emulated ms at 4000 real Mbit/s per emulated one


def row(hop: str, p50_ns: int, dropped: int = 0, realtime: bool = True):
    from labkit.model.summary_meta import LinkDelayRow

    return LinkDelayRow(link="r1-r2", hop=hop, delay_ns=1_000_000, jitter_ns=0, frames=5000,
                        dropped=dropped, late_p50_ns=p50_ns, late_p99_ns=3 * abs(p50_ns),
                        late_max_ns=90_000, realtime=realtime)


def test_a_delay_line_off_its_deadlines_or_dropping_is_flagged_with_a_note():
    from labkit.analysis.sections import link_delays
    from labkit.model.summary import LinkDelay

    kept, notes = link_delays((row("r1->r2", 90_000), row("r2->r1", -150_000)))
    assert not kept["r1->r2"].flagged and kept["r1->r2"].late_p50_us == 90.0  # 9 % of 1 ms
    assert kept["r2->r1"].flagged  # 150 us early: 15 %
    assert notes == ["r2->r1's delay line sent -150 us off its deadlines at the median, "
                     "more than 10% of its 1 ms delay"]
    dropped, notes = link_delays((row("r1->r2", 0, dropped=3, realtime=False),))
    assert dropped["r1->r2"].flagged
    assert any("dropped 3 frame(s)" in n for n in notes)
    assert any("without SCHED_FIFO" in n for n in notes)
    d = kept["r1->r2"]
    assert LinkDelay.from_json(d.to_json()) == d


def test_events_are_planned_lazily_in_time_order():
    import heapq
    import itertools

    from labkit.model.scenario_spec import EventSpec
    from labkit.runs.features.events import occurrences

    flap = EventSpec(1.0, "a-b", "down", 100.0, 0.004, 0.01)  # for ever, every 10 ms
    once = EventSpec(1.005, "c-d", "rate_mbps", 50.0, 1.0)
    plan = list(itertools.islice(heapq.merge(occurrences(0, flap), occurrences(1, once)), 6))
    assert [(round(t, 3), i, s) for t, i, s in plan] == [
        (1.0, 0, "start"), (1.004, 0, "end"), (1.005, 1, "start"), (1.01, 0, "start"),
        (1.014, 0, "end"), (1.02, 0, "start")]
    doc = {**BASE, "events": [{"at_s": 1, "link": ["r1", "r2"], "down": True,
                               "for_s": 0.001, "every_s": 0.001}]}
    with pytest.raises(scenario.ScenarioError, match=r"events\[0\]\.every_s"):
        scenario.parse(doc, "t.yaml")


def test_a_straggler_is_a_host_of_labkits_that_computes_longer():
    doc = {**BASE, "events": [{"at_s": 1, "host": "g2", "slow": 2, "for_s": 3}]}
    (event,) = scenario.parse(doc, "t.yaml").events
    assert (event.host, event.change, event.value, event.target) == ("g2", "slow", 2.0, "g2")
    recorded = scenario.parse(doc, "t.yaml").to_dict()["events"]
    assert recorded[0]["host"] == "g2"
    link = {**BASE, "events": [{"at_s": 1, "link": ["r1", "r2"], "down": True}]}
    assert "host" not in scenario.parse(link, "t.yaml").to_dict()["events"][0]


@pytest.mark.parametrize("event, key, words", [
    ({"host": "g2", "slow": 0.5}, "events[0].slow", "between 1 and 100"),
    ({"host": "g2", "down": True}, "events[0]", "a dead NIC is its link's"),
    ({"host": "g2"}, "events[0]", "slow: <factor>"),
    ({"link": ["r1", "r2"], "slow": 2}, "events[0]", "must say one change"),
    ({"link": ["r1", "r2"], "host": "g2", "slow": 2}, "events[0]", "one of the two"),
    ({"slow": 2}, "events[0]", "one of the two"),
    ({"host": "r1", "slow": 2}, "events[0].host", "runs no job's rank"),
])
def test_a_bad_straggler_is_one_line_naming_its_key(event, key, words):
    doc = {**BASE, "events": [{"at_s": 1, **event}]}
    with pytest.raises(scenario.ScenarioError) as info:
        scenario.parse(doc, "t.yaml")
    assert info.value.key == key and words in info.value.reason, info.value


def test_the_cpu_quota_is_found_where_the_machine_mounts_it():
    from labkit.kernel import cpuquota

    hybrid = ("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
              "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n")
    assert str(cpuquota.v1_cpu_root(hybrid)) == "/sys/fs/cgroup/cpu"
    both = "40 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    assert str(cpuquota.v1_cpu_root(both)) == "/sys/fs/cgroup/cpu,cpuacct"
    pure = "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert cpuquota.v1_cpu_root(pure) is None


def test_an_event_that_cannot_be_applied_fails_the_run_naming_it():
    import threading

    from labkit.model.scenario_spec import EventSpec
    from labkit.runs.features.events import Events

    events = Events()
    events.events = (EventSpec(0.0, "", "slow", 2.0, host="g2"),)
    events.rows, events._stop = [], threading.Event()

    def refuse(event, starting):
        raise OSError("no cpu controller here")

    events._apply = refuse
    events.start()
    events._thread.join(timeout=5)
    with pytest.raises(RuntimeError, match=r"events\[0\] could not be applied.*no cpu"):
        events.stop()
    events.stop()  # said once
