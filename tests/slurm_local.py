"""A single-node Slurm cluster on this machine, for tier-2 tests: Debian's munge and
slurm-wlm, configured in a directory of the test's own with this host as the controller and
the only node, started by the test and stopped after it by the PIDs it started.

Nothing outside that directory is read or changed: its own munge key (made with
``mungekey``), munged on its own socket, slurm.conf with its own state, spool, logs and
ports (free ones, on 127.0.0.1), and the clients (sbatch, squeue, srun) pointed at it with
``SLURM_CONF``. The node's CPUs and memory are what ``slurmd -C`` finds on the machine.
No accounting database: sacct does not answer (labkit's executor does not need it).
Measured on Debian 12's slurm-wlm 22.05 and munge 0.5.15, as root: the daemons start in
about 2 s and ``srun hostname`` answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.conftest import free_port

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "srun")
PARTITION = "labkit"


def missing() -> list[str]:
    """The programs this needs that are not installed."""
    return [p for p in DAEMONS if shutil.which(p) is None]


class LocalSlurm:
    """``with LocalSlurm(dir) as slurm:`` a running one-node cluster; ``slurm.env`` holds
    what a client needs (``SLURM_CONF``)."""

    def __init__(self, workdir: Path | None = None):
        # under /tmp by default: munged refuses a socket whose directories are not all
        # open to every user (pytest's tmp_path is under a 0700 directory)
        self.made = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="labkit-slurm-"))
        self.procs: list[subprocess.Popen] = []  # running daemons, in the order started
        self.started: list[int] = []  # every PID this started, kept after stop()
        self.node = ""
        self.conf = self.dir / "slurm.conf"
        self.env: dict[str, str] = {}

    def __enter__(self) -> LocalSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind, *_) -> None:
        self.stop()
        if self.made and kind is None:  # kept, with its logs, when something went wrong
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # munged wants its socket's directory open to all, and nothing else writable by them
        os.chmod(d, 0o755)
        os.chmod(d / "munge", 0o755)
        key = d / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True,
                           capture_output=True)
        sock = d / "munge" / "munge.socket"
        self._spawn("munged", ["munged", "--foreground", f"--socket={sock}",
                               f"--key-file={key}", f"--log-file={d / 'munge/munged.log'}",
                               f"--pid-file={d / 'munge/munged.pid'}",
                               f"--seed-file={d / 'munge/munged.seed'}"])
        self._until(sock.exists, 15, "munged did not create its socket")
        node_line = subprocess.run(["slurmd", "-C"], capture_output=True, text=True,
                                   check=True).stdout.splitlines()[0]
        self.node = node_line.split()[0].removeprefix("NodeName=")
        self.conf.write_text("\n".join([
            "ClusterName=labkittest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
            f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none",
            "MailProg=/bin/true", "KillWait=30",
            "MinJobAge=3600",  # squeue lists ended jobs for an hour (the test reads them)
            f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            ""]))
        self.env = {"SLURM_CONF": str(self.conf)}
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._until(lambda: self.node_state() == "idle", 60,
                    f"the node did not come up idle (slurmctld.log, slurmd.log in {d})")

    def node_state(self) -> str:
        out = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True,
                             text=True, env={**os.environ, **self.env})
        return out.stdout.strip() if out.returncode == 0 else ""

    def run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def final_states(self, job_ids: list[str], timeout: float = 60) -> list[str]:
        """``squeue``'s "<id> <state> <cpus>" lines once none of ``job_ids`` is pending,
        running or completing (a job's result can be in before its script has exited)."""
        lines: list[str] = []

        def settled() -> bool:
            nonlocal lines
            out = self.run(["squeue", "--noheader", "--states=all", "--format=%i %T %C"])
            lines = out.stdout.splitlines()
            return all(line.split()[1] not in ("PENDING", "RUNNING", "COMPLETING")
                       for line in lines if line.split()[0] in job_ids)
        self._until(settled, timeout, f"jobs {', '.join(job_ids)} did not end (squeue)")
        return lines

    def stop(self) -> None:
        """Stop the daemons this started, by their PIDs, the last started first."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self.procs.clear()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "w")  # the child keeps its own copy
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL))
        self.started.append(self.procs[-1].pid)
        log.close()

    def _until(self, ready, timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{why}" + (f"; {', '.join(dead)} exited" if dead else ""))
            time.sleep(0.5)
