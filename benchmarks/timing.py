"""What timing an unmodified job costs it per op (issue 46): labkit's start-up hook on a
PyTorch collective and its PMPI shim on an MPI one, each against the same job without
them, side by side.

One rank, no fabric (the cost is the job's own CPU per call, not the network's): a loop
of small all_reduces through gloo on a group of one (its store on 127.0.0.1), and
through Open MPI with ``mpirun -np 1``. Each variant runs ROUNDS times, alternating; the
figure is the difference of the medians, in microseconds per op. Needs Debian's
python3-torch and Open MPI with mpi4py (make torch, make mpi); a variant whose
framework is missing is left out.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from labkit.traffic import programs

PYTHON = "/usr/bin/python3"
OPS = 2000
ROUNDS = 5
REPO = Path(__file__).resolve().parent.parent

# prints the mean ns per op of OPS all_reduces of 1 KiB
GLOO = f"""
import os, time, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], USE_LIBUV="0")
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(256)
for _ in range(100):
    dist.all_reduce(t)
t0 = time.perf_counter_ns()
for _ in range({OPS}):
    dist.all_reduce(t)
print((time.perf_counter_ns() - t0) / {OPS})
dist.destroy_process_group()
"""
MPI = f"""
import time, numpy as np
from mpi4py import MPI
a, b = np.ones(256, dtype=np.float32), np.empty(256, dtype=np.float32)
for _ in range(100):
    MPI.COMM_WORLD.Allreduce(a, b)
t0 = time.perf_counter_ns()
for _ in range({OPS}):
    MPI.COMM_WORLD.Allreduce(a, b)
print((time.perf_counter_ns() - t0) / {OPS})
"""


def _gloo(timed: bool, workdir: str, port: int) -> float:
    env = {**os.environ, "PORT": str(port), "PYTHONPATH": f"{programs.STARTUP}:{REPO}",
           "RANK": "0", "OMP_NUM_THREADS": "1"}
    if timed:
        env[programs.OPS_DIR] = workdir
    done = subprocess.run([PYTHON, "-c", GLOO], env=env, capture_output=True, text=True,
                          check=True, timeout=300)
    return float(done.stdout.split()[-1])


def _mpi(timed: bool, workdir: str) -> float:
    argv = [programs.MPIRUN, "--allow-run-as-root", "-np", "1", "--mca", "btl", "self"]
    if timed:
        argv += ["-x", f"LD_PRELOAD={programs.MPITIME}", "-x", f"{programs.OPS_DIR}={workdir}"]
    done = subprocess.run([*argv, PYTHON, "-c", MPI], capture_output=True, text=True,
                          check=True, timeout=300, env={**os.environ, "TMPDIR": workdir})
    return float(done.stdout.split()[-1])


def _side_by_side(measure) -> tuple[float, float]:
    """Median ns per op without and with the timing, alternating ROUNDS times."""
    plain, timed = [], []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as work:
            plain.append(measure(False, work))
        with tempfile.TemporaryDirectory() as work:
            timed.append(measure(True, work))
    return statistics.median(plain), statistics.median(timed)


def _records(what: str, plain: float, timed: float, goal_us: float) -> list[dict]:
    """An op's time without timing, and what the timing adds to it, in µs per op."""
    return [{"name": f"{what}_op_us", "value": plain / 1e3, "unit": "us/op", "goal": None},
            {"name": f"{what.split('_')[0]}_cost_us_per_op", "value": (timed - plain) / 1e3,
             "unit": "us/op", "goal": f"<= {goal_us:g}"}]


def run() -> list[dict]:
    records = []
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode == 0:
        port = 29000 + os.getpid() % 1000
        records += _records("hook_gloo", *_side_by_side(lambda t, w: _gloo(t, w, port)), 50)
    else:
        print("bench timing: no torch for /usr/bin/python3 (make torch): hook left out",
              file=sys.stderr)
    mpi_ok = shutil.which(programs.MPIRUN) and programs.MPITIME.is_file() and \
        subprocess.run([PYTHON, "-c", "import mpi4py"], capture_output=True).returncode == 0
    if mpi_ok:
        records += _records("shim_mpi", *_side_by_side(_mpi), 5)
    else:
        print("bench timing: no Open MPI with mpi4py (make mpi): shim left out",
              file=sys.stderr)
    return records


if __name__ == "__main__":
    for record in run():
        print(record)
