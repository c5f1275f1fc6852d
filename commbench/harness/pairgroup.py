"""A process group of two ranks of its own, for one link under test (commbench pairs).

Each pair rendezvouses on the pair store of its lower rank (a TCPStore that rank serves, see
harness/control.py), not on the run's process group, so a dead link or rank costs only the pairs
it is in: the other pairs of a round never wait for it, and nothing of the run's group is left
half broken. The pair's timeout is --timeout. gloo builds the pair with ProcessGroupGloo; NCCL
would build it the same way with ProcessGroupNCCL (a communicator of two, docs/PAIRS.md); only
gloo is tested here.

A rail (`pairs --per-rail`): the gloo device is bound to that interface, so the pair listens on
the interface's address and each end connects to its peer's address on the same interface; the
kernel routes the transfer out of that interface (each rail its own subnet).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist


class PairGroup:
    """Two ranks (index 0 = the lower rank) and the operations the timing loop and pairs need."""

    def __init__(self, store: dist.Store, gid: str, index: int, backend: str, timeout: float,
                 rail: str | None = None):
        prefix = dist.PrefixStore(f"pair/{gid}/", store)
        span = timedelta(seconds=timeout)
        if backend == "nccl":
            if rail is not None:  # NCCL picks its interfaces per process (NCCL_SOCKET_IFNAME), not per group
                raise ValueError("a rail binds a pair group through gloo; NCCL cannot bind one communicator")
            self.pg = dist.ProcessGroupNCCL(prefix, index, 2, dist.ProcessGroupNCCL.Options())
        elif rail is not None:
            self.pg = dist.ProcessGroupGloo(prefix, index, 2, rail_options(rail, span))
        else:
            self.pg = dist.ProcessGroupGloo(prefix, index, 2, span)
        self.index = index

    @property
    def peer(self) -> int:
        return 1 - self.index

    def send(self, tensor: torch.Tensor) -> None:
        self.pg.send([tensor], self.peer, 0).wait()

    def recv(self, tensor: torch.Tensor) -> None:
        self.pg.recv([tensor], self.peer, 0).wait()

    def both(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        """Send and receive at once (bidir)."""
        works = [self.pg.send([send], self.peer, 1), self.pg.recv([recv], self.peer, 1)]
        for work in works:
            work.wait()

    def max_(self, tensor: torch.Tensor) -> None:
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        self.pg.allreduce([tensor], opts).wait()

    def gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor), torch.empty_like(tensor)]
        self.pg.allgather([out], [tensor]).wait()
        return out

    def barrier(self) -> None:
        self.max_(torch.zeros(1))


def rail_options(rail: str, span: timedelta):
    """gloo options whose one device is bound to the interface `rail` (torch 2.13: `_Options`,
    `_devices`, `_timeout`; the public `Options` is the backend-neutral base without devices)."""
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(interface=rail)]
    opts._timeout = span
    return opts


class DistOps:
    """The same operations on a registered torch.distributed group (None: the default one)."""

    def __init__(self, group=None):
        self.group = group

    def max_(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)

    def gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(out, tensor, group=self.group)
        return out

    def barrier(self) -> None:
        dist.barrier(group=self.group)
