"""``labkit serve``: runs for users without root, one at a time, through a Unix socket.

A machine runs one experiment at a time, as root. The service (root) owns that slot for a
class: it listens on a Unix socket (no network port) that only root and one group may
open, takes each request in turn, checks its scenario as the API does, runs it with
:func:`labkit.runs.runner.run` and copies the recorded run, as the requester, into the
directory the requester named: the run is theirs. A request is one JSON line (a scenario
*document*, the policies, the duration, where to put the run); the answer is JSON lines:
its place in the queue, the run's progress, then where the run is or what went wrong.

What the service runs is labkit's own traffic only: a scenario that would run code of the
requester's (commands, programs, their own traffic kinds, classifier or controllers) is
refused, since it would run as root. For those, the requester needs root (``sudo``).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import queue
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.model import inputs, paths

if TYPE_CHECKING:
    from labkit.runs.runner import Progress

SOCKET = paths.current().serve  # LABKIT_SERVE, else /run/labkit/serve.sock
GROUP = "labkit"
MAX_REQUEST = 1 << 20  # bytes of one request line


class Refused(RuntimeError):
    """The service would not (or could not) run a request: why, and what to do."""


@dataclass(frozen=True)
class Peer:
    """Who is on the other end of a connection (the kernel's ``SO_PEERCRED``)."""

    pid: int
    uid: int
    gid: int

    @classmethod
    def of(cls, conn: socket.socket) -> Peer:
        fmt = "3i"
        return cls(*struct.unpack(fmt, conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                       struct.calcsize(fmt))))

    @property
    def name(self) -> str:
        with suppress(KeyError):
            return pwd.getpwuid(self.uid).pw_name
        return str(self.uid)

    def groups(self) -> list[int]:
        try:
            return os.getgrouplist(pwd.getpwuid(self.uid).pw_name, self.gid)
        except KeyError:
            return [self.gid]


def admitted(peer: Peer, group: grp.struct_group) -> bool:
    """Whether ``peer`` may ask for runs: root, or a member of ``group``."""
    return peer.uid == 0 or group.gr_gid in peer.groups()


def user_code(sc) -> str | None:
    """What in scenario ``sc`` would run code of the requester's (None: nothing)."""
    for what, there in (("commands", sc.commands), ("its own traffic kinds", sc.kinds),
                        ("a classifier of its own (lanes.program)", sc.classifier),
                        ("programs of its own among its jobs", sc.programs),
                        ("controllers of its own", sc.control.controllers)):
        if there:
            return what
    return None


@dataclass
class Request:
    """One run asked for, as checked: who asked, the scenario, where the run goes."""

    conn: socket.socket
    peer: Peer
    scenario: object  # labkit.model.scenario_spec.Scenario
    policies: list[str] | None
    duration: float | None
    out: Path

    def tell(self, **doc) -> None:
        """A line to the requester (gone: the run goes on and is still copied)."""
        with suppress(OSError):
            self.conn.sendall((json.dumps(doc) + "\n").encode())


