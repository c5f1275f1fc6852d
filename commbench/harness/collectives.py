"""The collectives, as one table.

Each entry says how many elements each rank sends and receives for a requested byte size
(nccl-tests' getCollByteCount, including its rounding), the bus-bandwidth factor (nccl-tests'
getBw), which placements torch can express, how to call it, and what every rank must hold
afterwards (for the #wrong check). A new collective is one more entry; the runner never
branches on a collective's name.

Sizes follow nccl-tests: S, the size printed and stored, is the larger of the send and receive
buffers of one rank (the total gathered output for all_gather, the total input for
reduce_scatter, the whole send buffer for all_to_all), and algbw = S / t for every collective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from commbench.harness.dtypes import DType, torch_op
from commbench.core.errors import BadInput

# nccl-tests rounds per-rank chunks of the gather/scatter family down to a multiple of this
# many elements (all_gather.cu, reduce_scatter.cu, alltoall.cu: #define ALIGN 4).
ALIGN = 4


@dataclass(frozen=True)
class Layout:
    """Element counts of one point on one rank."""

    send_numel: int
    recv_numel: int
    count: int  # the "count" column of nccl-tests (elements per rank chunk)
    # Where the send and receive views start inside the single in-place buffer.
    send_inplace_offset: int = 0
    recv_inplace_offset: int = 0

    def size_bytes(self, itemsize: int) -> int:
        return max(self.send_numel, self.recv_numel) * itemsize


@dataclass
class Buffers:
    send: torch.Tensor
    recv: torch.Tensor


@dataclass(frozen=True)
class CallArgs:
    rank: int
    world: int
    root: int
    op: str | None
    group: object = None  # the process group (None: the default one)


def _full(count: int, world: int, rank: int) -> Layout:
    return Layout(count, count, count)


def _gather_family(count: int, world: int, rank: int) -> Layout:
    base = (count // (ALIGN * world)) * ALIGN
    return Layout(base, base * world, base, send_inplace_offset=rank * base)


def _scatter_family(count: int, world: int, rank: int) -> Layout:
    base = (count // (ALIGN * world)) * ALIGN
    return Layout(base * world, base, base, recv_inplace_offset=rank * base)


def _alltoall(count: int, world: int, rank: int) -> Layout:
    base = (count // (ALIGN * world)) * ALIGN
    return Layout(base * world, base * world, base)


# ---- the torch calls: each returns a zero-argument callable that runs one blocking op ----


def _bind_all_reduce(b: Buffers, a: CallArgs) -> Callable[[], None]:
    op = torch_op(a.op)
    return lambda: dist.all_reduce(b.recv, op=op, group=a.group)


# torch 2.13 renamed the flat-tensor calls; older releases only have the *_tensor names.
all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _bind_all_gather(b: Buffers, a: CallArgs) -> Callable[[], None]:
    return lambda: all_gather_flat(b.recv, b.send, group=a.group)


def _bind_reduce_scatter(b: Buffers, a: CallArgs) -> Callable[[], None]:
    op = torch_op(a.op)
    return lambda: reduce_scatter_flat(b.recv, b.send, op=op, group=a.group)


def _bind_all_to_all(b: Buffers, a: CallArgs) -> Callable[[], None]:
    return lambda: dist.all_to_all_single(b.recv, b.send, group=a.group)


def _bind_broadcast(b: Buffers, a: CallArgs) -> Callable[[], None]:
    return lambda: dist.broadcast(b.recv, src=a.root, group=a.group)


def _bind_reduce(b: Buffers, a: CallArgs) -> Callable[[], None]:
    op = torch_op(a.op)
    return lambda: dist.reduce(b.recv, dst=a.root, op=op, group=a.group)


def _bind_sendrecv(b: Buffers, a: CallArgs) -> Callable[[], None]:
    nxt, prv = (a.rank + 1) % a.world, (a.rank - 1) % a.world

    def ring() -> None:
        ops = [dist.P2POp(dist.isend, b.send, nxt, group=a.group), dist.P2POp(dist.irecv, b.recv, prv, group=a.group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return ring


# ---- what each rank must hold afterwards; `inputs(r, numel)` is rank r's input ----

Inputs = Callable[[int, int], torch.Tensor]
# Folds one tensor per rank (made on demand, so memory stays flat in the world size).
Reducer = Callable[[Callable[[int], torch.Tensor]], torch.Tensor]


def _exp_all_reduce(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    return reduce(lambda r: inputs(r, lay.send_numel))


def _exp_all_gather(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    return torch.cat([inputs(r, lay.send_numel) for r in range(a.world)])


def _exp_reduce_scatter(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    full = reduce(lambda r: inputs(r, lay.send_numel))
    return full[a.rank * lay.recv_numel : (a.rank + 1) * lay.recv_numel]


def _exp_all_to_all(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    c = lay.count
    return torch.cat([inputs(r, lay.send_numel)[a.rank * c : (a.rank + 1) * c] for r in range(a.world)])


def _exp_broadcast(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    return inputs(a.root, lay.send_numel)


def _exp_reduce(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    # Only the root's output is defined, as in nccl-tests.
    if a.rank != a.root:
        return None
    return reduce(lambda r: inputs(r, lay.send_numel))


def _exp_sendrecv(lay: Layout, a: CallArgs, inputs: Inputs, reduce: Reducer):
    return inputs((a.rank - 1) % a.world, lay.send_numel)


@dataclass(frozen=True)
class Collective:
    name: str  # canonical, nccl-tests' name without _perf
    aliases: tuple[str, ...]
    layout: Callable[[int, int, int], Layout]  # (count, world, rank) -> Layout
    busbw_factor: Callable[[int], float]  # world -> busbw / algbw
    bind: Callable[[Buffers, CallArgs], Callable[[], None]]
    expected: Callable[..., torch.Tensor | None]
    reduces: bool = False  # takes --op
    rooted: bool = False  # takes --root
    # Placements torch can express: torch's all_reduce, broadcast and reduce work in place only.
    placements: tuple[str, ...] = ("out", "in")
    # Every rank leaves when the last one has entered (each needs data from all): a late rank then
    # spends less time inside, which is what the arrival skew column reads. Not so for a root
    # that only sends or only receives, or a ring of pairs.
    exits_together: bool = True

    def supports(self, placement: str) -> bool:
        return placement in self.placements


def _ring_factor(world: int) -> float:
    return (world - 1) / world


COLLECTIVES: tuple[Collective, ...] = (
    Collective("all_reduce", ("allreduce",), _full, lambda n: 2 * (n - 1) / n,
               _bind_all_reduce, _exp_all_reduce, reduces=True, placements=("in",)),
    Collective("reduce_scatter", ("reducescatter",), _scatter_family, _ring_factor,
               _bind_reduce_scatter, _exp_reduce_scatter, reduces=True),
    Collective("all_gather", ("allgather",), _gather_family, _ring_factor,
               _bind_all_gather, _exp_all_gather),
    Collective("all_to_all", ("alltoall", "a2a"), _alltoall, _ring_factor,
               _bind_all_to_all, _exp_all_to_all, placements=("out",)),
    Collective("broadcast", ("bcast",), _full, lambda n: 1.0,
               _bind_broadcast, _exp_broadcast, rooted=True, placements=("in",), exits_together=False),
    Collective("reduce", (), _full, lambda n: 1.0,
               _bind_reduce, _exp_reduce, reduces=True, rooted=True, placements=("in",),
               exits_together=False),
    Collective("sendrecv", ("send_recv", "p2p", "ring"), _full, lambda n: 1.0,
               _bind_sendrecv, _exp_sendrecv, placements=("out",), exits_together=False),
)

BY_NAME = {c.name: c for c in COLLECTIVES}


def _key(text: str) -> str:
    return text.strip().lower().replace("-", "").replace("_", "").removesuffix("perf")


def resolve(names: str) -> list[Collective]:
    """'allreduce,all-gather' or 'all' -> the table entries, in table order, no duplicates."""
    wanted = [n for n in names.split(",") if n.strip()]
    if not wanted:
        raise BadInput("--collective is empty: name one, e.g. --collective allreduce, or 'all'")
    picked: list[Collective] = []
    for name in wanted:
        if _key(name) == "all":
            picked.extend(COLLECTIVES)
            continue
        match = [c for c in COLLECTIVES if _key(name) in {_key(c.name), *(_key(a) for a in c.aliases)}]
        if not match:
            choices = ", ".join(c.name for c in COLLECTIVES)
            raise BadInput(f"unknown collective {name!r}: use one of {choices}, or all")
        picked.append(match[0])
    return [c for c in COLLECTIVES if c in picked]


def busbw(collective: Collective, algbw: float, world: int) -> float:
    return algbw * collective.busbw_factor(world)
