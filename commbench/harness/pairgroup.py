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
from typing import Protocol, cast

import torch
import torch.distributed as dist


class PairBackend(Protocol):
    """The calls PairGroup makes on its ProcessGroupGloo or ProcessGroupNCCL: pybind methods of both
    at run time, which torch's stubs (torch/_C/_distributed_c10d.pyi, torch 2.13) leave out of Backend."""

    def send(self, tensors: list[torch.Tensor], dst_rank: int, tag: int, /) -> dist.Work: ...

    def recv(self, tensors: list[torch.Tensor], src_rank: int, tag: int, /) -> dist.Work: ...

    def allreduce(self, tensors: list[torch.Tensor], opts: dist.AllreduceOptions, /) -> dist.Work: ...

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], /) -> dist.Work: ...


class PairGroup:
    """Two ranks (index 0 = the lower rank) and the operations the timing loop and pairs need."""

    def __init__(self, store: dist.Store, gid: str, index: int, backend: str, timeout: float,
                 rail: str | None = None):
        prefix = dist.PrefixStore(f"pair/{gid}/", store)
        span = timedelta(seconds=timeout)
        pg: object  # a ProcessGroupNCCL or ProcessGroupGloo (torch._C), typed below
        if backend == "nccl":
            if rail is not None:  # NCCL picks its interfaces per process (NCCL_SOCKET_IFNAME), not per group
                raise ValueError("a rail binds a pair group through gloo; NCCL cannot bind one communicator")
            pg = dist.ProcessGroupNCCL(prefix, index, 2, dist.ProcessGroupNCCL.Options())
        elif rail is not None:
            pg = rail_gloo(prefix, index, rail, span)
        else:
            pg = dist.ProcessGroupGloo(prefix, index, 2, span)
        # The one place torch's stubs are told what its backends do (PairBackend's docstring).
        self.pg = cast(PairBackend, pg)
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
        opts.reduceOp = dist.ReduceOp(dist.ReduceOp.MAX)  # the stubs type MAX as RedOpType, not a ReduceOp
        self.pg.allreduce([tensor], opts).wait()

    def gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor), torch.empty_like(tensor)]
        self.pg.allgather([out], [tensor]).wait()
        return out

    def barrier(self) -> None:
        self.max_(torch.zeros(1))


class _GlooOptions(Protocol):
    """torch 2.13's gloo options with devices (ProcessGroupGloo._Options at run time)."""

    _devices: list[dist.ProcessGroupGloo.Device]
    _timeout: timedelta


class _GlooWithDevices(Protocol):
    """dist.ProcessGroupGloo as rail_gloo uses it at run time (torch 2.13): `_Options` and a
    constructor that takes them, both missing from the stubs (whose `Options` is, at run time, the
    backend-neutral base without devices, and whose constructor takes only a timeout)."""

    def _Options(self) -> _GlooOptions: ...

    def create_device(self, hostname: str = "", interface: str = "") -> dist.ProcessGroupGloo.Device: ...

    def __call__(self, store: dist.Store, rank: int, size: int, options: _GlooOptions, /) -> PairBackend: ...


def rail_gloo(store: dist.Store, index: int, rail: str, span: timedelta) -> PairBackend:
    """A gloo pair whose one device is bound to the interface `rail` (torch 2.13: `_Options`,
    `_devices`, `_timeout`; the public `Options` is the backend-neutral base without devices)."""
    gloo = cast(_GlooWithDevices, dist.ProcessGroupGloo)  # the stubs lack these (_GlooWithDevices)
    opts = gloo._Options()
    opts._devices = [gloo.create_device(interface=rail)]
    opts._timeout = span
    return gloo(store, index, 2, opts)


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
