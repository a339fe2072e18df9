"""The lane classifier (``bpf/classifier.bpf.c``) seen from Python.

Owns the translation of a scenario's lane rules into the ``lk_config`` map, and the
classifier's life in a run: one shared object whose program sorts packets on
every router port, plus one object per *watched* port (the bottleneck ports)
that reuses the shared ``lk_config`` but keeps its own per-lane counters.
Rules change at run time by rewriting ``lk_config`` (:meth:`Classifier.configure`);
nothing is recompiled.

Lane -> ``skb->priority``: with the ``lanes`` port layout each lane selects its
HTB class (:data:`labkit.kernel.tc.LANE_CLASS`). With the ``fifo`` layout the value
keeps the lane in its low bits but names no class, so HTB puts every packet in
the one shared queue while the lane stays readable to tracing.
"""

from __future__ import annotations

import ctypes
import socket
from collections.abc import Sequence
from pathlib import Path

from labkit.kernel import bpf, tc
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import CLASSIFIER, ClassifierMaps, ClassifierPrograms
from labkit.model.abi import (
    KEY_BTH,
    KEY_DSCP,
    KEY_L3,
    KEY_PORTS,
    KEY_PROTO,
    KEY_SPORT,
    LANE_COUNTERS,
    LANES,
    MAX_RULES,
    NR_LANES,
    ClassifierConfig,
    LaneCounters,
    Rule,
)
from labkit.model.scenario_spec import LaneRule

PROGRAM = CLASSIFIER.programs.lk_classify.name  # by name: doctor, benchmarks, check_object
FIFO_TAG = 0x20000  # major 2: not a class of the port's HTB (1:), so HTB uses its default


def read_lane_counters(stats: bpf.Map, first: int) -> dict[str, tuple[int, int]]:
    """Sum per-CPU ``lk_lane_counters`` at keys ``first .. first+2`` into (packets, bytes)."""
    out = {}
    for i, lane in enumerate(LANES):
        per_cpu = LANE_COUNTERS.iter_unpack(stats.raw(first + i))  # (packets, bytes)
        packets, nbytes = map(sum, zip(*per_cpu, strict=True))
        out[lane] = (packets, nbytes)
    return out


def lane_priorities(layout: str) -> list[int]:
    """``skb->priority`` for each lane on a port of the given layout."""
    if layout in ("lanes", "weights"):
        return [tc.LANE_CLASS[lane] for lane in LANES]
    return [FIFO_TAG | (tc.LANE_CLASS[lane] & 0xFFFF) for lane in LANES]


def encode_rule(rule: LaneRule) -> Rule:
    """A scenario rule as the (mask, value) pair the classifier compares keys with."""
    mask = value = 0

    def want(field_mask: int, field_value: int) -> None:
        nonlocal mask, value
        mask |= field_mask
        value |= field_value

    if rule.proto:
        proto = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP}[rule.proto]
        want(0xFF << KEY_PROTO, proto << KEY_PROTO)
    if rule.dscp is not None:
        want(0x3F << KEY_DSCP | KEY_L3, rule.dscp << KEY_DSCP | KEY_L3)
    if rule.sport:
        want(0xFFFF << KEY_SPORT | KEY_PORTS, rule.sport << KEY_SPORT | KEY_PORTS)
    if rule.dport or rule.port:  # "port" rides in the dport bits, either_port tries both
        want(0xFFFF | KEY_PORTS, (rule.dport or rule.port) | KEY_PORTS)
    if rule.roce:
        want(KEY_BTH, KEY_BTH)
    return Rule(mask=mask, value=value, lane=LANES.index(rule.lane),
                either_port=int(bool(rule.port)))


def build_config(rules: Sequence[LaneRule], layout: str) -> ClassifierConfig:
    if len(rules) > MAX_RULES:
        raise ValueError(f"at most {MAX_RULES} lane rules fit the classifier")
    cfg = ClassifierConfig(default_lane=LANES.index("normal"), nr_rules=len(rules))
    cfg.lane_priority[:] = lane_priorities(layout)
    for i, rule in enumerate(rules):
        cfg.rules[i] = encode_rule(rule)
    return cfg


