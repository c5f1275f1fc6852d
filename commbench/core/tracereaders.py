"""Read what exists into the trace model (core/trace.py): commbench's own capture, PyTorch
Execution Traces (torch.profiler.ExecutionTraceObserver, Chakra JSON) and DeepSpeed's comms logger
(`deepspeed.comm.log_summary(return_dict=True)` saved as JSON). `read_any(paths)` tells them apart
by content, one file per rank (the rank from `rank<N>` in the file name, else the order given).

Execution Traces come in two node styles. torch 2.13 on gloo writes `c10d::*` nodes
(c10d::allreduce_, c10d::_allgather_base_, c10d::alltoall_base_, ...) whose tensors are
[id, storage, offset, numel, itemsize, device] and whose argument names are in the node's
op_schema attribute; NCCL builds write `record_param_comms` nodes whose attributes name the
collective, element counts, dtype and process group (PARAM's et_replay reads those only). Both
have a `## process_group:init ##` node: each group's name, description and size. A c10d node does
not name its group: its ops are given the default group. Files may be gzipped (`.json.gz`).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from commbench.core import trace as tr
from commbench.core.errors import BadInput
from commbench.core.vocab import BY_NAME, COLLECTIVES, NCCL_TESTS_ONLY

ET_SCHEMA_MAJOR = 1  # Chakra ET schema "1.1.1-chakra.0.0.4": a newer major is refused

# DeepSpeed's record names and c10d / record_param_comms collective names -> the trace's op.
_DEEPSPEED = {op: c.name for c in COLLECTIVES for op in c.deepspeed_ops if c.name != "sendrecv"} | {
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv",
    "barrier": "barrier", "log_summary_barrier": "barrier", "monitored_barrier": "barrier"}
_TORCH = {op: c.name for c in COLLECTIVES + NCCL_TESTS_ONLY for op in c.torch_ops}  # core/vocab.py's torch_ops
_C10D = _TORCH | {"send": "send", "recv_": "recv", "recv_any_source_": "recv", "barrier": "barrier",
                  "monitored_barrier_": "barrier"}
_PARAM = _TORCH | {"send": "send", "recv": "recv", "barrier": "barrier"}
# ET's dtype names (c10 type names in `types`, ScalarType names in record_param_comms) -> torch's.
_DTYPES = {"c10::bfloat16": "bfloat16", "bfloat16": "bfloat16", "c10::half": "float16", "half": "float16",
           "float": "float32", "double": "float64", "unsigned char": "uint8", "byte": "uint8",
           "signed char": "int8", "char": "int8", "short": "int16", "int": "int32", "long int": "int64",
           "long": "int64", "bool": "bool", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}
_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "uint8": 1, "int8": 1, "int16": 2,
             "int32": 4, "int64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def read_any(paths: Sequence[str | Path]) -> tr.Trace:
    """One trace from one commbench trace, or from one file per rank of another source."""
    if not paths:
        raise BadInput("no trace given: pass a commbench trace, Execution Traces or DeepSpeed comms logs")
    docs = [(Path(p), _load(Path(p))) for p in paths]
    kinds = {kind for _, (kind, _) in docs}
    if len(kinds) > 1:
        raise BadInput(f"{', '.join(str(p) for p in paths)} mix trace formats ({', '.join(sorted(kinds))}): "
                       "read one source at a time")
    kind = kinds.pop()
    if kind == "commbench":
        if len(docs) > 1:
            raise BadInput("a commbench trace already holds every rank: pass one file")
        return tr.read(docs[0][0])
    ranks = _ranks([p for p, _ in docs])
    reader = _read_et if kind == "et" else _read_deepspeed
    return tr.merge(reader(doc, path, rank) for (path, (_, doc)), rank in zip(docs, ranks))


def _load(path: Path) -> tuple[str, Any]:
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    first = text.split("\n", 1)[0]
    if '"format"' in first and tr.FORMAT in first:
        return "commbench", None
    try:
        doc = json.loads(text)
    except ValueError:
        raise BadInput(f"{path} is not JSON (a truncated file?): pass a whole Execution Trace, "
                       "DeepSpeed comms log or commbench trace") from None
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and "schema" in doc:
        _check_et_schema(doc["schema"], path)
        return "et", doc
    if isinstance(doc, dict) and isinstance(doc.get("summary"), dict) and isinstance(doc.get("metadata"), dict):
        return "deepspeed", doc
    raise BadInput(f"{path} is not a trace commbench reads: pass a commbench trace ('commbench capture'), a "
                   "PyTorch Execution Trace or deepspeed.comm.log_summary(return_dict=True) saved as JSON")


def _check_et_schema(schema: Any, path: Path) -> None:
    major = str(schema).split(".", 1)[0]
    if not major.isdigit():
        raise BadInput(f"{path} has Execution Trace schema {schema!r}, which is not a version: record it again")
    if int(major) > ET_SCHEMA_MAJOR:
        raise BadInput(f"{path} has Execution Trace schema {schema}, newer than this commbench reads "
                       f"({ET_SCHEMA_MAJOR}.x): upgrade commbench")


def _ranks(paths: list[Path]) -> list[int]:
    found = [re.search(r"rank[_-]?(\d+)", p.name) for p in paths]
    ranks = [int(m.group(1)) if m else i for i, m in enumerate(found)] if all(found) else list(range(len(paths)))
    if len(set(ranks)) != len(ranks):
        raise BadInput(f"two files name the same rank ({', '.join(p.name for p in paths)}): pass one file per rank")
    return ranks


# ----------------------------------------------------------------------------- DeepSpeed's comms logger

def _received(op: str, msg: int, world: int) -> int:
    """What a rank receives for a logged `tensor` argument of `msg` bytes (the buffer it sends): the
    whole for a collective that sends a chunk and receives the whole (all_gather), a chunk for the
    reverse (reduce_scatter), the same bytes otherwise (core/vocab.py's layouts say which)."""
    spec = BY_NAME.get(op)
    send_whole, recv_whole = spec.whole_sides() if spec is not None else (True, True)
    if recv_whole and not send_whole:
        return msg * world
    if send_whole and not recv_whole:
        return msg // world
    return msg


def _read_deepspeed(doc: dict[str, Any], path: Path, rank: int) -> tr.Trace:
    """(op, message size) -> `count` ops of that size, in no known order. DeepSpeed logs the size of
    the op's `tensor` argument: the shard for all_gather_into_tensor, the whole input for
    reduce_scatter_tensor (docs/DEEPSPEED.md)."""
    meta = doc["metadata"]
    world = _int(meta.get("world_size"), path, "metadata.world_size")
    rank = int(meta.get("rank", rank))
    ops: list[tr.Op] = []
    for name, sizes in doc["summary"].items():
        op = _DEEPSPEED.get(name.split(" | ")[0], name)
        for size, rec in (sizes or {}).items():
            msg = _int(rec.get("msg_size_bytes", size), path, f"{name} size")
            gathered, scattered = msg, _received(op, msg, world)
            ms = float(rec.get("avg_latency_ms") or 0.0)
            ops += [tr.Op(rank=rank, index=len(ops) + i, op=op, call=name, bytes_in=gathered, bytes_out=scattered,
                          event_ms=ms or None) for i in range(_int(rec.get("count"), path, f"{name} count"))]
    return tr.Trace(world_size=world, source="deepspeed-comms-logger", groups=_world_group(world), ops=tuple(ops),
                    ordered=False, meta={"ranks": [rank]})


def _int(value: Any, path: Path, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{path}: {what} {value!r} is not a whole number: is it a DeepSpeed comms log?") from None
    if number < 0:
        raise BadInput(f"{path}: {what} {number} is negative: is it a DeepSpeed comms log?")
    return number


def _world_group(world: int) -> dict[str, tr.Group]:
    return {tr.WORLD: tr.Group(tr.WORLD, tuple(range(world)), "default_pg")}


# ----------------------------------------------------------------------------- Execution Traces

def _read_et(doc: dict[str, Any], path: Path, rank: int) -> tr.Trace:
    nodes = sorted((n for n in doc["nodes"] if isinstance(n, dict)), key=lambda n: n.get("id", 0))
    groups = _et_groups(nodes)
    world = len(groups[tr.WORLD].ranks) if tr.WORLD in groups else 0
    ops: list[tr.Op] = []
    for node in nodes:
        name = str(node.get("name", ""))
        facts = _c10d(node, name) if name.startswith("c10d::") else \
            _param_comms(node) if name == "record_param_comms" else None
        if facts is not None:
            ops.append(tr.Op(rank=rank, index=len(ops), **facts))
    world = world or max(rank + 1, 1)
    return tr.Trace(world_size=world, source="execution-trace", groups=groups or _world_group(world),
                    ops=tuple(ops), meta={"ranks": [rank], "schema": doc.get("schema")})


def _et_groups(nodes: list[dict[str, Any]]) -> dict[str, tr.Group]:
    for node in nodes:
        if "process_group:init" in str(node.get("name", "")):
            try:
                pgs = json.loads(node["inputs"]["values"][0])
            except (KeyError, IndexError, TypeError, ValueError):
                return {}  # the observer truncates a long group list: groups unknown rather than refused
            return {str(g["pg_name"]): tr.Group(str(g["pg_name"]), tuple(g.get("ranks") or range(g["group_size"])),
                                                str(g.get("pg_desc", ""))) for g in pgs if isinstance(g, dict)}
    return {}


def _args(node: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """argument name -> (value, type) from the node's op_schema and inputs."""
    attrs = {a.get("name"): a.get("value") for a in node.get("attrs", []) if isinstance(a, dict)}
    schema = str(attrs.get("op_schema", ""))
    inside = schema[schema.find("(") + 1: schema.find(") ->")] if "(" in schema else ""
    names = [part.split("=")[0].split()[-1] for part in inside.split(", ") if part.strip()]
    inputs = node.get("inputs", {})
    values, types = inputs.get("values", []), inputs.get("types", [])
    return {n: (values[i], types[i] if i < len(types) else "") for i, n in enumerate(names) if i < len(values)}


def _tensor_bytes(value: Any) -> int:
    """An ET tensor is [id, storage, offset, numel, itemsize, device]; lists of them nest."""
    if isinstance(value, list) and len(value) == 6 and isinstance(value[5], str) and isinstance(value[3], int):
        return int(value[3]) * int(value[4])
    return sum(_tensor_bytes(v) for v in value) if isinstance(value, list) else 0


def _c10d(node: dict[str, Any], name: str) -> dict[str, Any] | None:
    call = name.removeprefix("c10d::")
    op = _C10D.get(call)
    if op is None:
        return None
    args = _args(node)
    out_value, out_type = args.get("output_tensor") or args.get("output_tensors") or args.get("output") or (None, "")
    in_value, in_type = args.get("input_tensor") or args.get("input_tensors") or args.get("input") or (None, "")
    if "tensors" in args:  # in place: allreduce_, broadcast_, reduce_, send, recv_
        in_value = out_value = args["tensors"][0]
        in_type = args["tensors"][1]
    bytes_in = 0 if op in ("recv", "barrier") else _tensor_bytes(in_value)
    bytes_out = 0 if op in ("send", "barrier") else _tensor_bytes(out_value)
    peer = next((args[k][0] for k in ("root_rank", "dstRank", "srcRank") if k in args), None)
    async_op = next((args[k][0] for k in ("async_op", "asyncOp") if k in args), False)
    splits = {key: tuple(args[name][0]) for key, name in (("in_splits", "input_split_sizes"),
                                                           ("out_splits", "output_split_sizes"))
              if isinstance(args.get(name, (None,))[0], list) and args[name][0]}
    return dict(op=op, call=name, bytes_in=bytes_in, bytes_out=bytes_out, dtype=_dtype(in_type or out_type),
                async_op=bool(async_op), peer=peer if isinstance(peer, int) else None, **splits)


def _dtype(type_name: str) -> str:
    found = re.search(r"Tensor\(([^)]*)\)", type_name or "")
    return _DTYPES.get(found.group(1).lower(), found.group(1)) if found else ""


def _param_comms(node: dict[str, Any]) -> dict[str, Any] | None:
    """PARAM's style (torch/csrc/distributed/c10d/ParamCommsUtils.hpp): the facts are attributes."""
    attrs = {a.get("name"): a.get("value") for a in node.get("attrs", []) if isinstance(a, dict)}
    name = str(attrs.get("collective_name", "")).lower()
    op = _PARAM.get(name)
    if op is None:
        return None  # init, wait, coalesced markers: not an op on the wire
    dtype = _DTYPES.get(str(attrs.get("dtype", "")).lower(), str(attrs.get("dtype", "")).lower())
    size = _ITEMSIZE.get(dtype, 1)
    names = (("in_splits", "in_split_size"), ("out_splits", "out_split_size"))
    splits = {key: tuple(json.loads(text)) for key, k in names
              if isinstance(text := attrs.get(k), str) and text.startswith("[") and text != "[]"}
    pg = attrs.get("pg_name")
    return dict(op=op, call=f"record_param_comms:{name}", group=str(pg) if pg not in (None, "") else tr.WORLD,
                bytes_in=int(attrs.get("in_msg_nelems") or 0) * size,
                bytes_out=int(attrs.get("out_msg_nelems") or 0) * size, dtype=dtype, **splits)

