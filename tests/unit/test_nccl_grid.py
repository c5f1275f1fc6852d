"""The sweep grid, exactly as nccl-tests builds it, for every element size.

nccl-tests (since 2.13.12) rounds a rank's chunk to 16 BYTES, not to a number of elements. The
reference below is transcribed from the vendored nccl-tests 2.19.6 source
(/work/shared/vendor/nccl-tests), not from commbench/core/vocab.py, and a few values are worked
out by hand so the test cannot pass by copying the code under test:

- src/common.cu setupArgs: `count = size / wordSize(type)`, then
  `getCollByteCount(&sendCount, &recvCount, &paramCount, &sendInplaceOffset, &recvInplaceOffset,
  count, wordSize(type), nranks)`; nbytes = paramCount * wordSize (printed count = paramCount),
  sendBytes = sendCount * wordSize, expectedBytes = recvCount * wordSize, in-place offsets times
  wordSize; src/common.cu TimeTest prints max(sendBytes, expectedBytes) as the size and uses
  `sendInplaceOffset*rank`, `recvInplaceOffset*rank` (bytes) for the in-place views.
- src/common.h wordSize: ncclChar/ncclUint8 1, ncclHalf/ncclBfloat16 2, ncclInt/ncclFloat 4,
  ncclInt64/ncclDouble 8.
"""

from __future__ import annotations

import pytest

from commbench.cli import measure
from commbench.core import units, vocab
from commbench.harness.collectives import BY_NAME
from commbench.harness.plan import SweepPlan, size_grid

SIZE_T = (1 << 64) - 1  # size_t arithmetic: `~x` on an unsigned 64-bit value


