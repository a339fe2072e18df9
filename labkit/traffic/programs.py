"""The user's own program as the collective workload (``kind: program``), run for real.

One process per rank, in its rank's host, with the environment ``torchrun`` gives each
worker: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``
(the rank's server, with ``fabric.gpus_per_host``), ``MASTER_ADDR`` (rank 0's address),
``MASTER_PORT``, and the host's NIC for the socket transports (``GLOO_SOCKET_IFNAME``,
``NCCL_SOCKET_IFNAME``); ``OMP_NUM_THREADS=1``, ``PYTHONUNBUFFERED=1`` and
``USE_LIBUV=0`` unless the entry's ``env`` says otherwise; ``PYTHONPATH`` leads with
labkit's checkout, so the job can ``import labkit.torch``. Everything else is labkit's
own environment (root's). Under a controller, ``LABKIT_PHASE_FD`` names the inherited
descriptor of the host's phase map (state-aware control, :mod:`labkit.torch`).

Each rank starts in the rank's cgroup (:mod:`labkit.kernel.cgroups`: it joins it before it
runs anything), held: a shell that waits for one line on its stdin. labkit releases
every rank at once; the shell then becomes the program (``exec``), so the program and
everything it starts live in that cgroup, where the job marker knows their packets and
teardown finds them. stdout and stderr are kept per rank
(``program/rank<N>.out``, ``.err`` in the policy's agent directory); the stdout's
JSON lines (:mod:`labkit.model.traffic.lines`) are the job's own times.

With ``launcher: mpirun`` Open MPI's ``mpirun`` starts the ranks instead: labkit starts
mpirun alone, held the same way, in the first rank's host and cgroup, one slot per host
in rank order, over TCP on the fabric's addresses. mpirun starts its daemon in every
other host through labkit's launch agent (``mpi_agent.sh``, where ssh would be), which
joins that host's cgroup and enters its network namespace first: each host's daemon and
rank live in the host's cgroup as a rank started by labkit does. Each rank's output is
kept as a rank's of labkit's (a shell around it, ``OMPI_COMM_WORLD_RANK`` names the
files); the environment above, without torchrun's variables, is exported to every rank.
Open MPI's daemons close the phase map's descriptor, so under a controller labkit announces
an MPI job's phase for it from the ops its PMPI shim writes
(:class:`labkit.traffic.opsteps.Follower`).

The run lasts until every rank exits, or until ``duration_s``. A rank that exits with
an error ends it: the others are stopped and :class:`ProgramError` names the rank, its
host and the tail of its stderr.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labkit.kernel import cgroups, sched
from labkit.kernel.cgroups import Cgroup
from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import MARKER
from labkit.model import paths
from labkit.model.scenario import HOST_REF, ProgramSpec, ScenarioError
from labkit.model.topo import Topology
from labkit.model.traffic import lines
from labkit.model.traffic.results import ProgramRankEnd
from labkit.traffic.opsteps import Follower, Tail, ops_file

# sh -c SCRIPT NAME CWD ARGV...: wait for the release, then become the program
HELD = 'cd -- "$1" && shift && read -r go && exec "$@" < /dev/null'
# sh -c SCRIPT DIR ARGV...: an MPI rank becomes the program, its output in DIR's
# rank<N>.out and .err (Open MPI 4 and 5 set OMPI_COMM_WORLD_RANK; their own options for
# per-rank output differ)
RANK_WRAPPER = ('r=${OMPI_COMM_WORLD_RANK:?not started by Open MPI}; '
                'exec "$@" > "$0/rank$r.out" 2> "$0/rank$r.err"')
# sh -c SCRIPT NAME ARGV...: in a UTS namespace of its own (``unshare --uts``), the command
# runs under the host name NAME. The emulated hosts share the machine's host name, and
# Open MPI 5's runtime (PRRTE) takes daemons with one host name for one node: eight hosts
# became one node of one slot ("not enough slots"). The name each gets is its address,
# as mpirun's --host list names it.
NAMED = 'echo "$0" > /proc/sys/kernel/hostname && exec "$@"'
STOP_GRACE_S = 3.0
POLL_S = 0.05
TAIL_LINES = 12
LIMIT_S = 1800.0  # a program that never ends is stopped, and the run fails, after this
EXIT_GRACE_S = 15.0  # ranks still there this long after rank 0 reported its last iteration
IMPORT_CHECK_S = 120.0
_ENDED = object()  # what next() gives for a program's wait that has ended
MPI_AGENT = Path(__file__).with_name("mpi_agent.sh")
STARTUP = Path(__file__).with_name("startup")  # sitecustomize: labkit.traffic.torchhook
MPITIME = Path(__file__).with_name("_mpitime.so")  # mpitime.c, built by make setup
OPS_DIR = "LABKIT_OPS_DIR"  # where the hook and the shim write each rank's timed ops
MPIRUN = "mpirun.openmpi"  # Debian's openmpi-bin: Open MPI's, whichever mpirun is chosen
MPI_NET = "10.0.0.0/16"  # the hosts' NICs (labkit.model.topo): not NVLink's, not lo
# what mpirun (or a rank) says of the rank that failed, in Open MPI 4.1 and 5.0: a rank's
# exit ("Process name: [[8123,1],2]" or "[prterun-vm-4321@1,2]", then "Exit code: 7"),
# its MPI_Abort ("MPI_ABORT was invoked on rank 1 ..." then "with errorcode 3" or
# "Errorcode: 3"), its signal ("process rank 1 with PID 4321 ... exited on signal 9")
MPI_FAILED = (
    re.compile(r"Process name:\s*\[(?:\[\d+,\d+\]|[^@\]\s]+@\d+),(?P<rank>\d+)\]\s*"
               r"Exit code:\s*(?P<code>-?\d+)"),
    re.compile(r"MPI_ABORT was invoked on rank (?P<rank>\d+)[\s\S]{0,300}?[Ee]rrorcode:?\s*"
               r"(?P<code>-?\d+)"),
    re.compile(r"process rank (?P<rank>\d+) with PID \d+"),
)


def failed_rank(said: str) -> tuple[int, int | None] | None:
    """The rank Open MPI says failed in ``said`` (mpirun's stderr and the ranks'), and its
    exit code when it says one (not for a signal)."""
    for pattern in MPI_FAILED:
        if m := pattern.search(said):
            code = m.groupdict().get("code")
            return int(m["rank"]), int(code) if code is not None else None
    return None


class ProgramError(RuntimeError):
    """A rank of the user's program failed, or the program outlived its limit."""


