"""commbench.timing (adaptive iteration count, CPU timer) and commbench.memory (bytes per rank)."""

import time

import pytest

from commbench.memory import bytes_per_rank
from commbench.plan import SweepPlan
from commbench.timing import CpuTimer, adaptive_iters


@pytest.mark.parametrize("per_iter, budget, lo, hi, expected", [
    (0.001, 0.2, 10, 2000, 200),
    (0.0015, 0.2, 10, 2000, 134),  # rounds up: ceil(133.3)
    (1e-7, 0.2, 10, 2000, 2000),  # capped
    (0.5, 0.2, 10, 2000, 10),  # floored
    (0.0, 0.2, 10, 2000, 2000),  # unmeasurably fast: the most
    (-1.0, 0.2, 10, 2000, 2000),
    (0.01, 0.2, 20, 20, 20),
])
def test_adaptive_iters(per_iter, budget, lo, hi, expected):
    assert adaptive_iters(per_iter, budget, lo, hi) == expected


def test_cpu_timer_gives_one_positive_time_per_iteration():
    calls = []

    def op():
        calls.append(1)
        time.sleep(0.001)

    samples = CpuTimer().run(op, 7)
    assert len(samples) == 7 == len(calls)
    assert all(isinstance(s, float) and s > 0 for s in samples)
    assert all(0.0009 <= s < 1.0 for s in samples)
    assert CpuTimer().run(op, 0) == []


def test_bytes_per_rank_by_hand():
    # all_gather on 4 ranks, float32: 4096 B -> 1024 elements -> 256 per rank (a multiple of 4),
    # send 256 + recv 1024 elements = 5120 B of buffers; the check needs 3 * 8 B per output element.
    plan = SweepPlan(collectives=["all_gather"], sizes=[1024, 4096], dtype="float32")
    assert bytes_per_rank(plan, 4) == (256 + 1024) * 4 + 3 * 8 * 1024 == 29696
    plan.check = False
    assert bytes_per_rank(plan, 4) == 5120


def test_bytes_per_rank_is_the_largest_point_over_collectives():
    # all_reduce 1 MiB of bfloat16: 524288 elements, send+recv 2 MiB, check 3*8*524288 = 12 MiB: 14 MiB.
    # reduce_scatter on 3 ranks: 1 MiB -> 524288 // 12 * 4 = 174760 per rank, send 524280, recv 174760.
    plan = SweepPlan(collectives=["all_reduce", "reduce_scatter"], sizes=[1024, 1 << 20], dtype="bfloat16")
    all_reduce = 2 * 524288 * 2 + 24 * 524288
    reduce_scatter = (524280 + 174760) * 2 + 24 * 524280
    assert bytes_per_rank(plan, 3) == max(all_reduce, reduce_scatter) == all_reduce == 14680064
