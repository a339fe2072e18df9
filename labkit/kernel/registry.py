"""The run registry: an on-disk record of every kernel object and process a run creates.

Each entry is appended to the run's registry, ``<run id>.jsonl``, as its object is
created, one JSON line each, so a run killed at any moment leaves a registry that
:meth:`Registry.teardown` (``labkit clean``) can follow (a last line a kill cut short is
left out). What teardown does per kind:

* ``process`` — a process labkit started (Mininet node shells, traffic agents),
  identified by pid *and* kernel start time so a recycled pid is never touched:
  sent its stop signal, then SIGKILL;
* ``pin_dir`` — a directory of BPF pins under ``/sys/fs/bpf/labkit``: unpinned;
* ``session_dir`` — a directory of a run's other programs (an MPI job's runtime's session
  directories, in /tmp: its sockets live there; a routed fabric's FRR files and
  pathspaces): removed, after the processes;
* ``cgroup`` — a cgroup v2 directory labkit made (:mod:`labkit.kernel.cgroups`): every process
  in a rank's cgroup (``first``) is killed before anything else (``cgroup.kill``: a
  user's program and whatever it started); after the processes' own stops, what is left
  in any recorded cgroup (a fabric's: whatever its processes started, however they
  changed their environment) is killed, and the directories removed, deepest first;
  labkit's top cgroup (``shared``: every run's parent) is only removed once empty, never
  with another run's cgroups in it;
* ``netns`` (a node's namespace, by inode), ``veth``, ``qdisc``, ``tc_filter`` —
  objects inside a node's namespace: they vanish with its shell, and teardown
  checks that no process still holds the namespace; one that a process labkit did not
  start holds (``nsenter``) is emptied of the node's ports instead and left to it
  (:attr:`Registry.held` names it);
* ``bpf_prog`` (by id), ``tracing_link`` — held by labkit's file descriptors,
  tc filters and pins: teardown checks that each program is gone;
* ``struct_ops`` — a registered struct_ops (lk_dctcp, a TCP congestion control), by map
  id and name: unregistered after the processes (their namespaces take the sockets
  that use it); teardown checks that no congestion control of that name is left.

A run's scratch files (compiled programs, a sweep's agent files) are in its
:func:`work_dir`, ``/run/labkit/work/<run id>``, removed as the run ends; those of a
killed run are removed by ``labkit clean``.

Nothing is ever removed by name pattern. Registries live in
``/run/labkit/registry`` (a tmpfs: they go away at reboot, as the objects do).

One run at a time: :class:`RunLock` makes a second ``labkit run`` exit with a
message naming the run in progress.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = Path(os.environ.get("LABKIT_STATE_DIR", "/run/labkit"))
# in the environment of every program a scenario's command entry starts, and inherited by
# whatever it starts in turn: "<run id>/<entry>". Teardown stops what carries its run's id.
MARKER = "LABKIT_COMMAND"
REGISTRY_DIR = STATE_DIR / "registry"
WORK_DIR = STATE_DIR / "work"
# how long `labkit clean` waits for a killed run's unregistered struct_ops to be freed: its
# sockets still closing hold it (lk_dctcp's namespaces give up on them within a second)
STRUCT_OPS_WAIT_S = 5.0


@contextmanager
def work_dir(run_id: str) -> Iterator[Path]:
    """The scratch directory of run ``run_id``, removed when the run ends (``labkit
    clean`` removes one a killed run left: see :func:`leftover_work_dirs`)."""
    WORK_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = WORK_DIR / run_id
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def proc_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def marked(run_id: str | None = None) -> list[int]:
    """Processes whose environment carries :data:`MARKER`, of run ``run_id`` (None: of any
    run): what command entries started, and their children."""
    prefix = f"{MARKER}={run_id}/" if run_id else f"{MARKER}="
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(prefix.encode()) for v in env):
            found.append(int(proc.name))
    return found


def stop_marked(run_id: str, grace_s: float = 3.0) -> list[int]:
    """SIGTERM every process of run ``run_id``'s command entries, SIGKILL what is left
    after ``grace_s``; the pids found."""
    pids = marked(run_id)
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := marked(run_id)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def pidfd(pid: int, start_time: int) -> int | None:
    """A pidfd of the process recorded as ``pid`` started at ``start_time``, or None when
    it is gone: what is signalled through it can never be a process that took its pid."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if not alive(pid, start_time):  # checked once open: the fd is of the process checked
        os.close(fd)
        return None
    return fd


