"""Buffers, rank-dependent input patterns and the #wrong check (as nccl-tests does it).

Inputs are small integers that depend on the rank and the element index, so every dtype holds
them exactly and a result from the wrong rank or the wrong offset is caught. The check runs
after the timed loop, on freshly filled buffers, never inside it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from commbench.core.vocab import Layout
from commbench.harness.collectives import Buffers, CallArgs, Collective
from commbench.harness.dtypes import DType


def input_pattern(rank: int, numel: int, dtype: DType, op: str | None, device) -> torch.Tensor:
    """1 + (i + 3 rank) % 5 (for prod: 1 + (i + rank) % 2, products of 1s and 2s stay exact).

    Built as one period repeated: an int64 modulo over every element took 0.4 s per 64 MiB, and
    the sweep builds a pattern per rank for each fill and each check (a third of a default run)."""
    period, step = (2, 1) if op == "prod" else (5, 3)
    one = (1 + (torch.arange(period, dtype=torch.int64, device=device) + step * rank) % period).to(dtype.torch_dtype)
    return one.repeat(-(-numel // period))[:numel]


def allocate(collective: Collective, layout: Layout, dtype: DType, in_place: bool, device) -> Buffers:
    td = dtype.torch_dtype
    if not in_place:
        return Buffers(torch.empty(layout.send_numel, dtype=td, device=device),
                       torch.empty(layout.recv_numel, dtype=td, device=device))
    whole = torch.empty(max(layout.send_numel, layout.recv_numel), dtype=td, device=device)
    send = whole[layout.send_inplace_offset : layout.send_inplace_offset + layout.send_numel]
    recv = whole[layout.recv_inplace_offset : layout.recv_inplace_offset + layout.recv_numel]
    return Buffers(send, recv)


def fill(buffers: Buffers, args: CallArgs, dtype: DType, in_place: bool) -> None:
    """Put this rank's input where the collective reads it (for in-place: the shared buffer)."""
    pattern = input_pattern(args.rank, buffers.send.numel(), dtype, args.op, buffers.send.device)
    buffers.send.copy_(pattern)
    if not in_place:
        buffers.recv.zero_()


def reducer(op: str | None, world: int, dtype: DType):
    folds: dict[str | None, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        None: torch.add, "sum": torch.add, "avg": torch.add, "prod": torch.mul,
        "max": torch.maximum, "min": torch.minimum}
    fold = folds[op]

    def reduce(input_of: Callable[[int], torch.Tensor]) -> torch.Tensor:
        out = input_of(0).to(torch.float64)
        for r in range(1, world):
            out = fold(out, input_of(r).to(torch.float64))
        if op == "avg":
            out = out / world
        if not dtype.is_float:
            # Integer sums wrap in the collective exactly as they do in int64 -> narrow casts.
            out = out.to(torch.int64)
        return out

    return reduce


def check_bytes(numel: int) -> int:
    """Scratch memory count_wrong needs for an output of `numel` elements (float64 fold,
    one int64 pattern and the widened output)."""
    return 3 * 8 * numel


def count_wrong(collective: Collective, layout: Layout, buffers: Buffers, args: CallArgs,
                dtype: DType) -> int:
    """Elements of this rank's output that differ from what the collective must produce."""
    device = buffers.recv.device

    def inputs(rank: int, numel: int) -> torch.Tensor:
        return input_pattern(rank, numel, dtype, args.op, device)

    expected = collective.expected(layout, args, inputs, reducer(args.op, args.world, dtype))
    if expected is None:
        return 0
    return count_mismatches(buffers.recv, expected, dtype, args)


def count_mismatches(got: torch.Tensor, expected: torch.Tensor, dtype: DType, args: CallArgs) -> int:
    """Elements of `got` that differ from `expected` (as `reducer` builds it) beyond rounding."""
    expected = expected.to(dtype.torch_dtype)
    if torch.equal(got, expected):
        return 0  # the usual answer, without widening both to float64 (NaN is never equal: full check)
    expected = expected.to(torch.float64)
    got = got.to(torch.float64)
    if dtype.is_float:
        eps = torch.finfo(dtype.torch_dtype).eps
        tol = 2 * eps * args.world * expected.abs() + (1.0 if args.op == "avg" else 0.0) * eps
        if args.op != "avg":
            # The inputs are small positive integers, so every partial sum or product of any
            # reduction order lies between 0 and the result: while the result is an integer the
            # dtype holds exactly (up to 2/eps: 256 for bfloat16), no rounding can happen and any
            # difference is wrong, as in nccl-tests' exact check.
            tol = torch.where(expected.abs() <= 2 / eps, torch.zeros_like(tol), tol)
    else:
        tol = torch.ones_like(expected) if args.op == "avg" else torch.zeros_like(expected)
    return int(((got - expected).abs() > tol).sum().item())
