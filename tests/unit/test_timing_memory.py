"""commbench.harness.timing (adaptive iteration count, CPU timer) and commbench.harness.memory (bytes per rank)."""

import time

import pytest

from commbench.harness.memory import bytes_per_rank
from commbench.harness.plan import SweepPlan
from commbench.harness.timing import CpuTimer, StopRule, adaptive_iters


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


def _run_rule(rule, draw):
    """Drive StopRule as the runner does: batches of draw() until it says stop; the batch sizes."""
    samples, batches = [], []
    while (batch := rule.next_batch(samples)):
        batches.append(batch)
        samples += [draw() for _ in range(batch)]
    return samples, batches


def test_stop_rule_stops_at_min_iters_when_the_median_is_already_precise():
    samples, batches = _run_rule(StopRule(10.0, 10, 2000, 0.03), lambda: 1e-3)
    assert batches == [10] and len(samples) == 10


def test_stop_rule_grows_batches_until_the_ci_is_within_the_target():
    import random

    from commbench.core.stats import median_ci_halfwidth

    rng = random.Random(7)
    samples, batches = _run_rule(StopRule(1e9, 10, 100_000, 0.03), lambda: 1e-3 * (1 + 0.3 * rng.random()))
    assert median_ci_halfwidth(samples) <= 0.03
    assert len(batches) <= 8  # a handful of checks, not one per iteration
    assert all(b <= 3 * n for b, n in zip(batches[1:], [sum(batches[:i + 1]) for i in range(len(batches))]))


def test_stop_rule_respects_the_budget_and_the_caps():
    import random

    rng = random.Random(1)
    noisy = lambda: 0.01 * (1 + rng.random())  # noqa: E731 - never precise to 0.1%
    samples, _ = _run_rule(StopRule(0.5, 10, 2000, 0.001), noisy)
    assert 0.5 <= sum(samples) < 0.5 + 0.02 * 3 * 10  # stops once the budget is used
    samples, _ = _run_rule(StopRule(1e9, 10, 64, 0.001), noisy)
    assert len(samples) == 64  # max_iters
    samples, _ = _run_rule(StopRule(0.001, 10, 2000, 0.03), lambda: 1.0)
    assert len(samples) == 10  # min_iters even when one iteration is over the budget


def test_stop_rule_without_precision_fills_the_budget():
    samples, batches = _run_rule(StopRule(0.2, 10, 2000, 0.0), lambda: 1e-3)
    assert batches == [10, 190]


def test_warm_up_stops_within_its_share_of_the_budget():
    rule = StopRule(0.2, 10, 2000, 0.03)  # a quarter of 0.2 s: 50 ms of warm-up after the first

    def warm(first_two, warmup=5):  # as the runner does: the pace is the faster of the first two
        return rule.warmups(min(first_two[:warmup]), warmup)

    assert warm([0.0002, 0.0002]) == 5  # small messages: all five
    assert warm([0.5, 0.0002]) == 5  # a slow first call does not cut a small message short
    assert warm([0.02, 0.02]) == 3  # 20 ms each: two after the first (40 ms) fit in 50 ms, three would not
    assert warm([0.06, 0.06]) == 2  # 64 MiB on gloo: the two that always run
    assert warm([0.001], warmup=1) == 1 and rule.warmups(0.0, 4) == 4


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