def interpreter(spec: ProgramSpec) -> str:
    """What ``{python}`` in ``run`` stands for: the entry's ``python``, a venv's
    ``bin/python`` when it names a directory, looked up on PATH when it is a bare name."""
    path = Path(spec.python)
    if path.is_dir():
        return str(path / "bin" / "python")
    if "/" not in spec.python:
        return shutil.which(spec.python) or spec.python
    return spec.python


def placement(spec: ProgramSpec, topo: Topology) -> list[tuple[int, int, int]]:
    """Per rank, as torchrun counts them: (local rank, local world size, group rank). A
    group is one server's GPUs (``fabric.gpus_per_host``); a GPU host outside any server
    is a group of its own. Groups and local ranks follow the order of the ranks."""
    server_of = {g: s.switch for s in topo.fabric.servers for g in s.gpus}
    group = [server_of.get(h, h) for h in spec.ranks]
    order = list(dict.fromkeys(group))
    return [(group[:r].count(g), group.count(g), order.index(g)) for r, g in enumerate(group)]


def job_env(spec: ProgramSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """What every rank's environment holds, whoever starts it (the module docstring)."""
    env = dict(os.environ if base is None else base)
    # USE_LIBUV=0: PyTorch's rendezvous store without libuv, which Debian 13's python3-torch
    # (2.6) is built without and yet asks for by default ("use_libuv was requested")
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "USE_LIBUV": "0"})
    env.update(dict(spec.env))
    root = str(paths.REPO_ROOT)  # where labkit's package is, for `import labkit.torch`
    hook = str(STARTUP) if spec.timing == "auto" else None
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, root, env.get("PYTHONPATH")) if p)
    return env


def rank_env(spec: ProgramSpec, topo: Topology, r: int, ifname: str,
             base: dict[str, str] | None = None) -> dict[str, str]:
    """Rank ``r``'s environment as labkit starts it: :func:`job_env` and torchrun's."""
    local, local_n, group = placement(spec, topo)[r]
    env = job_env(spec, base)
    env.update({"RANK": str(r), "WORLD_SIZE": str(len(spec.ranks)), "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(local_n), "GROUP_RANK": str(group),
                "MASTER_ADDR": topo.host_ip(spec.ranks[0]), "MASTER_PORT": str(spec.master_port),
                "GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": ifname})
    return env


