"""The vocabulary: collective, dtype and reduction-op names and the facts about them, without torch.

Every fact about a collective lives here once: its canonical name and aliases, how many
elements each rank sends and receives for a requested size and element size (nccl-tests'
setupArgs and getCollByteCount, including its 16-byte rounding), its bus-bandwidth factor
(nccl-tests' getBw), which placements torch can express, the ZeRO paper's volume multiplier and
whether a ZeRO step runs it, its names in NCCL's debug output and DeepSpeed's comms logger, and
the display order. Other modules derive their sets and tables of collectives from these entries
(tests/unit/test_vocab_once.py fails on a list written out elsewhere). The harness binds torch
calls to these entries (harness/collectives.py); analysis and the nccl-tests reader use them as
they are, so `compare`, `plot`, `report`, `gate` and `nccl-tests import` never import torch.

Sizes follow nccl-tests: S, the size printed and stored, is the larger of the send and receive
buffers of one rank (the total gathered output for all_gather, the total input for
reduce_scatter, the whole send buffer for all_to_all), and algbw = S / t for every collective.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from collections.abc import Callable, Iterable

from commbench.core.errors import BadInput

# nccl-tests (since 2.13.12) rounds a rank's chunk in the gather/scatter family and all-to-all down
# to a multiple of 16 bytes, whatever the element size: `(count/nranks) & ~(16/eltSize - 1)` in
# GetCollByteCount (vendored 2.19.6, src/all_gather.cu AllGatherGetCollByteCount, likewise
# reduce_scatter.cu, alltoall.cu, gather.cu, scatter.cu, hypercube.cu).
CHUNK_BYTES = 16

# What DeepSpeed reduces a gradient bucket with (`buckets --op`): all-reduce, or reduce-scatter at ZeRO-3.
BUCKET_OPS = ("all_reduce", "reduce_scatter")


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


def chunk_elements(itemsize: int) -> int:
    """How many elements of `itemsize` bytes a rank's chunk is a multiple of (CHUNK_BYTES' worth:
    16 // itemsize; every dtype's item size divides 16)."""
    return CHUNK_BYTES // itemsize


