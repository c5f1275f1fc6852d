"""Data types and reduction operations, with the names nccl-tests prints and accepts."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from commbench.core.errors import BadInput


@dataclass(frozen=True)
class DType:
    name: str  # commbench's canonical name, stored in results
    nccl_name: str  # what nccl-tests prints in its "type" column
    torch_dtype: torch.dtype
    aliases: tuple[str, ...] = ()

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()

    @property
    def is_float(self) -> bool:
        return self.torch_dtype.is_floating_point


DTYPES: tuple[DType, ...] = (
    DType("float32", "float", torch.float32, ("float", "fp32", "f32")),
    DType("float16", "half", torch.float16, ("half", "fp16", "f16")),
    DType("bfloat16", "bfloat16", torch.bfloat16, ("bf16",)),
    DType("float64", "double", torch.float64, ("double", "fp64", "f64")),
    DType("int8", "int8", torch.int8, ("char", "i8")),
    DType("uint8", "uint8", torch.uint8, ("u8",)),
    DType("int32", "int32", torch.int32, ("int", "i32")),
    DType("int64", "int64", torch.int64, ("i64",)),
)

# Reduction ops: commbench name -> (nccl-tests name, torch op attribute).
OPS: dict[str, tuple[str, str]] = {
    "sum": ("sum", "SUM"),
    "prod": ("prod", "PRODUCT"),
    "max": ("max", "MAX"),
    "min": ("min", "MIN"),
    "avg": ("avg", "AVG"),
}
_OP_ALIASES = {"product": "prod", "mean": "avg", "average": "avg"}

# What each backend can reduce with: gloo in torch 2.x has no AVG.
BACKEND_OPS = {"gloo": {"sum", "prod", "max", "min"}, "nccl": set(OPS)}
BACKEND_DTYPES = {
    "gloo": {d.name for d in DTYPES},
    "nccl": {d.name for d in DTYPES},
}


def _key(text: str) -> str:
    return text.strip().lower().replace("-", "").replace("_", "")


def get_dtype(text: str) -> DType:
    wanted = _key(text)
    for d in DTYPES:
        if wanted in {_key(d.name), _key(d.nccl_name), *(_key(a) for a in d.aliases)}:
            return d
    names = ", ".join(d.name for d in DTYPES)
    raise BadInput(f"unknown dtype {text!r}: use one of {names} (nccl-tests names like float, half work too)")


def get_op(text: str) -> str:
    wanted = text.strip().lower()
    wanted = _OP_ALIASES.get(wanted, wanted)
    if wanted not in OPS:
        raise BadInput(f"unknown reduction op {text!r}: use one of {', '.join(OPS)}")
    return wanted


def torch_op(op: str):
    import torch.distributed as dist

    return getattr(dist.ReduceOp, OPS[op][1])


def check_backend_support(backend: str, dtype: DType, op: str | None) -> None:
    if dtype.name not in BACKEND_DTYPES[backend]:
        raise BadInput(f"the {backend} backend cannot do dtype {dtype.name}: choose another --dtype")
    if op is not None and op not in BACKEND_OPS[backend]:
        can = ", ".join(sorted(BACKEND_OPS[backend]))
        raise BadInput(f"the {backend} backend cannot reduce with op {op}: use --op one of {can}")
