"""A training loop that knows nothing of labkit and keeps its own clock.

Compute (a sleep, as a GPU's would be), then one collective of ``--size`` bytes, again and
again, over PyTorch's gloo (``--backend gloo``, torchrun's environment), mpi4py (``--backend
mpi``, started by mpirun) or plain TCP sockets (``--backend sockets``: every rank sends its
bytes to rank 0, which sends the sum back, as a parameter server would; standard library
only); with ``--ddp``, a small model trained with DistributedDataParallel instead (its
gradients are ``--size`` bytes, in DDP's buckets).
It imports nothing of labkit and prints no line of labkit's: labkit times it from outside
(docs/programs.md). Its own times go to stderr, one line per op and per iteration, in its
own words, so that labkit's figures can be checked against the job's clock:

    own op 3 331.204 ms
    own iteration 3 482.911 ms

An iteration runs from the end of one step's communication to the end of the next's.
"""

import argparse
import sys
import time


def size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def gloo(args, say) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    tensor = torch.ones(args.size // 4)
    last = time.monotonic()
    for i in range(args.steps):
        time.sleep(args.compute_ms / 1e3)
        t0 = time.monotonic()
        dist.all_reduce(tensor)
        t1 = time.monotonic()
        say(i, t0, t1, last)
        last = t1
    dist.destroy_process_group()


def ddp(args, say) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    width = int((args.size // 4 // 2) ** 0.5)  # two square layers of float32
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.Linear(width, width)),
        bucket_cap_mb=args.size / 2 / 2**20)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(1, width)
    last = time.monotonic()
    for i in range(args.steps):
        optimizer.zero_grad()
        time.sleep(args.compute_ms / 2e3)
        loss = model(batch).sum()
        time.sleep(args.compute_ms / 2e3)
        t0 = time.monotonic()
        loss.backward()  # waits for the buckets' all_reduce
        t1 = time.monotonic()
        optimizer.step()
        say(i, t0, t1, last)
        last = t1
    del model  # torch 1.13: before the group goes (docs/programs.md)
    dist.destroy_process_group()


def mpi(args, say) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    data = np.ones(args.size // 4, dtype=np.float32)
    out = np.empty_like(data)
    last = time.monotonic()
    for i in range(args.steps):
        time.sleep(args.compute_ms / 1e3)
        t0 = time.monotonic()
        comm.Allreduce(data, out, op=MPI.SUM)
        t1 = time.monotonic()
        say(i, t0, t1, last)
        last = t1


def sockets(args, say) -> None:
    import os
    import socket

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    payload = bytes(args.size)

    def receive(sock) -> None:
        left = args.size
        while left:
            left -= len(sock.recv(min(left, 1 << 20)))

    if rank == 0:
        server = socket.create_server(address)
        peers = [server.accept()[0] for _ in range(world - 1)]
    else:
        while True:
            try:
                peers = [socket.create_connection(address, timeout=60)]
                break
            except OSError:
                time.sleep(0.2)  # rank 0 not listening yet
    for peer in peers:
        peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    last = time.monotonic()
    for i in range(args.steps):
        time.sleep(args.compute_ms / 1e3)
        t0 = time.monotonic()
        if rank == 0:
            for peer in peers:
                receive(peer)
            for peer in peers:
                peer.sendall(payload)
        else:
            peers[0].sendall(payload)
            receive(peers[0])
        t1 = time.monotonic()
        say(i, t0, t1, last)
        last = t1
    for peer in peers:
        peer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("gloo", "mpi", "sockets"), default="gloo")
    parser.add_argument("--ddp", action="store_true", help="DDP's buckets (gloo only)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--size", type=size, default=1 << 20, help="bytes per step")
    parser.add_argument("--compute-ms", type=float, default=150.0)
    args = parser.parse_args()

    def say(i: int, t0: float, t1: float, last: float) -> None:
        print(f"own op {i} {(t1 - t0) * 1e3:.3f} ms", file=sys.stderr)
        print(f"own iteration {i} {(t1 - last) * 1e3:.3f} ms", file=sys.stderr, flush=True)

    if args.backend == "mpi":
        mpi(args, say)
    elif args.backend == "sockets":
        sockets(args, say)
    elif args.ddp:
        ddp(args, say)
    else:
        gloo(args, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
