"""Data types bound to torch; names, aliases, item sizes and reduction ops are in core/vocab.py."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from commbench.core import vocab


@dataclass(frozen=True, kw_only=True)
class DType(vocab.DTypeSpec):
    torch_dtype: torch.dtype


def _bound(spec: vocab.DTypeSpec) -> DType:
    facts = {f.name: getattr(spec, f.name) for f in fields(vocab.DTypeSpec)}
    return DType(**facts, torch_dtype=getattr(torch, spec.name))


DTYPES: tuple[DType, ...] = tuple(_bound(spec) for spec in vocab.DTYPES)
_BY_NAME = {d.name: d for d in DTYPES}


def get_dtype(text: str) -> DType:
    """A dtype by any of its names (vocab.get_dtype), with its torch dtype."""
    return _BY_NAME[vocab.get_dtype(text).name]


def torch_op(op: str):
    import torch.distributed as dist

    return getattr(dist.ReduceOp, vocab.OPS[op][1])