def stop_processes(entries: list[dict], grace_s: float = 3.0) -> list[dict]:
    """Send every recorded process still alive its stop signal, SIGKILL those that have
    not exited ``grace_s`` later, and wait (a little) for those to go: all through
    pidfds, which say when a process exits. Returns the entries of those that were alive."""
    fds = {fd: e for e in entries if (fd := pidfd(e["pid"], e["start_time"])) is not None}
    try:
        for fd, e in fds.items():
            with suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, e.get("signal", signal.SIGTERM))
        waiting = _wait_exits(set(fds), grace_s)
        for fd in waiting:
            with suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        _wait_exits(waiting, 1.0)
    finally:
        for fd in fds:
            os.close(fd)
    return list(fds.values())


def _wait_exits(fds: set[int], timeout_s: float) -> set[int]:
    """Wait until the processes of these pidfds exit, or ``timeout_s``; those still there.
    (poll, not select: a long-lived process may hold descriptors above 1023.)"""
    poller, left = select.poll(), set(fds)
    for fd in left:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    while left and (wait := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(wait * 1e3):
            left.discard(fd)
            poller.unregister(fd)
    return left


def alive(pid: int, start_time: int) -> bool:
    """True while ``pid`` is the process recorded (not a recycled pid, not a zombie)."""
    if proc_start_time(pid) != start_time:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        return False
    return True


def read_entries(path: Path) -> list[dict]:
    """The entries of the registry at ``path``, one a line (a last line without its newline,
    which a kill cut short, is left out); or those of a registry an older labkit saved
    whole (``<run id>.json``)."""
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)["entries"]
    return [json.loads(line) for line in text.split("\n")[:-1]]


