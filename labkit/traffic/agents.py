"""Traffic agents as processes: start them in hosts' namespaces, talk to them, read results.

An agent is ``python -m labkit.traffic.<module> CONFIG.json`` started with
:meth:`labkit.kernel.fabric.Fabric.popen` (so it is in the run registry). It prints
``READY`` once its sockets are bound, starts on ``GO <t0_ns>``, and prints
``DONE`` after writing its results next to its config (ranks first print
``FINISHED`` and wait for ``END``: :func:`finish_together`), which :meth:`Agent.result`
reads back as its kind's type (:mod:`labkit.model.traffic.results`). Configurations carry
the packet templates built here with scapy; agents only patch them.
"""

from __future__ import annotations

import json
import random
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Generic, TypeVar

from labkit.kernel.fabric import Fabric
from labkit.model.scenario_spec import Scenario
from labkit.model.topo import Topology
from labkit.model.traffic import configs, nvme, roce, wire
from labkit.model.traffic.results import (
    CollectiveResult,
    EngineResult,
    OpResult,
    StorageResult,
)
from labkit.traffic.opsteps import PipeLines

ROCE_MTUS = (4096, 2048, 1024, 512, 256)
HEADERS = 20 + 8 + wire.BTH_LEN + wire.RETH_LEN + wire.ICRC_LEN  # IPv4 + UDP + RoCE
READY_TIMEOUT_S = 30
# an agent reads its GO within a millisecond or two on a quiet machine (a pipe's wake-up);
# fifty give the slowest of a policy's agents room, and each policy waits them twice
GO_LEAD_NS = 50_000_000
STORAGE_SPORT_BASE = 20000  # clients' TCP source ports: below Linux's ephemeral range
STORAGE_SPORTS_PER_ENTRY = 1000


class AgentError(RuntimeError):
    pass


def roce_payload_bytes(mtu: int) -> int:
    """The largest RoCE MTU whose packets fit the link MTU."""
    return next(m for m in ROCE_MTUS if m + HEADERS <= mtu)


R = TypeVar("R", EngineResult, StorageResult)


class Agent(Generic[R]):
    """One agent process; :meth:`result` reads what it reported as ``reports``."""

    def __init__(self, fabric: Fabric, node: str, module: str,
                 cfg: configs.Engine | configs.Storage, reports: type[R], workdir: Path,
                 what: str, pass_fds: tuple[int, ...] = ()):
        self.node, self.what = node, what
        self.reports: type[R] = reports
        self.cfg_path = workdir / f"{what}-{node}.json"
        self.out = workdir / f"{what}-{node}.result.json"
        self.err_path = workdir / f"{what}-{node}.stderr"
        configs.write(replace(cfg, out=str(self.out)), self.cfg_path)
        self.err = open(self.err_path, "w")
        self.proc = fabric.popen(node, [sys.executable, "-m", module, str(self.cfg_path)], what,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                 text=True, bufsize=1, pass_fds=pass_fds)
        self._lines = PipeLines(self.proc.stdout.fileno())  # what it prints, line by line
        self._sending = threading.Lock()  # features' threads send lines too (SLOW, SHIFT)

    def read_lines(self) -> list[str] | None:
        """The whole lines the agent has printed since the last call (None: it exited)."""
        return self._lines.read()

    def send(self, line: str) -> None:
        """One whole line to the agent's stdin (nothing if it has gone)."""
        with self._sending:
            try:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass

    def failure(self) -> str:
        self.err.flush()
        tail = self.err_path.read_text().strip().splitlines()[-8:]
        return f"{self.what} on {self.node} exited ({self.proc.poll()}): " + "\n".join(tail)

    def result(self) -> R:
        try:
            return self.reports.from_json(json.loads(self.out.read_text()))
        except (OSError, ValueError) as exc:
            raise AgentError(self.failure()) from exc

    def close(self) -> None:
        self.err.close()


def await_lines(agents: Sequence[Agent], word: str, timeout_s: float,
                 on_line: Callable[[Agent, str], None] | None = None) -> None:
    """Read agents' stdout until each has printed ``word`` (or fail clearly)."""
    sel = selectors.DefaultSelector()
    for a in agents:
        sel.register(a.proc.stdout, selectors.EVENT_READ, a)
    waiting = set(agents)
    deadline = time.monotonic() + timeout_s
    try:
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                names = ", ".join(f"{a.what}@{a.node}" for a in waiting)
                raise AgentError(f"timed out after {timeout_s:.0f} s waiting for {word} "
                                 f"from {names}")
            for key, _ in sel.select(timeout=min(left, 0.5)):
                agent: Agent = key.data
                lines = agent.read_lines()
                if lines is None:
                    sel.unregister(agent.proc.stdout)
                    raise AgentError(agent.failure())
                for line in lines:
                    if line == word:
                        waiting.discard(agent)
                        sel.unregister(agent.proc.stdout)
                        break
                    if on_line:
                        on_line(agent, line)
    finally:
        sel.close()