def rank_argv(spec: ProgramSpec, topo: Topology, r: int, ifname: str) -> list[str]:
    """``run`` with its {host} and per-rank references filled in for rank ``r``."""
    local, local_n, _ = placement(spec, topo)[r]
    values = {"python": interpreter(spec), "rank": str(r), "world_size": str(len(spec.ranks)),
              "local_rank": str(local), "local_world_size": str(local_n),
              "master_addr": topo.host_ip(spec.ranks[0]), "master_port": str(spec.master_port),
              "ifname": ifname, "iterations": str(spec.iterations or "")}
    return [HOST_REF.sub(lambda m: values.get(m.group(1)) or topo.host_ip(m.group(1)), arg)
            for arg in spec.run]


def mpirun_argv(spec: ProgramSpec, topo: Topology, outdir: Path) -> list[str]:
    """mpirun's command line for the entry (under the first host's address as its host
    name, :data:`NAMED`): a slot per rank's host, in rank order; TCP on
    the fabric's addresses (``ob1``: no shared memory between hosts that share a
    machine), ranks not bound to cores (eight ranks on a few cores); each rank's output
    in ``outdir``; :func:`job_env`'s variables and :data:`MARKER` exported to every rank.
    Options Open MPI 4.1 and 5.0 both take; its runtime's own are :func:`mpirun_env`'s."""
    exported = sorted({*job_env(spec, {}), MARKER, OPS_DIR} - {"LD_PRELOAD"})
    preload = ("-x", f"LD_PRELOAD={MPITIME}") if spec.timing == "auto" else ()
    return ["unshare", "--uts", "--", "/bin/sh", "-c", NAMED, topo.host_ip(spec.ranks[0]),
            MPIRUN, "--allow-run-as-root", "-np", str(len(spec.ranks)),
            "--host", ",".join(f"{topo.host_ip(h)}:1" for h in spec.ranks),
            "--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", MPI_NET,
            *(arg for name in exported for arg in ("-x", name)), *preload,
            "/bin/sh", "-c", RANK_WRAPPER, str(outdir), *rank_argv(spec, topo, 0, "")]


def mpirun_env(hosts: Path, session: Path) -> dict[str, str]:
    """The runtime's settings, for Open MPI 4 (ORTE: ``OMPI_MCA_``) and 5 (PRRTE:
    ``PRTE_MCA_``; each ignores the other's): daemons started by :data:`MPI_AGENT` with
    the hosts' table ``hosts`` (its command in sh's syntax), talking on the fabric's
    addresses; mpirun's session directory under ``session`` (TMPDIR: both take it); ranks
    that yield the CPU while they poll."""
    return {"LABKIT_MPI_HOSTS": str(hosts), "TMPDIR": str(session),
            "OMPI_MCA_plm_rsh_agent": str(MPI_AGENT), "PRTE_MCA_plm_ssh_agent": str(MPI_AGENT),
            "OMPI_MCA_oob_tcp_if_include": MPI_NET, "PRTE_MCA_prte_if_include": MPI_NET,
            "OMPI_MCA_mpi_yield_when_idle": "1", "SHELL": "/bin/sh"}


# What :func:`check` saw import in this process: (interpreter, its mtime, modules, the
# environment that decides where they are found). Only successes are kept: a package
# installed since a failed check is found the next time.
_IMPORTED: set[tuple] = set()


def _imports_seen(spec: ProgramSpec, python: str, env: dict[str, str]) -> tuple:
    try:
        mtime = os.stat(python).st_mtime_ns
    except OSError:
        mtime = None
    own = {k for k, _ in spec.env}
    finding = sorted((k, v) for k, v in env.items()
                     if k.startswith(("PYTHON", "LD_")) or k in ("HOME", "PATH") or k in own)
    return python, mtime, tuple(spec.imports), tuple(finding)