def _read_request(conn: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise Refused(f"a request is one JSON line of at most {MAX_REQUEST} bytes")
    try:
        doc = inputs.json_document(inputs.decode(data, "request"), "request")
    except inputs.InputError as exc:
        raise Refused(f"a request is one JSON line: {exc.reason}") from None
    if not isinstance(doc, dict):
        raise Refused("a request is a JSON object")
    return doc


def check(doc: dict, peer: Peer) -> tuple[object, list[str] | None, float | None, Path]:
    """The request's scenario, policies, duration and output folder, checked as the API
    checks them (:class:`~labkit.model.scenario.ScenarioError` names the key), or
    :class:`Refused`."""
    from labkit.model import scenario

    name = str(doc.get("name") or "<request>")
    sc = scenario.parse(doc.get("scenario"), name)
    if what := user_code(sc):
        raise Refused(f"{name}: the scenario runs {what}, which would run as root here; "
                      "the service runs labkit's own traffic only: run it with sudo")
    policies = doc.get("policies")
    if policies is not None:
        if not (isinstance(policies, list) and all(isinstance(p, str) for p in policies)):
            raise Refused("policies: a list of policy names")
        scenario.check_policies(policies, name, sc=sc)
    duration = doc.get("duration")
    if duration is not None:
        if not isinstance(duration, int | float) or isinstance(duration, bool):
            raise Refused("duration: seconds, a number")
        if problem := scenario.LIMITS["duration_s"].problem(duration):
            raise Refused(f"duration: {problem} (seconds)")
    out = Path(str(doc.get("out") or ""))
    if not out.is_absolute():
        raise Refused("out: the folder for the run, an absolute path")
    return sc, policies, duration, out


def _copy_as(peer: Peer, src: Path, dst: Path) -> None:
    """Copy the run ``src`` to ``dst`` as the requester: what they may not write, they
    do not get; nothing there is overwritten."""
    for path in (src, *src.rglob("*")):  # theirs to read
        os.lchown(path, peer.uid, peer.gid)
    # sh and cp, which anyone may run (this interpreter may sit where they cannot reach);
    # mkdir fails on a folder that is there
    done = subprocess.run(
        ["/bin/sh", "-c", 'mkdir -- "$1" && cp -R -- "$0"/. "$1"/', str(src), str(dst)],
        user=peer.uid, group=peer.gid, extra_groups=peer.groups(), capture_output=True,
        text=True, cwd="/")
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise Refused(f"the run was recorded but could not be copied to {dst} as "
                      f"{peer.name}: {last}")


def serve_one(req: Request, staging: Path) -> str:
    """Run ``req`` and answer it; the answer, for the service's log."""
    from labkit.kernel.registry import RunLockedError
    from labkit.model.scenario import ScenarioError
    from labkit.runs import runner

    def progress(p: runner.Progress) -> None:
        req.tell(progress=asdict(p))

    work = Path(tempfile.mkdtemp(dir=staging))
    os.chmod(work, 0o711)
    try:
        done = runner.run(req.scenario, req.policies, duration=req.duration,  # type: ignore[arg-type]
                          out=work / "run", on_progress=progress)
        target = req.out / done.manifest.run_id
        _copy_as(req.peer, done.path, target)
        req.tell(done=str(target))
        return f"recorded in {target}"
    except (ScenarioError, RunLockedError, runner.NotReady, runner.RunFailed, Refused) as exc:
        req.tell(error=str(exc))
        return f"not run: {exc}"
    except Exception as exc:  # a run that failed in a way of its own: say it, serve on
        req.tell(error=f"{type(exc).__name__}: {exc}")
        return f"failed: {type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with suppress(OSError):
            req.conn.close()


class Service:
    """The socket (a thread accepts and checks requests) and the queue of runs."""

    def __init__(self, path: Path = SOCKET, group: str = GROUP,
                 log: Callable[[str], None] = print):
        try:
            self.group = grp.getgrnam(group)
        except KeyError:
            raise Refused(f"group {group!r} does not exist: create it (groupadd {group}; "
                          f"usermod -aG {group} STUDENT) or name one with --group") from None
        self.path, self.log = Path(path), log
        self.queue: queue.Queue[Request] = queue.Queue()
        self.sock: socket.socket | None = None
        self.staging = Path()  # where runs are recorded before they are copied: start()

    def start(self) -> Service:
        from labkit.runs import runner

        if problem := runner.not_ready():
            raise Refused(problem)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_socket():
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(self.path))
                raise Refused(f"a service is already listening on {self.path}")
            except OSError:
                self.path.unlink()  # a socket no one listens on: a service that died
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chown(self.path, 0, self.group.gr_gid)
        os.chmod(self.path, 0o660)
        self.staging = Path(tempfile.mkdtemp(prefix="labkit-serve-"))
        os.chmod(self.staging, 0o711)  # a requester reads only their own run, by name
        sock.listen(16)
        self.sock = sock
        threading.Thread(target=self._accept, name="labkit-serve-accept", daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self.sock is not None
        with suppress(OSError):  # closed: the service is stopping
            while True:
                conn, _ = self.sock.accept()
                threading.Thread(target=self._admit, args=(conn,), daemon=True).start()

    def _admit(self, conn: socket.socket) -> None:
        from labkit.model.scenario import ScenarioError

        peer = Peer.of(conn)
        try:
            if not admitted(peer, self.group):
                raise Refused(f"{peer.name} is not in group {self.group.gr_name}, whose "
                              "members may ask this service for runs")
            sc, policies, duration, out = check(_read_request(conn), peer)
        except (Refused, ScenarioError) as exc:
            self.log(f"{peer.name}: refused: {exc}")
            with suppress(OSError):
                conn.sendall((json.dumps({"error": str(exc)}) + "\n").encode())
                conn.close()
            return
        req = Request(conn, peer, sc, policies, duration, out)
        req.tell(queued=self.queue.qsize())
        self.queue.put(req)

    def serve_forever(self) -> None:
        """Run the requests one after the other, on this (the main) thread: a signal that
        stops the service stops a run as it stops ``labkit run``, torn down first."""
        while True:
            try:
                req = self.queue.get(timeout=0.5)  # wakes to run signal handlers
            except queue.Empty:
                continue
            self.log(f"{req.peer.name}: running {req.scenario.name}")  # type: ignore[attr-defined]
            self.log(f"{req.peer.name}: {serve_one(req, self.staging)}")

    def close(self) -> None:
        """Stop taking requests; tell those still queued."""
        if self.sock:
            self.sock.close()
            with suppress(FileNotFoundError):
                self.path.unlink()
        while not self.queue.empty():
            req = self.queue.get_nowait()
            req.tell(error="the labkit service stopped before this run started")
            with suppress(OSError):
                req.conn.close()
        if self.staging != Path():
            shutil.rmtree(self.staging, ignore_errors=True)


def available(path: Path = SOCKET) -> bool:
    """Whether a service socket is there (whether it admits us, it says when asked); not
    when its folder is closed to us (root's /run/labkit before a service made it open)."""
    try:
        return Path(path).is_socket()
    except PermissionError:
        return False


def request(scenario: dict, name: str, policies: Sequence[str] | None = None,
            duration: float | None = None, out: Path | None = None,
            on_progress: Callable[[Progress], None] | None = None,
            path: Path = SOCKET) -> Path:
    """Ask the service at ``path`` to run the scenario document ``scenario``; the recorded
    run's folder, once it is copied into ``out`` (default: where this user's runs go).
    :class:`Refused` says why not."""
    from labkit.runs import runner

    out = Path(out or paths.current().runs).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Refused(f"{out}: {exc.strerror}: name a folder of yours for the runs "
                      "(LABKIT_RUNS_DIR)") from None
    doc = {"scenario": scenario, "name": name, "duration": duration, "out": str(out),
           "policies": list(policies) if policies is not None else None}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            conn.connect(str(path))
        except PermissionError:
            raise Refused(f"the labkit service at {path} admits root and its group only: "
                          "ask your instructor to add you to it") from None
        except OSError as exc:
            raise Refused(f"no labkit service at {path} ({exc.strerror}): start one as "
                          "root with `labkit serve`") from None
        conn.sendall((json.dumps(doc) + "\n").encode())
        for line in _lines(conn):
            if "progress" in line and on_progress:
                on_progress(runner.Progress(**line["progress"]))
            elif "queued" in line and line["queued"] and on_progress is None:
                print(f"queued behind {line['queued']} run(s)", flush=True)
            elif "error" in line:
                raise Refused(line["error"])
            elif "done" in line:
                return Path(line["done"])
        raise Refused(f"the service at {path} closed the connection without an answer")
    finally:
        conn.close()


def _lines(conn: socket.socket) -> Iterator[dict]:
    buf = b""
    while chunk := conn.recv(65536):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)
