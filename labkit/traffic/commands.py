"""Users' own programs as traffic: a scenario's ``kind: command`` entries, run for real.

Each entry's ``serve`` program (if any) starts as the fabric comes up, so it listens
before the traffic starts; its ``run`` program starts with the storage traffic. Both
run in their host's namespace with the scenario's ``{host}`` references expanded to
addresses, are recorded in the run registry (a killed run's leftovers go with
``labkit clean``), and at the end get SIGTERM, then SIGKILL after
:data:`STOP_GRACE_S`, and are reaped; so is every process they started (a shell loop's
children), found by the run's mark in their environment (``registry.MARKER``). Their
stdout and stderr are kept as
``<name>.out`` / ``<name>.err`` (``<name>.serve.out`` / ``.serve.err``) in the
policy's agent directory of the run.

labkit does not look inside these programs: their packets are counted by the
classifier and the probes like any other traffic.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labkit.kernel.fabric import Fabric
from labkit.kernel.registry import MARKER, stop_marked
from labkit.model.scenario import HOST_REF, CommandSpec, Scenario, ScenarioError
from labkit.model.topo import Topology
from labkit.model.traffic.results import CommandEnd

STOP_GRACE_S = 3.0


def check_installed(sc: Scenario) -> None:
    """Raise ScenarioError unless every command entry's programs are installed here (a
    check of this machine, not of the file: run before a run, not when parsing)."""
    for cmd in sc.commands:
        for role, argv in (("run", cmd.run), ("serve.run", cmd.serve)):
            if argv and shutil.which(argv[0]) is None:
                raise ScenarioError(sc.path, f"{cmd.key}.{role}",
                                    f"program {argv[0]!r} is not installed on this machine "
                                    f"(install it, e.g. apt-get install {Path(argv[0]).name})")


def expand_hosts(argv: tuple[str, ...], address: Callable[[str], str]) -> list[str]:
    """``argv`` with every {host} replaced by ``address(host)``."""
    return [HOST_REF.sub(lambda m: address(m.group(1)), arg) for arg in argv]


@dataclass
class Started:
    spec: CommandSpec
    role: str  # "run" or "serve"
    host: str
    argv: list[str]  # as started: {host} references expanded
    proc: subprocess.Popen
    stopped_by_labkit: bool = False


class Commands:
    """The command entries of one policy's run."""

    def __init__(self, specs: tuple[CommandSpec, ...], topo: Topology, fabric: Fabric,
                 workdir: Path):
        self.specs, self.topo, self.fabric, self.workdir = specs, topo, fabric, workdir
        self.started: list[Started] = []

    def _start(self, spec: CommandSpec, role: str) -> None:
        if role == "run":
            host, given = spec.host, spec.run
        elif spec.serve_host is None:
            raise ValueError(f"command {spec.name}: nowhere to serve from (no serve_host)")
        else:
            host, given = spec.serve_host, spec.serve
        stem = spec.name if role == "run" else f"{spec.name}.serve"
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = expand_hosts(given, self.topo.host_ip)
        with open(self.workdir / f"{stem}.out", "wb") as out, \
                open(self.workdir / f"{stem}.err", "wb") as err:
            proc = self.fabric.popen(host, argv, f"command {stem}", stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, env=self._env(stem))
        self.started.append(Started(spec, role, host, argv, proc))

    def _env(self, stem: str) -> dict[str, str]:
        """The program's environment: ours, plus LABKIT_COMMAND naming the run and entry
        (so a leak check can find a program that outlived its run)."""
        return {**os.environ, MARKER: f"{self.fabric.registry.run_id}/{stem}"}

    def serve(self) -> Commands:
        for spec in self.specs:
            if spec.serve:
                self._start(spec, "serve")
        return self

    def start(self) -> None:
        for spec in self.specs:
            self._start(spec, "run")

    def stop(self) -> list[CommandEnd]:
        """End every program still running (clients first), reap all; one row each:
        name, role, host, argv, exit code and whether labkit had to stop it."""
        for s in sorted(self.started, key=lambda s: s.role != "run"):
            if s.proc.poll() is None:
                s.stopped_by_labkit = True
                s.proc.terminate()
                try:
                    s.proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    s.proc.kill()
                    s.proc.wait()
        stop_marked(self.fabric.registry.run_id, STOP_GRACE_S)  # what they left running
        rows = [CommandEnd(name=s.spec.name, role=s.role, host=s.host, argv=tuple(s.argv),
                           exit=s.proc.returncode, stopped_by_labkit=s.stopped_by_labkit)
                for s in self.started]
        self.started.clear()
        return rows