# what a classifier object must offer to stand in for bpf/classifier.bpf.c: its program,
# and maps the other programs share (lk_config) or labkit reads (lk_lane_stats)
REQUIRED_MAPS = {  # map: (type, key bytes, value bytes, entries), and where it is defined
    ClassifierMaps.lk_config: ((bpf.MAP_ARRAY, 4, ctypes.sizeof(ClassifierConfig), 1),
                               "lanes.h"),
    ClassifierMaps.lk_lane_stats: ((bpf.MAP_PERCPU_ARRAY, 4, ctypes.sizeof(LaneCounters),
                                    NR_LANES), "classify.h"),
}


def check_object(path: Path) -> None:
    """ValueError unless the object at ``path`` loads and matches the built-in classifier:
    a tc program ``lk_classify`` and the maps of :data:`REQUIRED_MAPS`, alike, their
    key and value types too (:data:`labkit.kernel.skeletons.CLASSIFIER`)."""
    try:
        with bpf.BpfObject(path) as obj:
            if PROGRAM not in obj.programs:
                raise ValueError(f"{path.name} has no program {PROGRAM} (SEC(\"tc\"))")
            for decl, (want, header) in REQUIRED_MAPS.items():
                m = obj.maps.get(decl.name)
                if m is None:
                    raise ValueError(f"{path.name} has no map {decl.name} (include {header}; "
                                     "see docs/examples/classifier.bpf.c)")
                have = (m.type, m.key_size, m.value_size, m.max_entries)
                if have != want:
                    raise ValueError(f"{path.name}: map {decl.name} is (type, key, value, "
                                     f"entries) {have}, labkit's is {want}")
        CLASSIFIER.verify(path)
    except bpf.DeclarationError as exc:
        raise ValueError(str(exc)) from exc
    except bpf.BpfError as exc:
        raise ValueError(f"{path.name} does not load: {exc}") from exc


class Classifier:
    """The classifier loaded for one fabric: attach it, read its counters, close it.
    ``path`` is the object (default: the built-in ``bpf/classifier.bpf.c``)."""

    def __init__(self, rules: Sequence[LaneRule], layout: str,
                 record: bpf.Recorder | None = None, path: Path | None = None):
        self.path = path or CLASSIFIER.path()
        self.record = record
        self.shared = bpf.record_programs(CLASSIFIER.open(self.path), record)
        self.watched: dict[str, bpf.BpfObject[ClassifierMaps, ClassifierPrograms]] = {}
        self.attachments: list[tuple[Netns, bpf.TcAttachment]] = []
        self.configure(rules, layout)

    def configure(self, rules: Sequence[LaneRule], layout: str) -> None:
        self.shared.maps.lk_config.update(0, build_config(rules, layout))

    def watch(self, port: str) -> None:
        """Load the object of a port ("<node>/<ifname>") that counts apart (no interface
        needed: a run loads them while its fabric is built)."""
        obj = CLASSIFIER.open(self.path, reuse=[self.shared.maps.lk_config])
        self.watched[port] = bpf.record_programs(obj, self.record)

    def attach(self, ns: Netns, ifname: str, ifindex: int, watch: bool = False) -> None:
        """Attach to the egress of ``ifname`` in ``ns``; ``watch`` gives it its own counters
        (its object loaded now unless :meth:`watch` did)."""
        port = f"{ns.name}/{ifname}"
        if watch and port not in self.watched:
            self.watch(port)
        obj = self.watched[port] if watch else self.shared
        bpf.attach_filter(ns, obj.programs.lk_classify, ifname, ifindex, tc.PRIO_CLASSIFIER,
                          self.attachments, self.record)

    def counters(self, port: str | None = None) -> dict[str, tuple[int, int]]:
        """(packets, bytes) per lane offered to a watched port ("<node>/<ifname>"), or to
        all the ports sharing the main object."""
        obj = self.watched[port] if port else self.shared
        return read_lane_counters(obj.maps.lk_lane_stats, 0)

    def pin(self, directory: Path) -> None:
        """Pin the program and maps so bpftool and other processes can reach them."""
        self.shared.programs.lk_classify.pin(directory / "classifier")
        self.shared.maps.lk_config.pin(directory / "lk_config")
        for port, obj in self.watched.items():
            obj.maps.lk_lane_stats.pin(directory / f"lk_lane_stats_{port.split('/')[1]}")

    def close(self) -> None:
        """Detach every filter (namespaces still alive) and release the objects."""
        bpf.detach_all(self.attachments)
        for obj in self.watched.values():
            obj.close()
        self.watched.clear()
        self.shared.close()
