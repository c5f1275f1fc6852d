"""commbench.harness.data: buffers at nccl-tests offsets, input patterns and the #wrong check.

Every collective is simulated here in plain torch from the nccl-tests definitions (not from
commbench.harness.collectives.expected): what each rank's receive buffer must hold, built from the
input patterns of all ranks. The check must count 0 on that and exactly 1 after one element
is changed by the smallest possible step.
"""

import pytest
import torch

from commbench.harness.collectives import BY_NAME, COLLECTIVES, CallArgs
from commbench.harness.data import allocate, count_wrong, fill, input_pattern
from commbench.harness.dtypes import get_dtype

WORLDS = (1, 2, 3, 5)
DTYPES = ("float32", "float16", "bfloat16", "int8")
OPS = ("sum", "prod", "max", "min")
CPU = torch.device("cpu")


def reduce_exact(tensors: list[torch.Tensor], op: str, dtype: torch.dtype) -> torch.Tensor:
    """Element-wise reduction over ranks, exact, then stored in `dtype` (ints wrap as in C)."""
    wide = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64) for t in tensors])
    if op == "sum":
        out = wide.sum(0)
    elif op == "prod":
        out = wide.prod(0)
    elif op == "max":
        out = wide.amax(0)
    else:
        out = wide.amin(0)
    return out.to(dtype)


def simulate(name: str, count: int, world: int, rank: int, root: int, op, dtype) -> torch.Tensor | None:
    """What rank `rank`'s receive buffer holds after the collective, from nccl-tests' semantics.

    `count` is nccl-tests' per-rank chunk (the count column). None: undefined (reduce off the root).
    """
    dt = get_dtype(dtype)
    td = dt.torch_dtype

    def x(r: int, n: int) -> torch.Tensor:
        return input_pattern(r, n, dt, op, CPU)

    if name == "all_reduce":  # every rank: reduction of all inputs (count elements each)
        return reduce_exact([x(r, count) for r in range(world)], op, td)
    if name == "reduce":  # root only
        return reduce_exact([x(r, count) for r in range(world)], op, td) if rank == root else None
    if name == "broadcast":  # the root's input everywhere
        return x(root, count).clone()
    if name == "sendrecv":  # ring: receive from the previous rank
        return x((rank - 1) % world, count).clone()
    if name == "all_gather":  # input of count per rank, output rank-major concatenation
        return torch.cat([x(r, count) for r in range(world)])
    if name == "reduce_scatter":  # input count*world per rank; rank keeps block `rank` of the reduction
        full = reduce_exact([x(r, count * world) for r in range(world)], op, td)
        return full[rank * count:(rank + 1) * count].clone()
    if name == "all_to_all":  # block j of rank i's input goes to block i of rank j's output
        return torch.cat([x(r, count * world)[rank * count:(rank + 1) * count] for r in range(world)])
    raise AssertionError(name)


def nudge(t: torch.Tensor, i: int) -> None:
    """Change element i by the smallest integer step that stays representable (as a fault would)."""
    value = t[i].item()
    t[i] = value - 1 if value > 1 else value + 1


CASES = [(c.name, w, d, op) for c in COLLECTIVES for w in WORLDS for d in DTYPES
         for op in (OPS if c.reduces else (None,))]


@pytest.mark.parametrize("name, world, dtype, op", CASES)
def test_check_counts_zero_on_the_simulated_result_and_one_per_corrupted_element(name, world, dtype, op):
    coll = BY_NAME[name]
    dt = get_dtype(dtype)
    # elements; the gather/scatter family rounds it down to 48 per rank (a multiple of 16 bytes for every dtype)
    requested = 48 * world + 3
    for root in sorted({0, world - 1}) if coll.rooted else (0,):
        for rank in range(world):
            lay = coll.layout(requested, dt.itemsize, world, rank)
            assert lay.count == (48 if name in ("all_gather", "reduce_scatter", "all_to_all") else requested)
            args = CallArgs(rank, world, root, op)
            want = simulate(name, lay.count, world, rank, root, op, dtype)
            for in_place in (False, True):
                bufs = allocate(coll, lay, dt, in_place, CPU)
                fill(bufs, args, dt, in_place)
                assert torch.equal(bufs.send, input_pattern(rank, lay.send_numel, dt, op, CPU))
                if want is None:
                    # reduce off the root: nothing is defined, whatever the buffer holds
                    bufs.recv.fill_(77)
                    assert count_wrong(coll, lay, bufs, args, dt) == 0
                    continue
                assert want.dtype == dt.torch_dtype and want.numel() == lay.recv_numel
                bufs.recv.copy_(want)
                assert count_wrong(coll, lay, bufs, args, dt) == 0
                # The largest element is where a loose tolerance would hide an error first.
                i = int(want.to(torch.float64).abs().argmax())
                nudge(bufs.recv, i)
                assert count_wrong(coll, lay, bufs, args, dt) == 1, (rank, in_place, i, want[i].item())
                nudge(bufs.recv, 0 if i else lay.recv_numel - 1)
                assert count_wrong(coll, lay, bufs, args, dt) == 2