def _chunk(count: int, itemsize: int, world: int) -> int:
    """nccl-tests' per-rank chunk `(count/nranks) & ~(16/eltSize - 1)`, bit for bit (an element
    over 16 bytes would give 0, as there)."""
    return (count // world) & ~(chunk_elements(itemsize) - 1)


# Each layout is one nccl-tests GetCollByteCount (vendored 2.19.6, src/<name>.cu): (count, eltSize,
# nranks) plus the rank, whose in-place views sit at rank x the offset nccl-tests returns.

def _full(count: int, itemsize: int, world: int, rank: int) -> Layout:
    """all_reduce.cu AllReduceGetCollByteCount, broadcast.cu BroadcastGetCollByteCount, reduce.cu
    ReduceGetCollByteCount, sendrecv.cu SendRecvGetCollByteCount: count as it is, no rounding."""
    return Layout(count, count, count)


def _gather_family(count: int, itemsize: int, world: int, rank: int) -> Layout:
    """all_gather.cu AllGatherGetCollByteCount (also gather.cu GatherGetCollByteCount, hypercube.cu
    HyperCubeGetCollByteCount): send a chunk, receive world chunks."""
    base = _chunk(count, itemsize, world)
    return Layout(base, base * world, base, send_inplace_offset=rank * base)


def _scatter_family(count: int, itemsize: int, world: int, rank: int) -> Layout:
    """reduce_scatter.cu ReduceScatterGetCollByteCount (also scatter.cu ScatterGetCollByteCount):
    send world chunks, receive one."""
    base = _chunk(count, itemsize, world)
    return Layout(base * world, base, base, recv_inplace_offset=rank * base)


def _alltoall(count: int, itemsize: int, world: int, rank: int) -> Layout:
    """alltoall.cu AlltoAllGetCollByteCount: world chunks each way, no in-place offsets."""
    base = _chunk(count, itemsize, world)
    return Layout(base * world, base * world, base)


def _alltoallv(count: int, itemsize: int, world: int, rank: int) -> Layout:
    """alltoallv.cu AlltoAllvGetCollByteCount sizes each peer's share from a pattern (a file, or one
    generated at run time): not a function of these arguments, so not modelled."""
    raise ValueError("alltoallv's counts follow its run-time pattern (nccl-tests src/alltoallv.cu); "
                     "commbench reads its results but has no layout for it")


def ring_factor(world: int) -> float:
    return (world - 1) / world


@dataclass(frozen=True)
class CollectiveSpec:
    name: str  # canonical, nccl-tests' name without _perf
    aliases: tuple[str, ...]
    layout: Callable[[int, int, int, int], Layout]  # (count, itemsize, world, rank) -> Layout
    busbw_factor: Callable[[int], float]  # world -> busbw / algbw
    reduces: bool = False  # takes --op
    rooted: bool = False  # takes --root
    # Placements torch can express: torch's all_reduce, broadcast and reduce work in place only.
    placements: tuple[str, ...] = ("out", "in")
    # Every rank leaves when the last one has entered (each needs data from all): a late rank then
    # spends less time inside, which is what the arrival skew column reads. Not so for a root
    # that only sends or only receives, or a ring of pairs.
    exits_together: bool = True
    # The ZeRO paper's accounting: an all-reduce moves twice its buffer (reduce-scatter plus
    # all-gather), every other collective its S once.
    volume: float = 1.0
    # A ZeRO step's own collective (its gradient reductions and parameter gathers): the ZeRO
    # paper's accounting gives its bus factor in a DeepSpeed step's rows (workloads/dsengine.py).
    zero_step: bool = False
    # NCCL's name in its debug output (ncclFuncToString; net/nccltuning.py); "" where NCCL has none.
    nccl_func: str = ""
    # The record names DeepSpeed's comms logger writes for it (integrations/deepspeed/training.py).
    deepspeed_ops: tuple[str, ...] = ()
    # The parallel dimensions (core/layout.py's DIMENSIONS) that run it unless `--group` says
    # otherwise, as training issues them: tensor- and data-parallel gradients all-reduced, context
    # parallel's keys and values all-gathered, experts' tokens all-to-all, pipeline stages send/recv.
    parallel_dims: tuple[str, ...] = ()
    # The names torch gives it in an Execution Trace: its c10d op (`c10d::allreduce_`, without the
    # namespace) and record_param_comms' collective name (core/tracereaders.py).
    torch_ops: tuple[str, ...] = ()

    def supports(self, placement: str) -> bool:
        return placement in self.placements

    @property
    def per_rank_count(self) -> bool:
        """nccl-tests' count (and the byte count NCCL prints) is one rank's chunk, S / world, not
        S: the gather/scatter family and all-to-all."""
        return self.layout in (_gather_family, _scatter_family, _alltoall, _alltoallv)

    def whole_sides(self) -> tuple[bool, bool]:
        """Whether a rank's send and receive buffers are each the whole size S, rather than one
        rank's chunk of it: all_gather (False, True), reduce_scatter (True, False), all_reduce (True,
        True). Read off the layout of two ranks (where a chunk is not the whole) at a count whose
        chunks need no rounding."""
        world = 2
        whole = world * CHUNK_BYTES  # one-byte elements: a rank's chunk is exactly CHUNK_BYTES of them
        lay = self.layout(whole, 1, world, 0)
        return lay.send_numel == whole, lay.recv_numel == whole

    def for_size(self, size: int, itemsize: int, world: int, rank: int = 0) -> Layout:
        """The layout of a requested size in bytes, as nccl-tests' setupArgs (src/common.cu) builds
        it: `count = size / wordSize(type)`, then getCollByteCount(count, eltSize, nranks)."""
        return self.layout(size // itemsize, itemsize, world, rank)


# The collectives commbench measures, in display order (nccl-tests' order of its binaries).
COLLECTIVES: tuple[CollectiveSpec, ...] = (
    CollectiveSpec("all_reduce", ("allreduce",), _full, lambda n: 2 * (n - 1) / n, reduces=True,
                   placements=("in",), volume=2.0, zero_step=True, nccl_func="AllReduce",
                   deepspeed_ops=("all_reduce", "all_reduce_coalesced", "inference_all_reduce"),
                   parallel_dims=("tp", "dp"),
                   torch_ops=("allreduce_", "allreduce_coalesced_", "allreduce", "all_reduce")),
    CollectiveSpec("reduce_scatter", ("reducescatter",), _scatter_family, ring_factor, reduces=True,
                   zero_step=True, nccl_func="ReduceScatter",
                   deepspeed_ops=("reduce_scatter", "reduce_scatter_tensor"),
                   torch_ops=("reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
                              "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced")),
    CollectiveSpec("all_gather", ("allgather",), _gather_family, ring_factor, zero_step=True, nccl_func="AllGather",
                   deepspeed_ops=("all_gather", "all_gather_into_tensor", "all_gather_base"), parallel_dims=("cp",),
                   torch_ops=("_allgather_base_", "allgather_", "allgather_into_tensor_coalesced_",
                              "allgather_coalesced_", "allgather", "all_gather", "_allgather_base",
                              "allgather_into_tensor_coalesced")),
    CollectiveSpec("all_to_all", ("alltoall", "a2a"), _alltoall, ring_factor, placements=("out",),
                   nccl_func="AlltoAll", deepspeed_ops=("all_to_all", "all_to_all_single"), parallel_dims=("ep",),
                   torch_ops=("alltoall_base_", "alltoall_", "all_to_all", "alltoall", "all_to_allv", "alltoall_base")),
    CollectiveSpec("broadcast", ("bcast",), _full, lambda n: 1.0, rooted=True, placements=("in",),
                   exits_together=False, nccl_func="Broadcast", deepspeed_ops=("broadcast",),
                   torch_ops=("broadcast_", "broadcast")),
    CollectiveSpec("reduce", (), _full, lambda n: 1.0, reduces=True, rooted=True, placements=("in",),
                   exits_together=False, zero_step=True, nccl_func="Reduce", deepspeed_ops=("reduce",),
                   torch_ops=("reduce_", "reduce")),
    CollectiveSpec("sendrecv", ("send_recv", "p2p", "ring"), _full, lambda n: 1.0, placements=("out",),
                   exits_together=False, nccl_func="SendRecv",
                   deepspeed_ops=("send", "recv", "isend", "irecv", "batch_isend_irecv"), parallel_dims=("pp",)),
)

# nccl-tests binaries commbench does not run: their results are read under their own names,
# with nccl-tests' bus factors.
NCCL_TESTS_ONLY: tuple[CollectiveSpec, ...] = tuple(
    CollectiveSpec(name, (), layout, ring_factor, rooted=name in ("gather", "scatter"),
                   torch_ops=(f"{name}_", name) if name in ("gather", "scatter") else ())
    for name, layout in (("gather", _gather_family), ("scatter", _scatter_family), ("hypercube", _gather_family),
                         ("alltoallv", _alltoallv)))

BY_NAME = {c.name: c for c in COLLECTIVES}
ORDER = tuple(c.name for c in COLLECTIVES)
# The collectives that reduce (take --op), in display order.
REDUCING = tuple(c.name for c in COLLECTIVES if c.reduces)
# A barrier moves no payload: its volume is 0 in the ZeRO paper's accounting.
_ZERO_VOLUME = {"barrier"}


def _key(text: str) -> str:
    return text.strip().lower().replace("-", "").replace("_", "").removesuffix("perf")


def did_you_mean(text: str, spellings: Iterable[tuple[str, str]], key: Callable[[str], str] = _key) -> str:
    """' (did you mean all_reduce?)' when text is a near miss of one of the spellings (spelling,
    canonical name), compared as `key` normalises them; '' otherwise."""
    names = {key(spelling): name for spelling, name in spellings}
    close = difflib.get_close_matches(key(text), list(names), n=1, cutoff=0.75)
    return f" (did you mean {names[close[0]]}?)" if close else ""


def collective_spellings(nccl_tests: bool = False) -> list[tuple[str, str]]:
    """Every accepted spelling of a measured collective (and with nccl_tests, of nccl-tests' others
    too), with its canonical name."""
    table = COLLECTIVES + (NCCL_TESTS_ONLY if nccl_tests else ())
    return [(spelling, c.name) for c in table for spelling in (c.name, *c.aliases)]


def resolve(names: str) -> list[CollectiveSpec]:
    """'allreduce,all-gather' or 'all' -> the table entries, in table order, no duplicates."""
    wanted = [n for n in names.split(",") if n.strip()]
    if not wanted:
        raise BadInput("--collective is empty: name one, e.g. --collective allreduce, or 'all'")
    picked: list[CollectiveSpec] = []
    for name in wanted:
        if _key(name) == "all":
            picked.extend(COLLECTIVES)
            continue
        match = [c for c in COLLECTIVES if _key(name) in {_key(c.name), *(_key(a) for a in c.aliases)}]
        if not match:
            choices = ", ".join(c.name for c in COLLECTIVES)
            raise BadInput(f"unknown collective {name!r}{did_you_mean(name, collective_spellings())}: "
                           f"use one of {choices}, or all")
        picked.append(match[0])
    return [c for c in COLLECTIVES if c in picked]


def known(name: str) -> CollectiveSpec | None:
    """The entry for a canonical name, among the measured ones and nccl-tests' others."""
    return BY_NAME.get(name) or next((c for c in NCCL_TESTS_ONLY if c.name == name), None)


def busbw(collective: CollectiveSpec, algbw: float, world: int) -> float:
    return algbw * collective.busbw_factor(world)


def volume_multiplier(name: str) -> float:
    """Bytes moved per byte of S in the ZeRO paper's units (all_reduce 2, barrier 0, others 1)."""
    if name in _ZERO_VOLUME:
        return 0.0
    spec = BY_NAME.get(name)
    return spec.volume if spec else 1.0


def volume_factor(name: str, world: int) -> float:
    """Bytes a rank sends per byte of message, on average over ranks (the ZeRO paper's
    accounting): an all-reduce is a reduce-scatter plus an all-gather, 2(n-1)/n; a reduce to one
    owner, an all-gather or a reduce-scatter moves (n-1)/n of the message per rank."""
    return volume_multiplier(name) * ring_factor(world)


def order_key(name: str) -> tuple[int, str]:
    """Sort key: commbench's collectives in table order, then any other name alphabetically."""
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


# ---- data types and reduction ops ---------------------------------------------------------------


@dataclass(frozen=True)
class DTypeSpec:
    name: str  # commbench's canonical name, stored in results; also torch's attribute name
    nccl_name: str  # what nccl-tests prints in its "type" column
    itemsize: int
    is_float: bool
    aliases: tuple[str, ...] = ()


DTYPES: tuple[DTypeSpec, ...] = (
    DTypeSpec("float32", "float", 4, True, ("float", "fp32", "f32")),
    DTypeSpec("float16", "half", 2, True, ("half", "fp16", "f16")),
    DTypeSpec("bfloat16", "bfloat16", 2, True, ("bf16",)),
    DTypeSpec("float64", "double", 8, True, ("double", "fp64", "f64")),
    DTypeSpec("int8", "int8", 1, False, ("char", "i8")),
    DTypeSpec("uint8", "uint8", 1, False, ("u8",)),
    DTypeSpec("int32", "int32", 4, False, ("int", "i32")),
    DTypeSpec("int64", "int64", 8, False, ("i64",)),
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


def _dkey(text: str) -> str:
    return text.strip().lower().replace("-", "").replace("_", "")


def get_dtype(text: str) -> DTypeSpec:
    wanted = _dkey(text)
    for d in DTYPES:
        if wanted in {_dkey(d.name), _dkey(d.nccl_name), *(_dkey(a) for a in d.aliases)}:
            return d
    names = ", ".join(d.name for d in DTYPES)
    hint = did_you_mean(text, [(a, d.name) for d in DTYPES for a in (d.name, d.nccl_name, *d.aliases)], _dkey)
    raise BadInput(f"unknown dtype {text!r}{hint}: use one of {names} (nccl-tests names like float, half work too)")


def get_op(text: str) -> str:
    wanted = text.strip().lower()
    wanted = _OP_ALIASES.get(wanted, wanted)
    if wanted not in OPS:
        hint = did_you_mean(text, [(o, o) for o in OPS], str.lower)  # not the aliases: median is not mean
        raise BadInput(f"unknown reduction op {text!r}{hint}: use one of {', '.join(OPS)}")
    return wanted


def check_backend_support(backend: str, dtype: DTypeSpec, op: str | None) -> None:
    if dtype.name not in BACKEND_DTYPES[backend]:
        raise BadInput(f"the {backend} backend cannot do dtype {dtype.name}: choose another --dtype")
    if op is not None and op not in BACKEND_OPS[backend]:
        can = ", ".join(sorted(BACKEND_OPS[backend]))
        raise BadInput(f"the {backend} backend cannot reduce with op {op}: use --op one of {can}")