def collective(op: str, algo: str, size_bytes: int, group: int = 1) -> dict:
    """The workload of agents that run one collective (``group``: ranks per server, for
    the hierarchical algorithm)."""
    out = {"kind": "collective", "op": op, "algo": algo, "size_bytes": size_bytes}
    return {**out, "group": group} if group > 1 else out


class Engine(Agent[EngineResult]):
    """A collective engine: one process driving the ranks of ``hosts`` (rank -> host)."""

    def __init__(self, fabric: Fabric, hosts: dict[int, str], cfg: configs.Engine,
                 workdir: Path, pass_fds: tuple[int, ...]):
        self.hosts = hosts
        super().__init__(fabric, hosts[min(hosts)], "labkit.traffic.collective", cfg,
                         EngineResult, workdir, "collective", pass_fds=pass_fds)

    def ranks(self) -> list[tuple[str, CollectiveResult]]:
        """Each of its ranks' results, with the rank's host."""
        return [(self.hosts[r.rank], r) for r in self.result().ranks]


def engine_groups(topo: Topology, ranks: tuple[str, ...], engines: str) -> list[list[int]]:
    """The ranks each engine drives: those whose hosts hang off the same leaf
    (``leaf``; a host's first link tells its leaf) or each rank alone (``rank``)."""
    if engines == "rank":
        return [[i] for i in range(len(ranks))]
    groups: dict[str, list[int]] = {}
    for i, host in enumerate(ranks):
        groups.setdefault(topo.ports[host][0].peer, []).append(i)
    return list(groups.values())


def start_collective(fabric: Fabric, topo: Topology, ranks: tuple[str, ...], workload: dict,
                     *, iterations: int, compute_ms: float, workdir: Path, rng: random.Random,
                     duration_s: float | None = None, phase_maps: dict[str, int] | None = None,
                     dcqcn: bool = False, gso_packets: int = 1,
                     lossless: bool = False, engines: str = "leaf", dscp: int = 0
                     ) -> list[Engine]:
    """The ranks (``labkit.traffic.collective``) running ``workload`` (see
    :func:`collective`, or a training job: ``{"kind": "job", "job": {...}}``), in engines
    grouped as ``engines`` says (:func:`engine_groups`): each engine starts in its first
    rank's host and opens the others' sockets in their hosts' namespaces.
    ``phase_maps``: per host, the fd of the map its ranks publish their phase to;
    ``dcqcn``: senders mark their packets ECN-capable and react to CNPs; ``gso_packets``:
    packets per GSO run (scenario ``emulation.gso_packets``); ``lossless``: the fabric
    never drops the ranks' packets, so their transport waits long before it resends;
    ``dscp``: what every packet of the ranks carries (their job's, with several jobs)."""
    phase_maps = phase_maps or {}
    n = len(ranks)
    workdir.mkdir(parents=True, exist_ok=True)
    payload = roce_payload_bytes(min(link.mtu for link in
                                     (*topo.fabric.links, *topo.fabric.nvlinks)))
    # a lossy link drops what its queue holds whole: packets one by one, as the loss rate says
    lossy = any(link.loss_percent for link in topo.fabric.links)
    common = configs.Collective(
        rank=0, n=n, ip="", workload=workload, iterations=iterations, compute_ms=compute_ms,
        duration_s=duration_s, payload_bytes=payload,
        peers={i: topo.host_ip(h) for i, h in enumerate(ranks)},
        sport_base=rng.randrange(49152, 65536 - n),
        templates=roce.data_templates(0, payload), ack_template=roce.ack_template(0),
        nak_template=roce.ack_template(0, wire.SYNDROME_NAK_PSN),
        cnp_template=roce.cnp_template(0), gso_segments=1 if lossy else gso_packets,
        lossless=lossless, dscp=dscp)
    out = []
    for group in engine_groups(topo, ranks, engines):
        home = ranks[group[0]]
        guests = {ranks[i] for i in group} - {home}  # hosts whose namespace it joins
        cfg = configs.Engine(ranks=[
            replace(common, rank=i, ip=topo.host_ip(ranks[i]),
                    phase_map_fd=phase_maps.get(ranks[i]),
                    netns_fd=fabric.ns[ranks[i]].fd if ranks[i] in guests else None,
                    dcqcn_line_mbps=topo.ports[ranks[i]][0].link.rate_mbps if dcqcn else None)
            for i in group])
        fds = {*(phase_maps[h] for h in (home, *guests) if h in phase_maps),
               *(fabric.ns[h].fd for h in guests)}
        out.append(Engine(fabric, {i: ranks[i] for i in group}, cfg, workdir,
                          tuple(sorted(fds))))
    return out


