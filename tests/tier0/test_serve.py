"""Tier 0: what labkit serve admits and refuses before anything runs (the runs: tier 2)."""

import grp
from pathlib import Path

import pytest
import yaml

from labkit.model.scenario import ScenarioError
from labkit.ui import serve

REPO = Path(__file__).resolve().parents[2]
BOTTLENECK = yaml.safe_load((REPO / "topologies/bottleneck.yaml").read_text())
GROUP = grp.struct_group(("class", "x", 4242, ["ada"]))


def peer(uid: int, groups: list[int]) -> serve.Peer:
    class Known(serve.Peer):
        def groups(self) -> list[int]:
            return groups

    return Known(pid=1, uid=uid, gid=groups[0])


def test_root_and_the_groups_members_are_admitted_and_no_one_else():
    assert serve.admitted(peer(0, [0]), GROUP)
    assert serve.admitted(peer(1000, [1000, 4242]), GROUP)
    assert not serve.admitted(peer(1001, [1001, 27]), GROUP)


def request(**changes) -> dict:
    return {"scenario": BOTTLENECK, "name": "bottleneck.yaml", "policies": ["isolated"],
            "duration": 5, "out": "/home/ada/runs", **changes}


def test_a_request_is_checked_as_the_api_checks_it():
    sc, policies, duration, out = serve.check(request(), peer(1000, [4242]))
    assert sc.name == "bottleneck" and policies == ["isolated"] and duration == 5
    assert out == Path("/home/ada/runs")
    broken = dict(BOTTLENECK, defaults={"link": {"rate_mbps": -1}})
    with pytest.raises(ScenarioError, match="rate_mbps"):
        serve.check(request(scenario=broken), peer(1000, [4242]))
    with pytest.raises(ScenarioError, match="no-such-policy"):
        serve.check(request(policies=["no-such-policy"]), peer(1000, [4242]))


@pytest.mark.parametrize("changes, says", [
    ({"out": "runs"}, "an absolute path"),
    ({"duration": 10**9}, "duration"),
    ({"duration": "long"}, "seconds, a number"),
    ({"policies": "fifo"}, "a list of policy names")])
def test_a_malformed_request_is_refused_with_what_to_change(changes, says):
    with pytest.raises(serve.Refused, match=says):
        serve.check(request(**changes), peer(1000, [4242]))


def test_a_scenario_that_runs_the_requesters_code_is_refused():
    doc = dict(BOTTLENECK, traffic=[*BOTTLENECK["traffic"],
                                    {"kind": "command", "name": "mine", "host": "g1",
                                     "run": "sleep 1"}])
    with pytest.raises(serve.Refused, match="runs commands, which would run as root"):
        serve.check(request(scenario=doc), peer(1000, [4242]))


def test_asking_with_no_service_says_how_to_start_one(tmp_path):
    with pytest.raises(serve.Refused, match="start one as root with `labkit serve`"):
        serve.request(BOTTLENECK, "bottleneck.yaml", out=tmp_path / "runs",
                      path=tmp_path / "none.sock")