class Registry:
    """The record of one run's objects, kept in ``REGISTRY_DIR/<run_id>.jsonl``."""

    def __init__(self, run_id: str, path: Path | None = None):
        self.run_id = run_id
        self.path = path or REGISTRY_DIR / f"{run_id}.jsonl"
        self.entries: list[dict] = []
        if self.path.exists():
            self.entries = read_entries(self.path)
            if self.path.suffix == ".jsonl":  # appended to: a line a kill cut short goes
                with open(self.path, "r+b") as f:
                    f.truncate(f.read().rfind(b"\n") + 1)
        # a node's namespace that a process labkit did not start still held at teardown,
        # emptied of the node's ports: its inode -> what to tell the user
        self.held: dict[int, str] = {}
        # records come from more than one thread while a fabric is built (its nodes'
        # configuration, the features' BPF objects loading beside it)
        self._recording = threading.Lock()

    def _record(self, entry: dict) -> None:
        """Append ``entry`` to the file unless it is there already (the shared top cgroup,
        met by each of a run's hosts). One line, one write: a policy's fabric records
        about 150 objects, and saving the whole file at each (as before) took 1-1.6 ms
        a record while the fabric was being built."""
        with self._recording:
            if entry in self.entries:
                return
            self.entries.append(entry)
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            line = (json.dumps(entry) + "\n").encode()
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                while line:
                    line = line[os.write(fd, line):]
            finally:
                os.close(fd)

    def add_process(self, pid: int, what: str, stop_signal: int = signal.SIGTERM) -> None:
        """Record a process; teardown sends it ``stop_signal``, then SIGKILL after 3 s."""
        start = proc_start_time(pid)
        if start is not None:
            self._record({"kind": "process", "pid": pid, "start_time": start, "what": what,
                          "signal": int(stop_signal)})

    def add_pin_dir(self, path: Path) -> None:
        self.add("pin_dir", path=str(path))

    def add(self, kind: str, **fields) -> None:
        """Record one object (see the module docstring for the kinds), once."""
        self._record({"kind": kind, **fields})

    def teardown(self) -> list[str]:
        """Remove everything recorded, newest first, and once more what the first pass
        left; returns what was removed. Signals wait until it is done
        (:mod:`labkit.kernel.interrupts`). What is still there after the second pass stays
        recorded, registry and all, and :class:`TeardownIncomplete` names it."""
        from labkit.kernel import interrupts

        with interrupts.deferred("tearing the fabric down"):
            removed = self._remove()
            if left := self._left():
                removed += self._remove() + self._empty_held()
                left = self._left()
            if left:
                raise TeardownIncomplete(self.run_id, left)
            self.entries = []
            with suppress(FileNotFoundError):
                self.path.unlink()
        return removed

    def _remove(self) -> list[str]:
        """One pass over the record: what it removed."""
        from labkit.kernel import bpf, cgroups

        removed = []
        shared = self._shared_cgroups()
        groups = [Path(e["path"]) for e in reversed(self.entries)
                  if e["kind"] == "cgroup" and Path(e["path"]) not in shared]
        first = [Path(e["path"]) for e in reversed(self.entries)
                 if e["kind"] == "cgroup" and e.get("first")]
        for path in first:  # a program's ranks, and all they started
            if path.exists() and (pids := cgroups.kill(path)):
                removed.append(f"killed {len(pids)} process(es) in cgroup {path}")
        stopped = stop_processes([e for e in reversed(self.entries) if e["kind"] == "process"])
        removed += [f"stopped {e['what']} (pid {e['pid']})" for e in stopped]
        removed += [f"stopped pid {pid}, started by a command entry"
                    for pid in stop_marked(self.run_id)]
        for path in groups:  # whatever escaped the stops above goes with its cgroup
            if path.exists() and not cgroups.remove(path):
                removed.append(f"removed cgroup {path}")
        for path in shared:  # labkit's top cgroup, once no run is left in it
            with suppress(OSError):
                path.rmdir()  # fails while another run's cgroups are in it
        for e in self.entries:
            if e["kind"] == "struct_ops" and bpf.unregister_struct_ops(e["id"], e["name"]):
                removed.append(f"unregistered struct_ops {e['name']} (map {e['id']})")
        for e in self.entries:
            if e["kind"] == "pin_dir" and Path(e["path"]).exists():
                bpf.unpin_dir(Path(e["path"]))
                removed.append(f"unpinned {e['path']}")
            elif e["kind"] == "session_dir" and Path(e["path"]).exists():
                shutil.rmtree(e["path"], ignore_errors=True)
                removed.append(f"removed {e['path']}")
        return removed

    def _left(self) -> list[str]:
        """What the record names that is still there."""
        out = [f"{e['what']} (pid {e['pid']})" for e in self.entries
               if e["kind"] == "process" and alive(e["pid"], e["start_time"])]
        out += [f"pid {pid}, started by a command entry" for pid in marked(self.run_id)]
        shared = self._shared_cgroups()
        out += [f"{e['kind'].replace('_', ' ')} {e['path']}" for e in self.entries
                if e["kind"] in ("cgroup", "pin_dir", "session_dir")
                and Path(e["path"]) not in shared and Path(e["path"]).exists()]
        return out + self._survivors()

    def _shared_cgroups(self) -> set[Path]:
        """The recorded cgroups that are labkit's top cgroup, every run's parent (marked
        ``shared`` since each run records it; before that, recorded by the run that made
        it, unmarked)."""
        from labkit.kernel import cgroups

        root = cgroups.cgroup2_root()
        top = root / cgroups.TOP if root else None
        return {Path(e["path"]) for e in self.entries if e["kind"] == "cgroup"
                and (e.get("shared") or Path(e["path"]) == top)}

    def _empty_held(self) -> list[str]:
        """The ports labkit made in each of its namespaces that a process it did not start
        still holds (``nsenter``, a shell's child), removed inside it: their qdiscs,
        filters and programs go with them, and the process keeps its (now empty)
        namespace, named in :attr:`held`. Never the process: it is not labkit's."""
        from labkit.kernel.netns import Netns

        removed = []
        inodes = {e["inode"]: e["node"] for e in self.entries if e["kind"] == "netns"}
        ends = [end.split("/", 1) for e in self.entries if e["kind"] == "veth"
                for end in e["ends"]]
        ours = {e["pid"] for e in self.entries if e["kind"] == "process"
                and alive(e["pid"], e["start_time"])} | set(marked(self.run_id))
        for inode, pid in _holders(inodes).items():
            node = inodes[inode]
            if pid in ours:  # labkit's, still dying: named as left, not as the user's
                continue
            try:
                ns = Netns(pid, node)
            except OSError:
                continue  # it has just ended
            try:
                if ns.inode != inode:
                    continue
                gone = ns.run(_delete_links, [ifname for n, ifname in ends if n == node])
            finally:
                ns.close()
            removed += [f"removed {node}/{ifname}, in a namespace pid {pid} holds"
                        for ifname in gone]
            self.held[inode] = (f"{node}'s namespace is still held by pid {pid} "
                               f"({_command(pid)}), which labkit did not start: its ports "
                               "were removed, and it goes when that process ends")
        return removed

    def _survivors(self) -> list[str]:
        """Recorded namespaces still held by a process (but those emptied and left to it,
        :attr:`held`), recorded programs still loaded."""
        from labkit.kernel import bpf

        out = []
        inodes = {e["inode"]: e["node"] for e in self.entries if e["kind"] == "netns"
                  and e["inode"] not in self.held}
        deadline = time.monotonic() + 2  # programs go with tc filters once namespaces die
        while inodes and time.monotonic() < deadline and _holders(inodes):
            time.sleep(0.05)
        for inode, pid in _holders(inodes).items():
            out.append(f"namespace of {inodes[inode]} (held by pid {pid}, not labkit's)")
        for e in self.entries:
            if e["kind"] == "struct_ops" and e["name"] in _congestion_controls():
                out.append(f"struct_ops {e['name']} (map {e['id']}), still registered")
            if e["kind"] != "bpf_prog":
                continue
            while bpf.prog_loaded(e["id"], e["name"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if bpf.prog_loaded(e["id"], e["name"]):
                out.append(f"BPF program {e['name']} (id {e['id']})")
        return out


def _delete_links(names: list[str]) -> list[str]:
    """Delete these links of the calling thread's namespace (a veth's peer goes with it);
    the names of those it deleted."""
    from pyroute2 import IPRoute

    gone = []
    with IPRoute() as ipr:
        for name in names:
            if index := ipr.link_lookup(ifname=name):
                with suppress(Exception):  # gone meanwhile, with its peer
                    ipr.link("del", index=index[0])
                    gone.append(name)
    return gone


def _command(pid: int) -> str:
    """A process's command line, for a message ("?" once it has gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip() or "?"
    except OSError:
        return "?"


def _congestion_controls() -> list[str]:
    """The TCP congestion controls registered on this machine."""
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def _holders(inodes: dict[int, str]) -> dict[int, int]:
    """Which of these network namespace inodes a live process still holds (inode -> pid)."""
    found: dict[int, int] = {}
    if not inodes:
        return found
    for ns in Path("/proc").glob("[0-9]*/ns/net"):
        with suppress(OSError):
            inode = ns.stat().st_ino
            if inode in inodes:
                found.setdefault(inode, int(ns.parent.parent.name))
    return found


def leftover_registries() -> list[Registry]:
    """Registries of runs that are not in progress (their owner was killed)."""
    running = RunLock.holder()
    out = []
    # and those an older labkit saved whole, <run id>.json
    for path in sorted([*REGISTRY_DIR.glob("*.jsonl"), *REGISTRY_DIR.glob("*.json")]):
        run_id = path.stem
        if running is None or running.run_id != run_id:
            out.append(Registry(run_id, path))
    return out


def leftover_work_dirs() -> list[Path]:
    """Scratch directories of runs that are not in progress (their owner was killed)."""
    running = RunLock.holder()
    return [p for p in sorted(WORK_DIR.glob("*"))
            if running is None or running.run_id != p.name]


LEFTOVERS = "earlier run(s) left objects behind"  # how leftovers_line begins, after a count


def wait_freed(struct_ops: list[dict]) -> list[str]:
    """Wait up to STRUCT_OPS_WAIT_S for these recorded struct_ops maps (a killed run's,
    unregistered) to be freed; what is still held after, as words."""
    from labkit.kernel import bpf

    deadline = time.monotonic() + STRUCT_OPS_WAIT_S
    while (held := [e for e in struct_ops if bpf.map_exists(e["id"])]) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"struct_ops {e['name']} (map {e['id']}) is unregistered, but sockets still "
            "closing hold it: the kernel frees it when they have" for e in held]


def leftovers_line() -> str | None:
    """One line about runs that left objects or scratch files behind (killed), or None:
    for ``labkit run``, ``shell`` and ``doctor``."""
    try:
        left = [r.run_id for r in leftover_registries()]
        left += [p.name for p in leftover_work_dirs() if p.name not in left]
    except OSError:  # not root: the registries are root's
        return None
    if not left:
        return None
    return (f"{len(left)} {LEFTOVERS} "
            f"({', '.join(left)}): `sudo labkit clean` removes them")


@dataclass
class LockInfo:
    pid: int
    run_id: str


class RunLockedError(RuntimeError):
    pass


class TeardownIncomplete(RuntimeError):
    """Objects a run recorded that two teardowns could not remove (still recorded)."""

    def __init__(self, run_id: str, left: list[str]):
        self.run_id, self.left = run_id, left
        super().__init__(f"run {run_id} could not remove, after two tries: {'; '.join(left)}."
                         " They stay in its registry: `sudo labkit clean` tries again once "
                         "whatever holds them has gone")


CLEANING = "labkit-clean"  # the lock's holder while `labkit clean` removes leftovers


class RunLock:
    """An exclusive lock for one ``labkit run`` at a time on this machine (``labkit clean``
    holds it too, as :data:`CLEANING`, so it never removes a run that is starting).

    Re-entrant on the thread that holds it: a calibration or a local batch holds the
    machine for its whole length, and each of its runs takes the lock again inside; the
    lock names the innermost run while it lasts."""

    path = STATE_DIR / "run.lock"
    _fd = -1
    _owner: int | None = None  # the thread that holds it
    _held: list[str] = []  # run ids, outermost first

    def __init__(self, run_id: str):
        self.run_id = run_id

    @classmethod
    def holder(cls) -> LockInfo | None:
        try:
            fd = os.open(cls.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            text = os.read(fd, 256).decode().split("\n")[0].split()
            return LockInfo(int(text[0]), text[1]) if len(text) == 2 else LockInfo(0, "?")
        finally:
            os.close(fd)

    def __enter__(self) -> RunLock:
        me = threading.get_ident()
        if RunLock._held and RunLock._owner == me:
            RunLock._held.append(self.run_id)
            self._name(self.run_id)
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = self.holder()
            os.close(fd)
            who = ("`labkit clean`" if info and info.run_id == CLEANING else
                   f"run {info.run_id}" if info else "another run")
            who += f" (pid {info.pid})" if info else ""
            raise RunLockedError(
                f"{who} is in progress; labkit runs one experiment at a time on a machine. "
                "Wait for it to finish, or stop it with Ctrl-C (then `labkit clean`)."
            ) from None
        RunLock._fd, RunLock._owner, RunLock._held = fd, me, [self.run_id]
        self._name(self.run_id)
        return self

    def rename(self, run_id: str) -> None:
        """Name the run that holds the lock (its id, chosen once the lock is held)."""
        self.run_id = RunLock._held[-1] = run_id
        self._name(run_id)

    @staticmethod
    def _name(run_id: str) -> None:
        """Write the holder, then cut what is left of the last one: a reader sees a whole
        first line at every moment."""
        text = f"{os.getpid()} {run_id}\n".encode()
        os.pwrite(RunLock._fd, text, 0)
        os.ftruncate(RunLock._fd, len(text))

    def __exit__(self, *exc) -> None:
        RunLock._held.pop()
        if RunLock._held:
            self._name(RunLock._held[-1])
            return
        os.ftruncate(RunLock._fd, 0)
        fcntl.flock(RunLock._fd, fcntl.LOCK_UN)
        os.close(RunLock._fd)
        RunLock._fd, RunLock._owner = -1, None
