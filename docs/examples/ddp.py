"""A tiny model trained with DistributedDataParallel on gloo, on the CPU: labkit's
example of your own training job as a scenario's workload (topologies/pytorch-ddp.yaml).

labkit starts one process per rank with torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR, GLOO_SOCKET_IFNAME, ...), so this is an ordinary DDP script; the two lines
marked "labkit" time each step and each gradient all_reduce for labkit's report. Without
them labkit still measures the job, from its traffic. The model's compute on a CPU is
kept tiny: the time a GPU would spend in forward and backward is a sleep of --compute-ms
(as labkit's own jobs time their compute), and the real forward and backward run on a
batch of one sample, so the CPU stays free for the emulation (the gradients' size is the
model's, whatever the batch).

    python ddp.py --steps 40          # under labkit: kind: program, run: "{python} ddp.py ..."
"""

import argparse
import gc
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from labkit.torch import Steps  # labkit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--compute-ms", type=float, default=100.0,
                        help="a GPU's forward and backward time per step, emulated")
    parser.add_argument("--width", type=int, default=1024,
                        help="hidden units: 2 x 256 x width parameters (2 MiB of float32 "
                             "gradients at 1024)")
    parser.add_argument("--batch", type=int, default=1,
                        help="samples per step; each costs the CPU (Debian's reference "
                             "BLAS: ~4 ms per step at 1, ~50 ms at 32, per rank)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    model = torch.nn.Sequential(torch.nn.Linear(256, args.width, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 256, bias=False))
    ddp = DistributedDataParallel(model)
    steps = Steps()
    steps.watch(ddp)  # labkit
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        with steps.step():  # labkit
            x = torch.randn(args.batch, 256, generator=generator)
            loss = (ddp(x) - x).pow(2).mean()
            time.sleep(args.compute_ms / 1e3)  # the GPU's forward and backward
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
    if dist.get_rank() == 0:
        print(f"rank 0: loss {loss.item():.4f} after {args.steps} steps", file=sys.stderr)
    steps.close()
    # the model first, then the group: torch 1.13's gloo group joins its threads while it
    # holds the GIL, which one of them may still need for the comm hook's last callback
    del ddp, optimizer
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
