"""An All-Reduce loop over MPI (mpi4py, Open MPI's TCP transport): compute (a sleep, as a
GPU's would be), then one Allreduce of float32, again and again. The shape of
allreduce.py and of labkit's own ring, for a job whose ranks mpirun starts
(``launcher: mpirun``; topologies/mpi-allreduce.yaml).

    mpirun -np 8 python3 allreduce_mpi.py --steps 40 --size 2MiB   # times reported to labkit
"""

import argparse
import sys
import time
from array import array

from mpi4py import MPI

from labkit.torch import Steps  # the line protocol; imports torch only for DDP's hook


def size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "K": 1 << 10, "M": 1 << 20}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=size, default=2 << 20, help="bytes per Allreduce")
    parser.add_argument("--compute-ms", type=float, default=100.0)
    parser.add_argument("--fail-at", type=int, default=None,
                        help="exit with an error at this step (rank 1 only)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    mine = array("f", [float(comm.Get_rank())]) * (args.size // 4)
    total = array("f", bytes(len(mine) * 4))
    expected = sum(range(comm.Get_size()))
    steps = Steps()
    for i in range(args.steps):
        if i == args.fail_at and comm.Get_rank() == 1:
            print(f"allreduce_mpi.py: failing at step {i}, as asked", file=sys.stderr, flush=True)
            comm.Abort(3)
        with steps.step():
            time.sleep(args.compute_ms / 1e3)
            with steps.comm("all_reduce", args.size):
                comm.Allreduce([mine, MPI.FLOAT], [total, MPI.FLOAT], op=MPI.SUM)
        if total[0] != expected or total[-1] != expected:
            raise SystemExit(f"allreduce_mpi.py: step {i} summed to {total[0]}, not {expected}")
    steps.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
