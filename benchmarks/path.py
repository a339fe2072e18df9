"""The fabric the benchmarks measure on: hosts h1 and h2 behind router r1, one path."""

from labkit.model import scenario


def two_hosts(rate_mbps: float, mtu: int, buffer_kb: int) -> scenario.Scenario:
    """h1 -> r1 -> h2, every link at ``rate_mbps``; r1's port to h2 is the watched one."""
    return scenario.parse({
        "name": "bench-path",
        "defaults": {"link": {"rate_mbps": rate_mbps, "mtu": mtu, "buffer_kb": buffer_kb}},
        "fabric": {"routers": ["r1"], "hosts": {"gpu": {"r1": ["h1", "h2"]}},
                   "bottlenecks": [["r1", "h2"]]},
        "traffic": [{"kind": "allreduce", "ranks": ["h1", "h2"], "size_bytes": 1024,
                     "iterations": 1}],
    }, "benchmarks/path.py")
