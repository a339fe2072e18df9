"""The fabric the benchmarks measure on: hosts h1 and h2 behind router r1, one path."""

from labkit.analysis import calibration
from labkit.model import scenario


def two_hosts(rate_mbps: float, mtu: int, buffer_kb: int) -> scenario.Scenario:
    """h1 -> r1 -> h2, every link at ``rate_mbps``; r1's port to h2 is the watched one.
    Past the rate a scenario may write (10 Gbit/s), the links are written at that and
    scaled up as ``emulation.rate_factor`` scales them: a benchmark asks for links faster
    than what it measures."""
    written = min(rate_mbps, scenario.LIMITS["rate_mbps"].hi)
    sc = scenario.parse({
        "name": "bench-path",
        "defaults": {"link": {"rate_mbps": written, "mtu": mtu, "buffer_kb": buffer_kb}},
        "fabric": {"routers": ["r1"], "hosts": {"gpu": {"r1": ["h1", "h2"]}},
                   "bottlenecks": [["r1", "h2"]]},
        "traffic": [{"kind": "allreduce", "ranks": ["h1", "h2"], "size_bytes": 1024,
                     "iterations": 1}],
    }, "benchmarks/path.py")
    return calibration.scaled(sc, rate_mbps / written)
