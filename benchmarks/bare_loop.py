"""The loop one writes by hand to time a collective, as the reference commbench is held to.

    python benchmarks/bare_loop.py [--collective all_reduce] [--sizes 8,64K,1M,64M] [--iters 50]

It runs on 2 local gloo ranks and prints seconds per operation and busbw per size. Nothing here
comes from commbench's harness: buffers made with torch, warm-up, a barrier, perf_counter around
N back-to-back calls, the slowest rank's average. benchmarks/fidelity.py runs `bare_time` on the
same process group as commbench's own measurement, interleaved.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# torch 2.13 names; the *_tensor spellings are deprecated aliases there (and warn on every call).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def bare_time(collective: str, size_bytes: int, iters: int, warmup: int = 5) -> float:
    """Seconds per operation of `collective` at nccl-tests size `size_bytes` (float32; for
    all_gather the gathered output, for reduce_scatter the input), max over ranks of each rank's
    average over `iters` back-to-back calls."""
    world = dist.get_world_size()
    numel = size_bytes // 4
    if collective == "all_reduce":
        x = torch.ones(numel)
        for _ in range(warmup):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        elapsed = time.perf_counter() - t0
    elif collective == "all_gather":
        out, inp = torch.empty(numel // world * world), torch.ones(numel // world)
        for _ in range(warmup):
            _all_gather(out, inp)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            _all_gather(out, inp)
        elapsed = time.perf_counter() - t0
    elif collective == "reduce_scatter":
        out, inp = torch.empty(numel // world), torch.ones(numel // world * world)
        for _ in range(warmup):
            _reduce_scatter(out, inp)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            _reduce_scatter(out, inp)
        elapsed = time.perf_counter() - t0
    else:
        raise ValueError(f"bare loop has no {collective!r}: one of {', '.join(COLLECTIVES)}")
    slowest = torch.tensor([elapsed / iters], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def busbw_factor(collective: str, world: int) -> float:
    return 2 * (world - 1) / world if collective == "all_reduce" else (world - 1) / world


def _rank(rank: int, world: int, port: int, collective: str, sizes: list[int], iters: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for size in sizes:
            t = bare_time(collective, size, iters)
            if rank == 0:
                busbw = size / t / 1e9 * busbw_factor(collective, world)
                print(f"{collective:>14s} {size:>12d} B  {t * 1e6:12.1f} us  busbw {busbw:8.4f} GB/s", flush=True)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from commbench.core.units import parse_size_list

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collective", choices=COLLECTIVES, default="all_reduce")
    ap.add_argument("--sizes", default="8,64K,1M,64M")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args(argv)
    mp.start_processes(_rank, args=(a.nproc, _free_port(), a.collective, parse_size_list(a.sizes), a.iters),
                       nprocs=a.nproc, start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
