"""The hosts' TCP congestion control for a run: lk_dctcp (``bpf/dctcp.bpf.c``), DCTCP
as a BPF TCP congestion control, or a kernel one as a namespace's own
(:func:`tcp_congestion_control`, ``transport.tcp: reno``).

:class:`Dctcp` registers lk_dctcp (struct_ops, recorded in the run registry), attaches
the selector (cgroup sock_ops) to the run's fabric cgroup and lists the namespaces whose
TCP sockets take it (by netns cookie): each as it connects or starts listening, before
its SYN, so ECN is negotiated. No global sysctl changes: a per-socket choice made by a
BPF program is allowed whatever ``tcp_allowed_congestion_control`` says.

Teardown order: the fabric first (its processes), then the TCP sockets they left in the
chosen namespaces, then the selector, then the registration; a killed run's registration
is removed by ``labkit clean`` from the registry (by map id and name). Each window's
alpha comes back through a ring buffer (:meth:`Dctcp.samples`).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from labkit.kernel import bpf
from labkit.kernel.netns import Netns
from labkit.kernel.skeletons import DCTCP
from labkit.model.abi import DCTCP_SAMPLE, DctcpSample

NAME = "lk_dctcp"  # the congestion control's name (tcp_congestion_ops.name)
SO_NETNS_COOKIE = 71  # <asm-generic/socket.h>, Linux 5.14


def netns_cookie() -> int:
    """The calling thread's network namespace cookie (what bpf_get_netns_cookie reads)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")


# what a namespace that takes lk_dctcp sets for itself: a resent SYN still asks for ECN,
# and a socket closing towards a peer that is gone (a killed run's) gives up within a
# second or so, not minutes: until then it holds lk_dctcp, which `labkit clean` waits for
NAMESPACE_SYSCTLS = {"tcp_ecn_fallback": "0", "tcp_orphan_retries": "1", "tcp_fin_timeout": "1"}


def _select_here() -> int:
    """In a namespace that takes lk_dctcp: its own NAMESPACE_SYSCTLS; its cookie."""
    for key, value in NAMESPACE_SYSCTLS.items():
        Path("/proc/sys/net/ipv4", key).write_text(value)
    return netns_cookie()


def _abort_tcp_sockets() -> None:
    """Destroy every TCP socket of the calling thread's namespace (sock_diag's
    SOCK_DESTROY, as iproute2's ``ss -K`` sends it: pyroute2 does not send it)."""
    subprocess.run(["ss", "-K", "-t", "-a", "-n"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def tcp_congestion_control(name: str) -> None:
    """The calling thread's namespace's own TCP congestion control from now on (a setting
    of that namespace alone; one of the root namespace's tcp_allowed_congestion_control)."""
    Path("/proc/sys/net/ipv4/tcp_congestion_control").write_text(name)


def registered() -> bool:
    """Whether a congestion control called lk_dctcp is registered on this machine."""
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    return NAME in path.read_text().split()


class Dctcp:
    """lk_dctcp registered for one fabric, picked by the sockets of :meth:`select`'s
    namespaces in the cgroup given to :meth:`attach`."""

    def __init__(self, record: bpf.Recorder | None = None):
        if registered():
            raise RuntimeError(f"a congestion control called {NAME} is registered already "
                               "(another run's: `sudo labkit clean` removes a killed one's)")
        # its programs outlive the fabric's teardown (they go with the registration, which
        # the registry records): not recorded one by one
        self.obj = DCTCP.open()
        self.selector: bpf.TracingLink | None = None
        try:
            ops = self.obj.maps.lk_dctcp
            map_id, _ = bpf.map_info(ops.fd)
            self.ops: bpf.TracingLink | None = ops.attach_struct_ops()
            if record:
                record("struct_ops", name=NAME, id=map_id)
        except BaseException:
            self.obj.close()
            raise
        self._samples: list[DctcpSample] = []
        self._chosen: list[Netns] = []  # select()'s namespaces, held open until close()
        self._ring = bpf.RingBuffer(self.obj.maps.lk_dctcp_samples.fd, self._on_sample)

    def attach(self, cgroup: Path) -> None:
        """Attach the selector to the cgroup at ``cgroup`` (and the cgroups below it)."""
        fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.selector = self.obj.programs.lk_dctcp_select.attach_cgroup(fd)
        finally:
            os.close(fd)

    def select(self, ns: Netns) -> None:
        """The TCP sockets of namespace ``ns`` take lk_dctcp from now on, with its
        NAMESPACE_SYSCTLS (settings of that namespace alone). A SYN resent keeps asking
        for ECN there (``tcp_ecn_fallback`` 0): else a connection whose first SYN met a
        full queue would run without ECN, as Reno, and fill the queue DCTCP keeps short."""
        self.obj.maps.lk_dctcp_hosts.update(ns.run(_select_here), 1)
        self._chosen.append(Netns.inherited(os.dup(ns.fd), ns.name))

    def _on_sample(self, raw: bytes) -> None:
        self._samples.append(DctcpSample(*DCTCP_SAMPLE.unpack_from(raw)))

    def samples(self) -> list[DctcpSample]:
        """Every window's end so far, oldest first (alpha and cwnd per flow)."""
        self._ring.consume()
        return list(self._samples)

    def close(self) -> None:
        """After the fabric's teardown: destroy the TCP sockets its processes left behind
        in the chosen namespaces (closing in FIN-WAIT to peers that are gone, they would
        hold lk_dctcp, and their namespace, for minutes), let the namespaces go, detach
        the selector, unregister lk_dctcp, release the object."""
        for ns in self._chosen:
            ns.run(_abort_tcp_sockets)
            ns.close()
        self._chosen.clear()
        if self.selector:
            self.selector.close()
            self.selector = None
        if self.ops:
            self.ops.close()
            self.ops = None
        self._ring.close()
        self.obj.close()
