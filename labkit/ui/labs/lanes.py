"""Lab 2, protect the collective: lane rules (docs/scenarios.md, ``lanes:``) that keep the
ring's packets out of storage's way, checked first on paper (which lane each kind of
packet lands in, as the classifier decides: first matching rule wins, unmatched packets
go to normal) and then on a real run (the ring's slowdown under ``priority``).
"""

from __future__ import annotations

from pathlib import Path

from labkit.model import scenario
from labkit.model.paths import REPO_ROOT
from labkit.model.scenario import ROCEV2_PORT, LaneRule, Scenario, ScenarioError
from labkit.runs.rundir import Run, load_run
from labkit.ui.labs.verdict import Unanswered, Wrong, check, require

SAMPLE_BOTTLENECK = REPO_ROOT / "data" / "sample" / "bottleneck"
SLOWDOWN_BAR = 1.25  # the collective's p99 completion time against it running alone
NVME_TCP_PORT = 4420
CLIENT_PORT = 50123  # an ephemeral port, as a storage client's or a ring sender's
# (what it is, whether it is the collective's, the packet's fields as the classifier sees them)
PACKETS = [
    ("the ring's data (RoCEv2)", True,
     {"proto": "udp", "sport": CLIENT_PORT, "dport": ROCEV2_PORT, "dscp": 0, "roce": True}),
    ("storage data from st1 (NVMe/TCP)", False,
     {"proto": "tcp", "sport": NVME_TCP_PORT, "dport": CLIENT_PORT, "dscp": 0, "roce": False}),
    ("storage commands to st1 (NVMe/TCP)", False,
     {"proto": "tcp", "sport": CLIENT_PORT, "dport": NVME_TCP_PORT, "dscp": 0, "roce": False}),
]


def with_lanes(base: Path, lanes: dict) -> Scenario:
    """The scenario file ``base`` with its ``lanes:`` replaced by ``lanes``, checked as
    the file would be (:class:`~labkit.model.scenario.ScenarioError` names the key)."""
    return scenario.parse(lanes_document(base, lanes), str(base))


def lanes_document(base: Path, lanes: dict) -> dict:
    """The document of the scenario file ``base`` with its ``lanes:`` replaced."""
    _, doc = scenario.read_yaml(base)
    doc["lanes"] = lanes
    return doc


def matches(rule: LaneRule, packet: dict) -> bool:
    """Whether every field the rule sets matches the packet."""
    return ((rule.proto is None or rule.proto == packet["proto"])
            and (not rule.sport or rule.sport == packet["sport"])
            and (not rule.dport or rule.dport == packet["dport"])
            and (not rule.port or rule.port in (packet["sport"], packet["dport"]))
            and (rule.dscp is None or rule.dscp == packet["dscp"])
            and (not rule.roce or packet["roce"]))


def lane_of(rules: tuple[LaneRule, ...], packet: dict) -> str:
    """The lane the classifier gives ``packet``: the first matching rule's, else normal."""
    return next((rule.lane for rule in rules if matches(rule, packet)), "normal")


@check("Where your rules put each packet")
def check_lane_rules(lanes, base: Path) -> str:
    """Pass when the rules are valid, put the collective's packets in vip and keep
    storage's out of it."""
    lanes = require(lanes, "LANES")
    if not isinstance(lanes, dict):
        raise Wrong("LANES must be a dict of lane -> list of rules",
                    'e.g. {"vip": [{"udp_dport": 4791}], "low": [...]}')
    try:
        rules = with_lanes(base, lanes).lanes
    except ScenarioError as exc:
        raise Wrong(f"the scenario refuses these rules: {exc.key}: {exc.reason}",
                    "docs/scenarios.md lists the rule fields (roce, dscp, udp_dport, "
                    "tcp_port, ...)") from None
    placed = [(what, ours, lane_of(rules, packet)) for what, ours, packet in PACKETS]
    said = "; ".join(f"{what} -> {lane}" for what, _, lane in placed)
    lost = [what for what, ours, lane in placed if ours and lane != "vip"]
    if lost:
        raise Wrong(f"{said}. The collective is not in vip: {', '.join(lost)}",
                    "the ring speaks RoCEv2: UDP to port 4791")
    crowded = [what for what, ours, lane in placed if not ours and lane == "vip"]
    if crowded:
        raise Wrong(f"{said}. Storage still shares the vip lane: {', '.join(crowded)}",
                    "rules are tried in order and the first match wins; NVMe/TCP uses TCP "
                    "port 4420, on the server's side of the connection")
    note = ("" if all(lane == "low" for _, ours, lane in placed if not ours) else
            " (some storage rides normal: fine for the ring, and `tcp_port` matches both "
            "directions if you want it all in low)")
    return f"{said}.{note}"


def run_with_lanes(base: Path, lanes, duration: float = 6.0) -> Run | None:
    """``base`` with ``lanes``, run for real under isolated and priority (root); None,
    saying why, when the rules are blank or refused or the run cannot happen."""
    from labkit.ui.labs.verdict import answered, run_lab

    if not answered(lanes):
        print("Not run: LANES is still blank")
        return None
    try:
        sc = with_lanes(base, lanes)
    except (ScenarioError, TypeError, AttributeError) as exc:
        print(f"Not run: the scenario refuses these lanes: {exc}")
        return None
    return run_lab(sc, ["isolated", "priority"], duration=duration,
                   document=lanes_document(base, lanes))


def _run(run) -> Run:
    if run is None:
        raise Unanswered("there is no run yet: run the cell above (it needs root)")
    return run if isinstance(run, Run) else load_run(run)


@check("The collective is protected")
def check_protected(run, policy: str = "priority", bar: float = SLOWDOWN_BAR) -> str:
    """Pass when the collective's p99 slowdown under ``policy`` in ``run`` (a recorded
    :class:`~labkit.Run` or its directory) is at most ``bar``."""
    policies = _run(run).summary.policies
    if policy not in policies:
        raise Wrong(f"this run has no {policy} policy (it has {', '.join(policies)})",
                    f'run it with policies=["isolated", "{policy}"]')
    figures = policies[policy]
    slowdown = figures.workload.slowdown_p99
    if slowdown is None:
        raise Wrong("the run has no isolated policy, so there is no slowdown to judge",
                    f'run it with policies=["isolated", "{policy}"]')
    vip = figures.bottleneck.lanes.vip
    waited = f"its packets waited up to {vip.sojourn_p99_us or 0:.0f} µs (p99)"
    if slowdown <= bar:
        return (f"under {policy} the collective's p99 slowdown is {slowdown:.2f} (<= {bar}); "
                f"{waited} at {figures.bottleneck.port}, and storage still moved "
                f"{figures.storage.goodput_mbps:.0f} Mbit/s.")
    raise Wrong(f"under {policy} the collective's p99 slowdown is {slowdown:.2f} (> {bar}); "
                f"{waited} and {vip.drops} were dropped",
                "its packets still queue behind storage: check where your rules put each "
                "kind of packet (the check above), and that vip holds the ring alone")
