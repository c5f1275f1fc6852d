"""The collectives, bound to torch: each entry of the vocabulary (core/vocab.py) with its torch
call (blocking, for the timing loop; started, for the workloads that keep several in flight: zero,
buckets, replay) and what every rank must hold afterwards (for the #wrong check). The one torch
binding: a new collective is one more entry in the vocabulary plus its functions here; no workload
branches on a collective's name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from collections.abc import Callable

import torch
import torch.distributed as dist

from commbench.core import vocab
from commbench.core.vocab import Layout
from commbench.harness.dtypes import torch_op


@dataclass
class Buffers:
    send: torch.Tensor
    recv: torch.Tensor
    # all_to_all's uneven shares per peer (a recorded job's, workloads/replay.py); None: even chunks
    send_splits: list[int] | None = None
    recv_splits: list[int] | None = None


@dataclass(frozen=True)
class CallArgs:
    rank: int
    world: int
    root: int
    op: str | None
    group: dist.ProcessGroup | None = None  # None: the default group
    async_op: bool = False  # a started call (Collective.start) returns the work to wait on

    def reduce_op(self) -> dist.ReduceOp:
        """The op as torch's ReduceOp: a reducing collective always carries one (the run's --op)."""
        if self.op is None:
            raise ValueError("a reducing collective was bound without an op")
        return torch_op(self.op)



# ---- the torch calls: each returns a zero-argument callable that runs one blocking op ----


def _bind_all_reduce(b: Buffers, a: CallArgs) -> Callable[[], None]:
    op = a.reduce_op()
    return lambda: dist.all_reduce(b.recv, op=op, group=a.group)


# torch 2.13 renamed the flat-tensor calls; older releases only have the *_tensor names.
all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _bind_all_gather(b: Buffers, a: CallArgs) -> Callable[[], None]:
    return lambda: all_gather_flat(b.recv, b.send, group=a.group)


def _bind_reduce_scatter(b: Buffers, a: CallArgs) -> Callable[[], None]:
    op = a.reduce_op()
    return lambda: reduce_scatter_flat(b.recv, b.send, op=op, group=a.group)


def _bind_all_to_all(b: Buffers, a: CallArgs) -> Callable[[], None]:
    return lambda: dist.all_to_all_single(b.recv, b.send, group=a.group)


def _bind_broadcast(b: Buffers, a: CallArgs) -> Callable[[], None]:
    return lambda: dist.broadcast(b.recv, src=a.root, group=a.group)


def _bind_reduce(b: Buffers, a: CallArgs) -> Callable[[], None]:
    op = a.reduce_op()
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


# ---- the same calls started, for workloads that keep several in flight (zero, buckets, replay):
# each returns a zero-argument callable that issues the op (async with CallArgs.async_op) and
# returns its work, or None when it ran synchronously ----

Started = Callable[[], "dist.Work | None"]


def _start_all_reduce(b: Buffers, a: CallArgs) -> Started:
    op = a.reduce_op()
    return lambda: dist.all_reduce(b.recv, op=op, group=a.group, async_op=a.async_op)


def _start_all_gather(b: Buffers, a: CallArgs) -> Started:
    return lambda: all_gather_flat(b.recv, b.send, group=a.group, async_op=a.async_op)


def _start_reduce_scatter(b: Buffers, a: CallArgs) -> Started:
    op = a.reduce_op()
    return lambda: reduce_scatter_flat(b.recv, b.send, op=op, group=a.group, async_op=a.async_op)


def _start_all_to_all(b: Buffers, a: CallArgs) -> Started:
    return lambda: dist.all_to_all_single(b.recv, b.send, output_split_sizes=b.recv_splits,
                                          input_split_sizes=b.send_splits, group=a.group, async_op=a.async_op)


def _start_broadcast(b: Buffers, a: CallArgs) -> Started:
    return lambda: dist.broadcast(b.recv, src=a.root, group=a.group, async_op=a.async_op)


def _start_reduce(b: Buffers, a: CallArgs) -> Started:
    op = a.reduce_op()
    return lambda: dist.reduce(b.recv, dst=a.root, op=op, group=a.group, async_op=a.async_op)


@dataclass(frozen=True, kw_only=True)
class Collective(vocab.CollectiveSpec):
    """A vocabulary entry with its torch call and expected output."""

    bind: Callable[[Buffers, CallArgs], Callable[[], None]]
    expected: Callable[..., torch.Tensor | None]
    # The call started (see above); None for sendrecv, a ring of pairs rather than one call (a
    # recorded job's sends and receives are ops of their own).
    start: Callable[[Buffers, CallArgs], Started] | None = None
    uneven: bool = False  # its start takes per-peer split sizes (torch's all_to_all_single)

    def buffers(self, whole: int, chunk: int, make: Callable[[int], torch.Tensor]) -> Buffers:
        """A rank's buffers for one call: each side `whole` elements or one rank's `chunk`, as the
        layout has them (all_gather sends a chunk and receives the whole), made by `make(numel)`;
        one tensor for both sides where torch works in place only (all_reduce, broadcast, reduce)."""
        send_whole, recv_whole = self.whole_sides()
        recv = make(whole if recv_whole else chunk)
        if not self.supports("out"):
            return Buffers(recv, recv)
        return Buffers(make(whole if send_whole else chunk), recv)


_BIND = {"all_reduce": _bind_all_reduce, "reduce_scatter": _bind_reduce_scatter, "all_gather": _bind_all_gather,
         "all_to_all": _bind_all_to_all, "broadcast": _bind_broadcast, "reduce": _bind_reduce,
         "sendrecv": _bind_sendrecv}
_EXPECTED = {"all_reduce": _exp_all_reduce, "reduce_scatter": _exp_reduce_scatter, "all_gather": _exp_all_gather,
             "all_to_all": _exp_all_to_all, "broadcast": _exp_broadcast, "reduce": _exp_reduce,
             "sendrecv": _exp_sendrecv}
_START = {"all_reduce": _start_all_reduce, "reduce_scatter": _start_reduce_scatter, "all_gather": _start_all_gather,
          "all_to_all": _start_all_to_all, "broadcast": _start_broadcast, "reduce": _start_reduce}
_UNEVEN = {"all_to_all"}


def _bound(spec: vocab.CollectiveSpec) -> Collective:
    facts = {f.name: getattr(spec, f.name) for f in fields(vocab.CollectiveSpec)}
    return Collective(**facts, bind=_BIND[spec.name], expected=_EXPECTED[spec.name], start=_START.get(spec.name),
                      uneven=spec.name in _UNEVEN)


COLLECTIVES: tuple[Collective, ...] = tuple(_bound(spec) for spec in vocab.COLLECTIVES)
BY_NAME = {c.name: c for c in COLLECTIVES}


def resolve(names: str) -> list[Collective]:
    """'allreduce,all-gather' or 'all' -> the bound entries, in table order, no duplicates."""
    return [BY_NAME[spec.name] for spec in vocab.resolve(names)]
