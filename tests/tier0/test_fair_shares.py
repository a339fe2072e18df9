"""Which hosts' storage the controllers hold back, and each one's fair share."""

from pathlib import Path

from labkit.control.session import storage_senders
from labkit.model import scenario, topo

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def _senders(name: str) -> dict[str, float]:
    sc = scenario.load(TOPOLOGIES / name)
    return storage_senders(sc, topo.Topology(sc.fabric))


def test_senders_share_each_contended_port_evenly():
    shares = _senders("checkpoint-burst.yaml")
    # leaf1's four writers share the uplink; the dataset server has the downlink to itself
    assert {h: shares[h] for h in ("g1", "g2", "g3", "g4")} == dict.fromkeys(
        ("g1", "g2", "g3", "g4"), 25.0)
    assert shares["st1"] == 100.0
    # leaf2's writers cross no bottleneck but share their own NIC with their rank
    assert {h: shares[h] for h in ("g5", "g6", "g7", "g8")} == dict.fromkeys(
        ("g5", "g6", "g7", "g8"), 100.0)


def test_a_storage_server_alone_on_the_bottleneck_gets_all_of_it():
    assert _senders("bottleneck.yaml") == {"st1": 100.0}