def _rounded(count: int, elt: int, nranks: int) -> int:
    """`(count/nranks) & ~(16/eltSize - 1)`, in size_t."""
    return (count // nranks) & (~(16 // elt - 1) & SIZE_T)


# Each returns (sendcount, recvcount, paramcount, sendInplaceOffset, recvInplaceOffset), in
# elements, as the C function writes them through its pointers.

def all_reduce_cc(count, elt, nranks):  # src/all_reduce.cu AllReduceGetCollByteCount
    return count, count, count, 0, 0


def broadcast_cc(count, elt, nranks):  # src/broadcast.cu BroadcastGetCollByteCount
    return count, count, count, 0, 0


def reduce_cc(count, elt, nranks):  # src/reduce.cu ReduceGetCollByteCount
    return count, count, count, 0, 0


def sendrecv_cc(count, elt, nranks):  # src/sendrecv.cu SendRecvGetCollByteCount
    return count, count, count, 0, 0


def all_gather_cc(count, elt, nranks):  # src/all_gather.cu AllGatherGetCollByteCount
    base = _rounded(count, elt, nranks)
    return base, base * nranks, base, base, 0


def reduce_scatter_cc(count, elt, nranks):  # src/reduce_scatter.cu ReduceScatterGetCollByteCount
    base = _rounded(count, elt, nranks)
    return base * nranks, base, base, 0, base


def alltoall_cc(count, elt, nranks):  # src/alltoall.cu AlltoAllGetCollByteCount
    param = _rounded(count, elt, nranks)
    return nranks * param, nranks * param, param, 0, 0


def gather_cc(count, elt, nranks):  # src/gather.cu GatherGetCollByteCount
    send = _rounded(count, elt, nranks)
    return send, send * nranks, send, send, 0


def scatter_cc(count, elt, nranks):  # src/scatter.cu ScatterGetCollByteCount
    recv = _rounded(count, elt, nranks)
    return recv * nranks, recv, recv, 0, recv


def hypercube_cc(count, elt, nranks):  # src/hypercube.cu HyperCubeGetCollByteCount
    base = _rounded(count, elt, nranks)
    return base, base * nranks, base, base, 0


NCCL_TESTS = {"all_reduce": all_reduce_cc, "reduce_scatter": reduce_scatter_cc, "all_gather": all_gather_cc,
              "all_to_all": alltoall_cc, "broadcast": broadcast_cc, "reduce": reduce_cc, "sendrecv": sendrecv_cc,
              "gather": gather_cc, "scatter": scatter_cc, "hypercube": hypercube_cc}

# src/common.h wordSize, by nccl-tests' type name
WORD_SIZE = {"bfloat16": 2, "int8": 1, "float": 4, "double": 8}
DTYPES = ("bfloat16", "int8", "float32", "float64")
WORLDS = (3, 6, 24)


def setup_args(cc, size: int, wordsize: int, nranks: int, rank: int) -> dict:
    """src/common.cu setupArgs for one rank, in bytes, plus the printed size and count columns."""
    count = size // wordsize
    send, recv, param, send_off, recv_off = cc(count, wordsize, nranks)
    nbytes, send_bytes, expected_bytes = param * wordsize, send * wordsize, recv * wordsize
    return {"sendBytes": send_bytes, "expectedBytes": expected_bytes, "count": nbytes // wordsize,
            "size": max(send_bytes, expected_bytes), "sendInplace": send_off * wordsize * rank,
            "recvInplace": recv_off * wordsize * rank}


def default_grid() -> list[int]:
    """`commbench sweep`'s default sizes on a GPU (cli/measure.py: -b, -f and GPU_MAX_BYTES)."""
    defaults = {p.name: p.default for p in measure.sweep.params}
    return size_grid(units.parse_size(defaults["min_bytes"], "-b"), units.parse_size(measure.GPU_MAX_BYTES, "-e"),
                     defaults["step_factor"])


GRID = default_grid()


def test_the_default_grid_is_nccl_tests_default_doubling_from_8_bytes_to_1_gib():
    assert GRID == [8 << i for i in range(28)]


def test_item_sizes_are_nccl_tests_word_sizes():
    for name in DTYPES:
        dtype = vocab.get_dtype(name)
        assert dtype.itemsize == WORD_SIZE[dtype.nccl_name], name
    assert all(16 % d.itemsize == 0 for d in vocab.DTYPES)


def test_every_collective_with_a_layout_is_checked():
    table = {c.name for c in vocab.COLLECTIVES + vocab.NCCL_TESTS_ONLY}
    assert table - set(NCCL_TESTS) == {"alltoallv"}  # its counts follow a run-time pattern
    with pytest.raises(ValueError, match="alltoallv"):
        vocab.known("alltoallv").for_size(1024, 4, 3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", list(NCCL_TESTS))
def test_layouts_match_get_coll_byte_count_on_the_default_grid(name, world, dtype):
    spec, wordsize = vocab.known(name), WORD_SIZE[vocab.get_dtype(dtype).nccl_name]
    itemsize = vocab.get_dtype(dtype).itemsize
    for size in GRID:
        for rank in sorted({0, 1, world - 1}):
            want = setup_args(NCCL_TESTS[name], size, wordsize, world, rank)
            lay = spec.for_size(size, itemsize, world, rank)
            got = {"sendBytes": lay.send_numel * itemsize, "expectedBytes": lay.recv_numel * itemsize,
                   "count": lay.count, "size": lay.size_bytes(itemsize),
                   "sendInplace": lay.send_inplace_offset * itemsize, "recvInplace": lay.recv_inplace_offset * itemsize}
            assert got == want, (name, world, dtype, size, rank)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", list(BY_NAME))
def test_stored_sizes_and_counts_are_nccl_tests_printed_columns(name, world, dtype):
    """What a sweep stores (SweepPlan.points): nccl-tests' size and count columns, in grid order,
    less the sizes that round to zero elements and the repeats of a size already measured."""
    wordsize = WORD_SIZE[vocab.get_dtype(dtype).nccl_name]
    want, seen = [], set()
    for size in GRID:
        row = setup_args(NCCL_TESTS[name], size, wordsize, world, 0)
        if row["sendBytes"] and row["expectedBytes"] and row["size"] not in seen:
            seen.add(row["size"])
            want.append((size, row["size"], row["count"]))
    plan = SweepPlan(collectives=[name], sizes=GRID, dtype=dtype)
    points = [pts[0] for _, pts in plan.points(BY_NAME[name], world)]
    assert [(p.requested_bytes, p.size_bytes, p.count) for p in points] == want


# ---- worked by hand from the C source, not from either implementation above ----

@pytest.mark.parametrize("name, dtype, world, size, count, stored", [
    # bf16, 3 ranks, 128 B: count = 128/2 = 64; 64/3 = 21; 21 & ~(16/2-1) = 21 & ~7 = 16;
    # S = 16 * 3 * 2 = 96 (4 elements' rounding gave 20 and 120).
    ("all_gather", "bfloat16", 3, 128, 16, 96),
    ("reduce_scatter", "bfloat16", 3, 128, 16, 96),
    ("all_to_all", "bfloat16", 3, 128, 16, 96),
    # bf16, 3 ranks, 512 B: 256/3 = 85; 85 & ~7 = 80; S = 480 (was 84 and 504).
    ("all_gather", "bfloat16", 3, 512, 80, 480),
    # bf16, 3 ranks, 1 GiB: 536870912/3 = 178956970; & ~7 = 178956968; S = 1073741808 (the same as before).
    ("all_gather", "bfloat16", 3, 1 << 30, 178956968, 1073741808),
    # bf16, 3 ranks, 64 B: 32/3 = 10; 10 & ~7 = 8; S = 48 (the same as before).
    ("all_gather", "bfloat16", 3, 64, 8, 48),
    # int8, 3 ranks, 1 KiB: 1024/3 = 341; 341 & ~15 = 336; S = 1008 (was 340 and 1020).
    ("reduce_scatter", "int8", 3, 1024, 336, 1008),
    # float64, 3 ranks, 1 KiB: count 128; 128/3 = 42; 42 & ~1 = 42; S = 42 * 3 * 8 = 1008 (was 40 and 960).
    ("all_to_all", "float64", 3, 1024, 42, 1008),
    # float32, 24 ranks, 1 MiB: 262144/24 = 10922; & ~3 = 10920; S = 10920 * 24 * 4 = 1048320 (unchanged).
    ("all_gather", "float32", 24, 1 << 20, 10920, 1048320),
    # int8, 6 ranks, 64 B: 64/6 = 10; 10 & ~15 = 0: nothing to measure.
    ("all_gather", "int8", 6, 64, 0, 0),
    # all_reduce never rounds: bf16 3 ranks 128 B -> 64 elements, S = 128.
    ("all_reduce", "bfloat16", 3, 128, 64, 128),
])
def test_hand_checked_values(name, dtype, world, size, count, stored):
    itemsize = vocab.get_dtype(dtype).itemsize
    lay = vocab.BY_NAME[name].for_size(size, itemsize, world, 1)
    assert (lay.count, lay.size_bytes(itemsize)) == (count, stored)


def test_hand_checked_in_place_offsets():
    # bf16 on 3 ranks at 128 B: a chunk of 16 elements; rank 2's in-place send view of all_gather
    # starts at 2 * 16 = 32 elements (64 bytes), reduce_scatter's receive view likewise.
    assert vocab.BY_NAME["all_gather"].for_size(128, 2, 3, 2).send_inplace_offset == 32
    assert vocab.BY_NAME["reduce_scatter"].for_size(128, 2, 3, 2).recv_inplace_offset == 32
    assert vocab.known("scatter").for_size(128, 2, 3, 2).recv_inplace_offset == 32
    assert vocab.known("gather").for_size(128, 2, 3, 2).send_inplace_offset == 32


def test_hand_checked_bf16_grid_on_3_ranks():
    # the stored sizes of all_gather, bf16, 3 ranks, on the default grid: 8, 16 and 32 B round to
    # zero elements (4/3, 8/3, 16/3 elements per rank are all under 8) and are not measured.
    plan = SweepPlan(collectives=["all_gather"], sizes=GRID, dtype="bfloat16")
    stored = [pts[0].size_bytes for _, pts in plan.points(BY_NAME["all_gather"], 3)]
    assert stored[:5] == [48, 96, 240, 480, 1008]
    assert len(stored) == 25