def test_check_catches_a_missing_rank_and_a_wrong_rank():
    coll, dt = BY_NAME["all_reduce"], get_dtype("bfloat16")
    world, n = 5, 64
    lay = coll.layout(n, dt.itemsize, world, 0)
    args = CallArgs(0, world, 0, "sum")
    bufs = allocate(coll, lay, dt, True, CPU)
    # the sum without rank 4's contribution
    bufs.recv.copy_(reduce_exact([input_pattern(r, n, dt, "sum", CPU) for r in range(4)], "sum", dt.torch_dtype))
    assert count_wrong(coll, lay, bufs, args, dt) == n
    coll = BY_NAME["broadcast"]
    bufs = allocate(coll, lay, dt, True, CPU)
    bufs.recv.copy_(input_pattern(1, n, dt, None, CPU))  # the data of rank 1, not of the root 0
    assert count_wrong(coll, lay, bufs, args, dt) == n


def test_input_patterns_differ_between_ranks_and_fit_every_dtype():
    for dtype in ("float32", "float16", "bfloat16", "int8"):
        dt = get_dtype(dtype)
        a, b = input_pattern(0, 10, dt, "sum", CPU), input_pattern(1, 10, dt, "sum", CPU)
        assert a.dtype == dt.torch_dtype
        assert a.tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
        assert b.tolist() == [4, 5, 1, 2, 3, 4, 5, 1, 2, 3]
        assert input_pattern(1, 4, dt, "prod", CPU).tolist() == [2, 1, 2, 1]


def test_out_of_place_buffers_are_separate_and_recv_is_zeroed():
    coll, dt = BY_NAME["all_gather"], get_dtype("float32")
    lay = coll.layout(240, dt.itemsize, 3, 1)
    bufs = allocate(coll, lay, dt, False, CPU)
    assert (bufs.send.numel(), bufs.recv.numel()) == (80, 240)
    assert bufs.send.untyped_storage().data_ptr() != bufs.recv.untyped_storage().data_ptr()
    fill(bufs, CallArgs(1, 3, 0, None), dt, False)
    assert torch.count_nonzero(bufs.recv) == 0


def _offset(view: torch.Tensor, whole_ptr: int) -> int:
    return (view.data_ptr() - whole_ptr) // view.element_size()


@pytest.mark.parametrize("world", [2, 3, 5])
def test_in_place_all_gather_sends_from_its_own_block_of_the_output(world):
    coll, dt = BY_NAME["all_gather"], get_dtype("float16")
    for rank in range(world):
        lay = coll.layout(16 * world, dt.itemsize, world, rank)
        bufs = allocate(coll, lay, dt, True, CPU)
        assert bufs.send.untyped_storage().data_ptr() == bufs.recv.untyped_storage().data_ptr()
        assert _offset(bufs.recv, bufs.recv.data_ptr()) == 0 and bufs.recv.numel() == 16 * world
        assert _offset(bufs.send, bufs.recv.data_ptr()) == rank * lay.count == rank * 16
        fill(bufs, CallArgs(rank, world, 0, None), dt, True)
        block = bufs.recv[rank * 16:(rank + 1) * 16]
        assert torch.equal(block, input_pattern(rank, 16, dt, None, CPU))


@pytest.mark.parametrize("world", [2, 3, 5])
def test_in_place_reduce_scatter_receives_into_its_own_block_of_the_input(world):
    coll, dt = BY_NAME["reduce_scatter"], get_dtype("int8")
    for rank in range(world):
        lay = coll.layout(16 * world, dt.itemsize, world, rank)  # int8: 16 bytes per rank, one whole chunk
        bufs = allocate(coll, lay, dt, True, CPU)
        assert bufs.send.untyped_storage().data_ptr() == bufs.recv.untyped_storage().data_ptr()
        assert bufs.send.numel() == 16 * world
        assert _offset(bufs.recv, bufs.send.data_ptr()) == rank * lay.count == rank * 16
        bufs.recv.fill_(-3)
        assert (bufs.send[rank * 16:(rank + 1) * 16] == -3).all()


@pytest.mark.parametrize("name", ["all_reduce", "broadcast", "reduce"])
def test_in_place_single_buffer_collectives_alias_send_and_recv(name):
    coll, dt = BY_NAME[name], get_dtype("bfloat16")
    lay = coll.layout(33, dt.itemsize, 3, 2)
    bufs = allocate(coll, lay, dt, True, CPU)
    assert bufs.send.data_ptr() == bufs.recv.data_ptr() and bufs.send.numel() == bufs.recv.numel() == 33