def check(spec: ProgramSpec, topo: Topology, source: str) -> None:
    """ScenarioError unless this machine can start the program: its interpreter and
    program exist, a script it names is there, and the interpreter imports ``imports``
    (a check of the machine, run before anything touches the kernel)."""
    argv = rank_argv(spec, topo, 0, "eth0")
    key = spec.key
    if spec.launcher == "mpirun" and shutil.which(MPIRUN) is None:
        raise ScenarioError(source, f"{key}.launcher", f"{MPIRUN} is not installed here: "
                            "Debian's openmpi-bin (`make mpi` installs it, with python3-mpi4py)")
    if spec.launcher == "mpirun" and spec.timing == "auto" and not MPITIME.is_file():
        raise ScenarioError(source, f"{key}.timing", f"{MPITIME} is not built: `make setup` "
                            "builds it (or set timing: traffic)")
    uses_python = "{python}" in spec.run[0] or spec.imports
    python = interpreter(spec)
    if uses_python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ScenarioError(source, f"{key}.python", f"{python} is not an interpreter here: name "
                            "one that is (a path, or a virtual environment's directory)")
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0])
    if program is None or not os.path.isfile(Path(spec.cwd, program)):
        raise ScenarioError(source, f"{key}.run", f"program {argv[0]!r} is not installed here "
                            f"(run in {spec.cwd})")
    if argv[0] == python and len(argv) > 1 and argv[1].endswith(".py") \
            and not Path(spec.cwd, argv[1]).is_file():
        raise ScenarioError(source, f"{key}.run", f"{Path(spec.cwd, argv[1])} does not exist "
                            "(a script's path is relative to the scenario's directory)")
    if spec.imports:
        env = rank_env(spec, topo, 0, "eth0")
        seen = _imports_seen(spec, python, env)
        if seen in _IMPORTED:  # this process saw it import them already (a notebook's reruns)
            return
        try:
            done = subprocess.run([python, "-c", f"import {', '.join(spec.imports)}"],
                                  capture_output=True, text=True, env=env,
                                  timeout=IMPORT_CHECK_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ScenarioError(source, f"{key}.imports", f"{python} took over "
                                f"{IMPORT_CHECK_S:.0f} s to import them") from None
        if done.returncode:
            why = (done.stderr.strip().splitlines() or ["failed"])[-1]
            hint = (" (Debian's python3-torch: `make torch`)" if python == "/usr/bin/python3"
                    and "torch" in spec.imports else "")
            raise ScenarioError(source, f"{key}.imports", f"{python} cannot import "
                                f"{', '.join(spec.imports)}: {why}; install them for it"
                                f"{hint}, or name an interpreter that has them in "
                                f"{key}.python")
        _IMPORTED.add(seen)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def tail(path: Path) -> str:
    """The last :data:`TAIL_LINES` lines of a process's stderr."""
    return "\n".join(_read(path).strip().splitlines()[-TAIL_LINES:]) or "(nothing on stderr)"


@dataclass
class Heard:
    """What a rank wrote to one file so far: its iterations and ops, parsed as they come."""

    tail: Tail
    iterations: list[lines.Iteration] = field(default_factory=list)
    ops: list[lines.Op] = field(default_factory=list)

    def look(self) -> None:
        its, ops, _ = lines.parse(self.tail.new_lines())
        self.iterations += its
        self.ops += ops


@dataclass
class Rank:
    """One rank, as started and as it ended: ``proc`` is its own process, or mpirun's."""

    rank: int
    host: str
    argv: list[str]
    proc: subprocess.Popen
    group: Cgroup
    out: Path
    err: Path
    exit: int | None = None
    stopped_by_labkit: bool = False
    lingered: bool = False  # had done its iterations, but had not exited: stopped
    cpu_s: float = 0.0

    def tail(self) -> str:
        return tail(self.err)


STALL_S = 60.0  # rank 0 silent this long (or 10 of its longest gaps) since its last report


class Stall:
    """When a running job is stuck: rank 0 has reported an op or iteration, and then
    nothing for ``least_s`` or ten times the longest wait between its reports so far,
    whichever is longer (a slow job's own rhythm is not a stall)."""

    def __init__(self, least_s: float):
        self.least_ns = int(least_s * 1e9)
        self.count, self.at_ns, self.longest_ns = 0, 0, 0

    def silent_s(self, now: int) -> float:
        return (now - self.at_ns) / 1e9

    def stuck(self, count: int, now: int) -> bool:
        """``count`` ops or iterations reported by ``now`` (CLOCK_MONOTONIC ns)."""
        if count != self.count:
            if self.count:
                self.longest_ns = max(self.longest_ns, now - self.at_ns)
            self.count, self.at_ns = count, now
            return False
        return bool(count) and now - self.at_ns > max(self.least_ns, 10 * self.longest_ns)


class Programs:
    """The ranks of a program entry in one policy's run: started held, released together,
    waited for, stopped; their lines read back."""

    def __init__(self, spec: ProgramSpec, topo: Topology, fabric: Fabric,
                 groups: dict[str, Cgroup], workdir: Path,
                 phase_fds: dict[str, int] | None = None):
        self.spec, self.topo, self.fabric, self.groups = spec, topo, fabric, groups
        self.workdir = workdir
        self.mpirun_err = workdir / "mpirun.err"  # with launcher: mpirun
        self.phase_fds = phase_fds or {}
        self.ranks: list[Rank] = []
        self.released_ns = 0
        self._following: list[Heard] = []  # rank 0's stdout and its timed ops (progress)
        # rank 0's iterations and ops heard so far, from its best source (progress)
        self.heard: tuple[list[lines.Iteration], list[lines.Op]] = ([], [])
        self.follower: Follower | None = None  # an MPI job's phase, from the shim's ops

    def launch(self) -> Programs:
        """Start every rank, held, each in its cgroup (or mpirun, held, in the first's)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.spec.launcher == "mpirun":
            return self._launch_mpirun()
        for r, host in enumerate(self.spec.ranks):
            ifname = self.fabric.nic(host).ifname
            env = rank_env(self.spec, self.topo, r, ifname)
            env[MARKER] = f"{self.fabric.registry.run_id}/{self.spec.name}-rank{r}"
            env[OPS_DIR] = str(self.workdir.resolve())
            fds: tuple[int, ...] = ()
            if host in self.phase_fds:
                env["LABKIT_PHASE_FD"] = str(self.phase_fds[host])
                fds = (self.phase_fds[host],)
            argv = rank_argv(self.spec, self.topo, r, ifname)
            out, err = self.workdir / f"rank{r}.out", self.workdir / f"rank{r}.err"
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = self.fabric.popen(
                    host, ["/bin/sh", "-c", HELD, f"{self.spec.name}-rank{r}", self.spec.cwd,
                           *argv], f"program {self.spec.name} rank {r}", self.groups[host],
                    stdin=subprocess.PIPE, stdout=o, stderr=e, env=env, pass_fds=fds)
            sched.run_ahead(sched.RANK_NICE, proc.pid)  # as labkit's own ranks; it waits
            self.ranks.append(Rank(r, host, argv, proc, self.groups[host], out, err))
        return self

    def _launch_mpirun(self) -> Programs:
        """mpirun, held, in the first rank's host and cgroup; the hosts' table for its
        launch agent and the hosts' session directories in a scratch directory the
        registry removes."""
        spec, first = self.spec, self.spec.ranks[0]
        # short (a PMIx socket's path in it must fit 108 bytes), recorded before it exists
        session = Path(tempfile.gettempdir()) / f"labkit-mpi-{secrets.token_hex(6)}"
        self.fabric.registry.add("session_dir", path=str(session))
        session.mkdir(mode=0o700)
        hosts = session / "hosts"
        # a node's /sys is its own (Mininet mounts one per node): the agent reaches the
        # cgroup through this process's root
        here = Path(f"/proc/{os.getpid()}/root")
        hosts.write_text("".join(
            f"{self.topo.host_ip(h)} {self.fabric.nodes[h].pid} "
            f"{here}{self.groups[h].path / 'cgroup.procs'} {session / h}\n"
            for h in spec.ranks))
        (session / first).mkdir()
        env = (job_env(spec) | mpirun_env(hosts, session / first)
               | {MARKER: f"{self.fabric.registry.run_id}/{spec.name}-mpirun",
                  OPS_DIR: str(self.workdir.resolve())})
        outdir = self.workdir.resolve()
        with open(self.workdir / "mpirun.out", "wb") as o, open(self.mpirun_err, "wb") as e:
            proc = self.fabric.popen(
                first, ["/bin/sh", "-c", HELD, f"{spec.name}-mpirun", spec.cwd,
                        *mpirun_argv(spec, self.topo, outdir)],
                f"mpirun of program {spec.name}", self.groups[first],
                stdin=subprocess.PIPE, stdout=o, stderr=e, env=env)
        sched.run_ahead(sched.RANK_NICE, proc.pid)  # its daemons and ranks inherit it
        argv = rank_argv(spec, self.topo, 0, "")
        for r, host in enumerate(spec.ranks):
            self.ranks.append(Rank(r, host, argv, proc, self.groups[host],
                                   outdir / f"rank{r}.out", outdir / f"rank{r}.err"))
        if spec.timing == "auto" and self.phase_fds:  # the shim's ops, the ranks' phase
            self.follower = Follower(outdir, {r: self.phase_fds[h] for r, h in
                                              enumerate(spec.ranks) if h in self.phase_fds})
            self.follower.start()
        return self

    def _processes(self) -> list[subprocess.Popen]:
        """Each process labkit started, once: a rank's each, or mpirun."""
        return list({id(r.proc): r.proc for r in self.ranks}.values())

    def _failure(self, rank: Rank, code: int) -> str:
        """Which rank failed, how, and the end of its stderr. Under mpirun: the rank Open
        MPI names (else the first that wrote to stderr) with the code it gives, and the
        end of mpirun's own stderr."""
        took = (time.monotonic_ns() - self.released_ns) / 1e9
        if self.spec.launcher != "mpirun":
            return (f"rank {rank.rank} of {self.spec.name} (on {rank.host}) exited with {code}"
                    f" after {took:.1f} s; its stderr ends:\n{rank.tail()}\n(all of it: "
                    f"{rank.err})")
        mpirun = (f"mpirun's stderr ends:\n{tail(self.mpirun_err)}\n(all of it: "
                  f"{self.mpirun_err})")
        said = "\n".join(_read(f) for f in (self.mpirun_err, *(r.err for r in self.ranks)))
        if (named := failed_rank(said)) and named[0] < len(self.ranks):
            rank, how = self.ranks[named[0]], "ended on a signal"
            if named[1] is not None:
                rank.exit, how = named[1], f"exited with {named[1]}"
        elif wrote := [r for r in self.ranks if _read(r.err).strip()]:
            rank, how = wrote[0], "failed"
        else:
            return f"mpirun of {self.spec.name} (on {rank.host}) exited with {code} after " \
                   f"{took:.1f} s; {mpirun}"
        return (f"rank {rank.rank} of {self.spec.name} (on {rank.host}) {how} after "
                f"{took:.1f} s (mpirun: {code}); its stderr ends:\n{rank.tail()}\n(all of it:"
                f" {rank.err})\n{mpirun}")

    def release(self, at_ns: int) -> None:
        """Let every rank start at ``at_ns`` (CLOCK_MONOTONIC), all within a few ms."""
        while (wait := at_ns - time.monotonic_ns()) > 0:
            time.sleep(min(wait / 1e9, 0.05))
        self.released_ns = time.monotonic_ns()
        for proc in self._processes():
            stdin = proc.stdin  # a pipe (start)
            try:
                if stdin is not None:
                    stdin.write(b"go\n")
                    stdin.close()
            except OSError:
                pass  # it is gone already: wait() reports it

    def progress(self) -> int:
        """Iterations (or, without iteration lines, ops) rank 0 reported so far: as it
        printed them, else as labkit's hook or shim timed them (the sources a run's
        summary takes, in that order); :attr:`heard` holds them."""
        if not self._following:
            first = self.ranks[0]
            self._following = [Heard(Tail(first.out)),
                               Heard(Tail(ops_file(self.workdir, first.rank)))]
        for source in self._following:
            source.look()
        own = next((s for s in self._following if s.iterations or s.ops), self._following[0])
        self.heard = own.iterations, own.ops
        return len(own.iterations) or len(own.ops)

    def waiting(self, duration_s: float | None,
                on_progress: Callable[[int], None] | None = None) -> Iterator[None]:
        """Wait for the program, one look at a time (each ``next`` looks once; :func:`wait_all`
        looks every :data:`POLL_S`), until every rank has exited, or ``duration_s`` after the
        release, or :data:`EXIT_GRACE_S` after rank 0 reported the entry's ``iterations``
        (then the ranks left are stopped: a job hung on its way out is done).
        ProgramError when a rank fails, the program is stuck (:class:`Stall`: the entry's
        ``stall_s``) or it outlives :data:`LIMIT_S`."""
        stop_at = self.released_ns + int((duration_s or LIMIT_S) * 1e9)
        shown, all_done_ns = -1, None
        stall = Stall(self.spec.stall_s or STALL_S)
        while True:
            for rank in self.ranks:
                if rank.exit is None and (code := rank.proc.poll()) is not None:
                    rank.exit = code
                    if code != 0:
                        self.stop()
                        raise ProgramError(self._failure(rank, code))
            done = self.progress()
            if on_progress and done != shown:
                on_progress(done)
                shown = done
            if all(r.exit is not None for r in self.ranks):
                return
            now = time.monotonic_ns()
            if stall.stuck(done, now) and all_done_ns is None and self.ranks[0].exit is None:
                self.stop()
                raise ProgramError(
                    f"{self.spec.name} is stuck: rank 0 reported nothing for "
                    f"{stall.silent_s(now):.0f} s after its op or iteration {done} (a rank "
                    "gone, or a link down that a rank needs?); its ranks were stopped. A job "
                    "that is this slow on purpose: give its entry a longer stall_s")
            if self.spec.iterations and done >= self.spec.iterations and all_done_ns is None:
                all_done_ns = now
            if all_done_ns and now - all_done_ns > EXIT_GRACE_S * 1e9:
                for rank in self.ranks:  # done, but hung on the way out: not a failure
                    rank.lingered = rank.proc.poll() is None
                self.stop()
                return
            if time.monotonic_ns() >= stop_at:
                self.stop()
                if duration_s is None:
                    raise ProgramError(f"{self.spec.name} was still running after "
                                       f"{LIMIT_S:.0f} s: stopped (give it duration_s, or "
                                       "the run a --duration)")
                return
            yield

    def stop(self) -> list[ProgramRankEnd]:
        """End every rank still running (SIGTERM, then the cgroup's kill after
        :data:`STOP_GRACE_S`), reap them; one row per rank: its host, argv, exit code,
        whether labkit stopped it and the CPU its cgroup used."""
        if self.follower:
            self.follower.stop()
            self.follower = None
        for source in self._following:
            source.tail.close()
        self._following = []
        running = [p for p in self._processes() if p.poll() is None]
        for rank in self.ranks:
            rank.stopped_by_labkit |= rank.proc in running
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in running:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                pass
        for rank in self.ranks:
            rank.cpu_s = rank.group.cpu_s()
            cgroups.kill(rank.group.path)  # stragglers and whatever the rank started
            if rank.proc.poll() is None:
                rank.proc.kill()
            rank.proc.wait()
            if rank.exit is None:
                rank.exit = rank.proc.returncode
            if rank.proc.stdin and not rank.proc.stdin.closed:
                rank.proc.stdin.close()
        return self.rows()

    def rows(self) -> list[ProgramRankEnd]:
        return [ProgramRankEnd(rank=r.rank, host=r.host, argv=tuple(r.argv), exit=r.exit,
                               stopped_by_labkit=r.stopped_by_labkit, lingered=r.lingered,
                               cpu_s=r.cpu_s) for r in self.ranks]

    def reported(self, hooked: bool = False) -> tuple[list[tuple[int, str, lines.Iteration]],
                                                    list[tuple[int, str, lines.Op]], int]:
        """Every rank's iterations and ops, as (rank, host, line), and the bad lines: as it
        printed them, or (``hooked``) as labkit's hook or shim timed them."""
        iterations, ops, bad = [], [], 0
        for rank in self.ranks:
            try:
                text = (ops_file(self.workdir, rank.rank) if hooked else rank.out
                        ).read_text(errors="replace")
            except OSError:
                continue
            its, found, wrong = lines.parse(text)
            iterations += [(rank.rank, rank.host, it) for it in its]
            ops += [(rank.rank, rank.host, op) for op in found]
            bad += wrong
        return iterations, ops, bad


def wait_all(programs: Sequence[tuple[Programs, float | None]],
             on_progress: Callable[[int], None] | None = None,
             on_look: Callable[[], None] | None = None) -> None:
    """Wait for several programs at once (each with its ``duration_s``:
    :meth:`Programs.waiting`), looking at each every :data:`POLL_S`; ``on_progress``
    follows the first one's, ``on_look`` is called after each look at them all."""
    looks = [p.waiting(d, on_progress if k == 0 else None)
             for k, (p, d) in enumerate(programs)]
    while looks:
        looks = [look for look in looks if next(look, _ENDED) is not _ENDED]
        if on_look:
            on_look()
        if looks:
            time.sleep(POLL_S)
