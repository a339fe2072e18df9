"""An All-Reduce loop in plain torch.distributed (gloo, CPU): compute (a sleep, as a
GPU's would be), then one all_reduce, again and again. The same shape as labkit's own
ring in topologies/bottleneck.yaml, so the two can be compared on one fabric.

    python allreduce.py --steps 40 --size 2MiB            # times reported to labkit
    python allreduce.py --steps 40 --size 2MiB --silent   # no labkit at all: labkit
                                                          # measures its traffic instead
    python allreduce.py --steps 40 --busy                 # compute on the CPU, not a sleep:
                                                          # a CPU quota slows it (a straggler)
"""

import argparse
import sys
import time

import torch
import torch.distributed as dist

from labkit.torch import Steps


def size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "K": 1 << 10, "M": 1 << 20}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def busy(seconds: float) -> None:
    """Keep one CPU busy for ``seconds`` of its own time: a CPU quota stretches it."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=size, default=2 << 20, help="bytes per all_reduce")
    parser.add_argument("--compute-ms", type=float, default=100.0)
    parser.add_argument("--busy", action="store_true",
                        help="compute by keeping the CPU busy for --compute-ms, not sleeping")
    parser.add_argument("--silent", action="store_true",
                        help="leave labkit.torch out: report nothing, announce nothing")
    parser.add_argument("--fail-at", type=int, default=None,
                        help="exit with an error at this step (rank 1 only)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    tensor = torch.ones(args.size // 4)
    steps = None if args.silent else Steps()
    compute = busy if args.busy else time.sleep
    for i in range(args.steps):
        if i == args.fail_at and dist.get_rank() == 1:
            raise SystemExit(f"allreduce.py: failing at step {i}, as asked")
        if steps is None:
            compute(args.compute_ms / 1e3)
            dist.all_reduce(tensor)
            continue
        with steps.step():
            compute(args.compute_ms / 1e3)
            with steps.comm("all_reduce", args.size):
                dist.all_reduce(tensor)
    if steps:
        steps.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
