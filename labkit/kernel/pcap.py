"""Packet capture of named links, with tcpdump inside the emulated nodes.

``labkit run --pcap leaf1-spine1`` records every packet crossing that link (both
directions, on the first-named node's port) to ``<run>/<policy>/leaf1-spine1.pcap``.
tshark dissects the collectives as InfiniBand (BTH, RETH) and the storage
traffic as NVMe/TCP. tcpdump is started before any traffic and stopped, so its
file is complete, before the fabric goes down.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from labkit.model.topo import Topology


@dataclass(frozen=True)
class PcapRequest:
    links: tuple[str, ...]  # link names as "a-b"
    snaplen: int = 0  # 0: whole packets


class PacketCapture:
    """tcpdump on the ports of ``request.links`` of a running fabric."""

    def __init__(self, fabric, topo: Topology, request: PcapRequest, directory: Path):
        self.fabric, self.topo, self.request = fabric, topo, request
        self.directory = directory
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self) -> PacketCapture:
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in self.request.links:
            port = self.topo.link_port(name)
            path = self.directory / f"{name}.pcap"
            proc = self.fabric.popen(
                port.node, ["tcpdump", "-i", port.ifname, "-w", str(path), "-s",
                            str(self.request.snaplen), "-U", "-n", "-Z", "root"],
                f"tcpdump {name}", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            line = proc.stderr.readline()  # "listening on ...": capturing from now on
            if "listening on" not in line:
                raise RuntimeError(f"tcpdump on {port.node}/{port.ifname} did not start: {line}")
            self.procs.append((proc, path))
        return self

    def stop(self) -> list[Path]:
        for proc, _ in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in self.procs:
            proc.wait(timeout=10)
            if proc.stderr:  # a pipe (start)
                proc.stderr.close()
        return [path for _, path in self.procs]


def check_links(topo: Topology, links: list[str]) -> None:
    """Raise KeyError naming the known links if one of ``links`` does not exist."""
    for name in links:
        topo.link_port(name)
