"""A routed fabric (``fabric.routing: bgp``): FRR's zebra, bgpd and bfdd in every router's
namespace, started by labkit, recorded in the run's registry and stopped with the fabric.

The plan is RFC 7938's eBGP fabric, made from the scenario's router graph alone:

* every router is an AS of its own (``65000 + i``) and peers with each router it has a
  link to, on the link's own addresses;
* it advertises its hosts' subnets (its connected /24s in 10.0.0.0/16, nothing else) and
  installs up to :data:`MAX_PATHS` equal-cost paths (``as-path multipath-relax``: two
  spines are two ASes), hashed by the kernel as static routes are;
* every session is watched by BFD (:data:`BFD_MS` x :data:`BFD_MULTIPLIER`): a link that
  stops passing packets (down, or an event's 100 % loss) loses its sessions and its
  routes within about that, and gets them back about a second after it heals.

Hosts keep their static default route to their router. zebra installs plain multipath
routes (no kernel nexthop objects; where FRR uses them anyway, the kernel's default
``nexthop_compat_mode`` still reports each route's next hops), so a route's change is a
route message (:mod:`labkit.kernel.routewatch`). Each router's daemons run in the
foreground as FRR's user (their PIDs recorded, SIGTERM at teardown), with their
configuration, pid files, vty sockets and logs in a directory of the run's, and a
pathspace of their own (``-N``: ``/run/frr/<pathspace>``, zebra's socket and, FRR 9 on,
mgmtd's), both recorded as ``session_dir`` and removed after them, as is each daemon's
crash-log directory (:data:`CRASH_DIR`), should it be killed before it removes it.
:meth:`Frr.converged` waits until every session and BFD peer is up and every router's
kernel routes each host subnet over the next hops its shortest paths have
(labkit.model.topo's, as static routing installs them). Why FRR: it is what ipmininet,
containerlab and Kathará run, and Debian's ``frr`` package (``make setup`` installs it)
is what a user can run by hand too
(``vtysh --vty_socket DIR``, :meth:`Frr.vtysh`).
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labkit.model.topo import Topology

FRR_DIR = Path("/usr/lib/frr")
DAEMONS = ("zebra", "bfdd", "bgpd")  # in the order they start (bgpd registers with both)
MGMTD = "mgmtd"  # FRR 9 on (Debian 13): the configuration daemon, started first if there
BASE_AS = 65000
MAX_PATHS = 16
BFD_MS = 50  # BFD's transmit and receive interval
BFD_MULTIPLIER = 3  # packets missed before a session is down
HOST_SUBNETS = "10.0.0.0/16"  # every host link's /24 (labkit.model.topo)
CONVERGE_S = 30.0
USER = "frr"  # FRR's daemons run as the user Debian's package made
RUN_DIR = Path("/run/frr")  # where a pathspace's own files go (FRR 9 on: mgmtd's sockets)
# each daemon's crash-log directory, <daemon>.<pid>, made as root before it becomes FRR's
# user; it removes it as it exits, unless it is killed first (a teardown's SIGKILL)
CRASH_DIR = Path("/var/tmp/frr")


def problem() -> str | None:
    """Why a routed fabric cannot run here, or None."""
    missing = [str(FRR_DIR / d) for d in DAEMONS if not (FRR_DIR / d).exists()]
    if shutil.which("vtysh") is None:
        missing.append("vtysh")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        missing.append(f"the user {USER}")
    if missing:
        return (f"fabric.routing: bgp needs FRR ({', '.join(missing)} not found): "
                "`make setup` installs Debian's frr")
    return None


@dataclass(frozen=True)
class RouterPlan:
    """One router's part: its AS, router id and each daemon's configuration."""

    name: str
    asn: int
    router_id: str
    configs: dict[str, str]  # daemon -> its configuration file's text


def plan(topo: Topology) -> dict[str, RouterPlan]:
    """Every router's AS, id and configuration, from the fabric's router graph."""
    routers = list(topo.fabric.routers)
    asn = {r: BASE_AS + i for i, r in enumerate(routers)}
    out = {}
    for i, r in enumerate(routers):
        peers = [(p.peer_ip, asn[p.peer]) for p in topo.ports[r]
                 if topo.roles[p.peer] == "router"]
        router_id = f"10.255.{i // 250}.{i % 250 + 1}"
        bgp = [f"hostname {r}", "frr defaults datacenter", "!",
               f"router bgp {asn[r]}", f" bgp router-id {router_id}",
               " no bgp ebgp-requires-policy", " no bgp network import-check",
               " bgp bestpath as-path multipath-relax"]
        for ip, remote in peers:
            bgp += [f" neighbor {ip} remote-as {remote}", f" neighbor {ip} timers 1 3",
                    f" neighbor {ip} timers connect 1", f" neighbor {ip} bfd",
                    f" neighbor {ip} bfd profile fabric"]
        bgp += [" address-family ipv4 unicast", "  redistribute connected route-map HOSTS",
                f"  maximum-paths {MAX_PATHS}", " exit-address-family", "!",
                f"ip prefix-list HOSTS seq 5 permit {HOST_SUBNETS} ge 24 le 24",
                "route-map HOSTS permit 10", " match ip address prefix-list HOSTS", "!"]
        bfd = [f"hostname {r}", "!", "bfd", " profile fabric",
               f"  transmit-interval {BFD_MS}", f"  receive-interval {BFD_MS}",
               f"  detect-multiplier {BFD_MULTIPLIER}", " exit", "exit", "!"]
        out[r] = RouterPlan(r, asn[r], router_id, {
            "zebra": f"hostname {r}\nno zebra nexthop kernel enable\n!\n",
            "bgpd": "\n".join(bgp) + "\n", "bfdd": "\n".join(bfd) + "\n"})
    return out


def argv(daemon: str, d: Path, pathspace: str) -> list[str]:
    """How one router's ``daemon`` runs, everything of it in ``d`` or its ``pathspace``:
    in the foreground, as FRR's own user (its default: root is not in FRR's vty group), no
    TCP vty, its own sockets."""
    out = [str(FRR_DIR / daemon), "-N", pathspace, "-f", str(d / f"{daemon}.conf"),
           "-i", str(d / f"{daemon}.pid"), "--vty_socket", str(d),
           "-P", "0", "--log", f"file:{d / f'{daemon}.log'}"]  # zebra's socket: the pathspace's
    if daemon == "bfdd":
        out += ["--bfdctl", str(d / "bfdd.sock")]
    if daemon == "zebra":
        out += ["--nl-bufsize", str(1 << 22)]
    return out


class Frr:
    """The routing daemons of a running fabric's routers."""

    def __init__(self, topo: Topology, popen: Callable[..., subprocess.Popen],
                 record_dir: Callable[[Path], None]):
        self.topo, self.popen = topo, popen
        self.plans = plan(topo)
        self.record_dir = record_dir
        self.dir = Path(tempfile.mkdtemp(prefix="labkit-frr-"))
        record_dir(self.dir)
        self.dir.chmod(0o755)  # FRR's user reaches its router's directory
        self.procs: dict[tuple[str, str], subprocess.Popen] = {}

    def _pathspace(self, router: str) -> str:
        """``router``'s pathspace, its directory under :data:`RUN_DIR` made and recorded."""
        name = f"{self.dir.name}-{router}"
        if not RUN_DIR.exists():  # no FRR service has run here: labkit's to remove
            RUN_DIR.mkdir(mode=0o755)
            self.record_dir(RUN_DIR)
        (RUN_DIR / name).mkdir()
        self.record_dir(RUN_DIR / name)
        shutil.chown(RUN_DIR / name, USER, USER)
        return name

    def start(self) -> Frr:
        """Every router's daemons, zebra first (the others connect to its socket)."""
        daemons = ((MGMTD,) if (FRR_DIR / MGMTD).exists() else ()) + DAEMONS
        for router, p in self.plans.items():
            d = self.dir / router
            d.mkdir()
            for daemon in daemons:
                (d / f"{daemon}.conf").write_text(p.configs.get(daemon, f"hostname {router}\n"))
            for path in (d, *d.iterdir()):
                shutil.chown(path, USER, USER)
            pathspace = self._pathspace(router)
            for daemon in daemons:
                with open(d / f"{daemon}.out", "w") as out:  # what it says before it logs
                    proc = self.popen(router, argv(daemon, d, pathspace), f"frr {daemon}",
                                      stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT)
                self.procs[router, daemon] = proc
                self.record_dir(CRASH_DIR / f"{daemon}.{proc.pid}")
                if daemon == "zebra":
                    self._until((RUN_DIR / pathspace / "zserv.api").exists, 10,
                                f"{router}'s zebra did not open its socket")
        return self

    def _until(self, ready: Callable[[], bool], timeout: float, why: str) -> None:
        """Wait for ``ready``; a daemon that exits meanwhile, or the timeout, fails the start
        with what the logs said last (they go with the fabric's teardown)."""
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [f"{r}'s {d} exited ({p.returncode}): {self._last_logged(r, d)}"
                    for (r, d), p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"FRR: {'; '.join(dead)}")
            if time.monotonic() > deadline:
                last = "; ".join(f"{r}'s {d}: {self._last_logged(r, d)}" for r, d in self.procs)
                raise RuntimeError(f"FRR: {why} within {timeout:.0f} s ({last})")
            time.sleep(0.1)

    def _last_logged(self, router: str, daemon: str) -> str:
        """The last line ``router``'s ``daemon`` wrote to its log, or else the first it
        wrote to its output, as a refused option ("nothing logged" if neither has one)."""
        for name, last in ((f"{daemon}.log", True), (f"{daemon}.out", False)):
            try:
                text = (self.dir / router / name).read_text(errors="replace")
            except OSError:
                continue
            lines = [line.strip() for line in text.split("\n") if line.strip()]
            if lines:
                return lines[-1] if last else lines[0]
        return "nothing logged"

    def vtysh(self, router: str, command: str) -> str:
        """``command``'s answer from ``router``'s daemons (``show bgp summary json``)."""
        return subprocess.run(["vtysh", "--vty_socket", str(self.dir / router), "-c", command],
                              capture_output=True, text=True, timeout=10, check=True).stdout

    def _json(self, router: str, command: str, empty: str):
        """A ``show ... json`` command's answer, ``empty``'s value while the daemon cannot
        answer yet (starting, busy)."""
        try:
            return json.loads(self.vtysh(router, command) or empty)
        except (subprocess.SubprocessError, json.JSONDecodeError):
            return json.loads(empty)

    def sessions(self, router: str) -> dict[str, str]:
        """Each BGP neighbour of ``router`` and its session's state (``Established``)."""
        doc = self._json(router, "show bgp ipv4 unicast summary json", "{}")
        return {ip: peer.get("state", "?") for ip, peer in doc.get("peers", {}).items()}

    def bfd_peers(self, router: str) -> dict[str, str]:
        """Each BFD peer of ``router`` and its state (``up``)."""
        return {p["peer"]: p["status"] for p in self._json(router, "show bfd peers json", "[]")}

    def converged(self, routes: Callable[[str], dict[str, str]],
                  timeout: float = CONVERGE_S) -> float:
        """Wait until every session and its BFD are up and every router's kernel (``routes``:
        each destination's next hops, as :func:`labkit.kernel.routewatch.host_routes` gives
        them) routes each other router's hosts over all its shortest paths; seconds it took."""
        t0 = time.monotonic()
        wanted = {r: {route.dst: " ".join(sorted(route.nexthops))
                      for route in self.topo.routes(r)} for r in self.plans}
        peers = {r: {p.peer_ip for p in self.topo.ports[r] if self.topo.roles[p.peer] == "router"}
                 for r in self.plans}

        def done() -> bool:
            return all(routes(r).items() >= wanted[r].items() and
                       self.sessions(r) == dict.fromkeys(peers[r], "Established") and
                       self.bfd_peers(r) == dict.fromkeys(peers[r], "up") for r in self.plans)
        self._until(done, timeout, "the fabric's BGP sessions did not all come up")
        return time.monotonic() - t0
