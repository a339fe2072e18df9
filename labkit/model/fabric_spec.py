"""A scenario's fabric as frozen dataclasses: its links, hosts, servers and the fabric.

:mod:`labkit.model.scenario` validates a scenario file into them (and names them too); the
graph built from them (:mod:`labkit.model.topo`) and a lossless fabric's plan
(:mod:`labkit.model.lossless`) read them. They live apart from the parser so that the parser
can check a fabric with those two modules, and every import runs one way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LinkSpec:
    """A full-duplex link; both directions are shaped to ``rate_mbps``, then held for
    ``delay_ms`` (± ``jitter_ms``, never reordered) as a wire's propagation delay."""

    a: str
    b: str
    rate_mbps: float
    mtu: int
    buffer_kb: int
    loss_percent: float = 0.0  # packets dropped on purpose, each direction
    delay_ms: float = 0.0  # propagation delay, each direction (labkit.kernel.delayline)
    jitter_ms: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass(frozen=True)
class HostSpec:
    name: str
    role: str
    router: str


@dataclass(frozen=True)
class ServerSpec:
    """GPU hosts in one server, joined by its NVLink switch (``fabric.gpus_per_host``)."""

    switch: str  # the switch's node: nvs1, nvs2, ... in scenario order
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class FabricSpec:
    routers: tuple[str, ...]
    hosts: tuple[HostSpec, ...]
    links: tuple[LinkSpec, ...]  # host links first (in host order), then router links
    bottlenecks: tuple[tuple[str, str], ...]
    lossless: tuple[str, ...] = ()  # lanes paused instead of dropped (labkit.model.lossless)
    servers: tuple[ServerSpec, ...] = ()  # with gpus_per_host > 1
    nvlinks: tuple[LinkSpec, ...] = ()  # switch-GPU links of the servers, in server order
    routing: str = "static"  # or "bgp": FRR in every router (labkit.kernel.frr)

    @property
    def gpus_per_host(self) -> int:
        return len(self.servers[0].gpus) if self.servers else 1

    def scaled(self, factor: float) -> FabricSpec:
        """This fabric with its links' rates times ``factor`` and their delays divided by
        it (``emulation.rate_factor``: the same fabric, faster or slower)."""
        if factor == 1:
            return self
        return replace(self, links=tuple(
            replace(link, rate_mbps=link.rate_mbps * factor, delay_ms=link.delay_ms / factor,
                    jitter_ms=link.jitter_ms / factor) for link in self.links))