def storage_configs(sc: Scenario, topo: Topology) -> dict[str, configs.Storage]:
    """Per host, the storage agent's configuration: the entries it serves and those it
    is a client of, with pacing, arrival rates, seeds and source-port ranges."""
    rate_mbps = topo.port_towards(*sc.fabric.bottlenecks[0]).link.rate_mbps
    served: dict[str, configs.Served] = {}
    clients: dict[str, list[configs.Client]] = {}
    for i, st in enumerate(sc.storage):
        flows = len(st.clients) * st.queues
        share = st.offered_load * rate_mbps * 1e6 / 8 / flows  # bytes/s per connection
        paced = st.arrival.process != "poisson"  # Poisson's arrivals set its rate
        pacing = int(share) if paced else 0
        base = STORAGE_SPORT_BASE + i * STORAGE_SPORTS_PER_ENTRY
        serve = served.setdefault(st.server, configs.Served(
            ports=[], flows=[], templates=nvme.templates(wire.BLOCK)))
        serve.ports[:] = sorted({*serve.ports, st.port})
        serve.flows.append(configs.ServedFlow(
            name=st.name, pattern=st.pattern, port=st.port, pacing_bytes_per_s=pacing,
            sport_lo=base, sport_hi=base + flows - 1))
        templates = nvme.templates(st.io_bytes)
        for j, client in enumerate(st.clients):
            clients.setdefault(client, []).append(configs.Client(
                name=st.name, pattern=st.pattern, port=st.port, pacing_bytes_per_s=pacing,
                queues=st.queues, io_bytes=st.io_bytes, queue_depth=st.queue_depth,
                arrival=asdict(st.arrival), ios_per_s=share * st.queues / st.io_bytes,
                seed=f"{sc.seed}/{st.name}/{client}", server_ip=topo.host_ip(st.server),
                sport_base=base + j * st.queues, templates=templates))
    return {host: configs.Storage(serve=served.get(host), clients=clients.get(host, []))
            for host in (*served, *(h for h in clients if h not in served))}


def start_storage(sc: Scenario, topo: Topology, fabric: Fabric, workdir: Path
                  ) -> list[Agent[StorageResult]]:
    """One storage agent per host that serves or is a client of a storage entry."""
    return [Agent(fabric, node, "labkit.traffic.storage", cfg, StorageResult, workdir, "storage")
            for node, cfg in storage_configs(sc, topo).items()]


def finish_together(ranks: list[Engine], timeout_s: float,
                    on_line: Callable[[Agent, str], None] | None = None) -> None:
    """Wait until every rank has finished its ops, then let them all end (ranks keep
    acknowledging until then, and none exits while another is still in its last op)."""
    await_lines(ranks, "FINISHED", timeout_s, on_line)
    for a in ranks:
        a.send("END")
    await_lines(ranks, "DONE", 10)


def await_ready(agents: Sequence[Agent]) -> None:
    """Wait for every agent's READY (it has its sockets and its peers)."""
    await_lines(agents, "READY", READY_TIMEOUT_S)


def start_time() -> int:
    """When agents told now may start together: far enough ahead (:data:`GO_LEAD_NS`)
    that each has read its GO by then."""
    return time.monotonic_ns() + GO_LEAD_NS


def go(agents: Sequence[Agent], at_ns: int) -> None:
    """Tell ``agents`` to start at ``at_ns`` (CLOCK_MONOTONIC, shared by every namespace)."""
    for a in agents:
        a.send(f"GO {at_ns}")


def run_agents(engines: list[Engine], iterations: int) -> list[OpResult]:
    """Start collective engines together, wait for them, return their ranks' ops."""
    await_ready(engines)
    go(engines, start_time())
    finish_together(engines, max(120, 10 * iterations))
    return [op for e in engines for r in e.result().ranks for op in r.ops]
