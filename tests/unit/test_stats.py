"""commbench.core.stats: medians, Mann-Whitney floors, Holm and Benjamini-Hochberg."""

import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core import stats

pvalues = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=30)
samples = st.lists(st.floats(0.1, 1000.0, allow_nan=False), min_size=1, max_size=12)


def test_medians_and_spreads():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert stats.min_max([2.0, 5.0, 1.0]) == (1.0, 5.0)
    assert stats.iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)
    assert stats.geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert stats.geomean([0.9, 0.9, 0.9]) == pytest.approx(0.9)


@pytest.mark.parametrize("fn", [stats.median, stats.min_max, stats.iqr, stats.geomean])
def test_empty_or_nan_input_raises_instead_of_answering(fn):
    with pytest.raises(ValueError, match="empty"):
        fn([])
    with pytest.raises(ValueError, match="not finite"):
        fn([1.0, float("nan")])


def test_geomean_refuses_non_positive_ratios():
    with pytest.raises(ValueError, match="not positive"):
        stats.geomean([1.0, 0.0])


def test_smallest_one_sided_p_is_one_over_the_arrangements():
    assert stats.min_p_one_sided(3, 3) == pytest.approx(1 / 20)
    assert stats.min_p_one_sided(7, 7) == pytest.approx(1 / 3432)
    assert stats.min_p_one_sided(1, 1) == pytest.approx(0.5)
    assert stats.min_p_one_sided(600, 600) == 0.0  # underflows, no OverflowError
    with pytest.raises(ValueError):
        stats.min_p_one_sided(0, 3)


@given(st.integers(1, 8), st.integers(1, 8))
@settings(max_examples=30, deadline=None)
def test_separated_samples_reach_exactly_the_smallest_p(n1, n2):
    low = np.arange(n1, dtype=float)
    high = np.arange(n2, dtype=float) + 100
    p = stats.mannwhitney_one_sided(low, high, "less")
    assert p == pytest.approx(stats.min_p_one_sided(n1, n2))
    assert stats.mannwhitney_one_sided(high, low, "greater") == pytest.approx(p)


def test_repetitions_needed_matches_the_issue_arithmetic():
    # one point: 3 a side can at best give p = 1/20 = 0.05, which is not < 0.05; 4 gives 1/70
    assert not stats.can_reach(3, 3, 0.05, 1)
    assert stats.can_reach(4, 4, 0.05, 1)
    assert stats.repetitions_needed(0.05, 1) == 4
    # 20 points: alpha / 20 = 0.0025; C(10, 5) = 252 -> 0.004 is not enough, C(12, 6) = 924 is
    assert stats.repetitions_needed(0.05, 20) == 6
    assert stats.can_reach(7, 7, 0.05, 100)


@given(st.floats(1e-4, 0.5), st.integers(1, 500))
@settings(max_examples=50, deadline=None)
def test_repetitions_needed_is_the_smallest_that_can_reach(alpha, m):
    n = stats.repetitions_needed(alpha, m)
    assert stats.can_reach(n, n, alpha, m)
    assert n == 1 or not stats.can_reach(n - 1, n - 1, alpha, m)


@given(samples, samples)
@settings(max_examples=60, deadline=None)
def test_mann_whitney_is_a_p_value_above_the_floor_and_mirror_symmetric(x, y):
    for alt, mirror in (("less", "greater"), ("greater", "less")):
        p = stats.mannwhitney_one_sided(x, y, alt)
        assert 0.0 < p <= 1.0
        assert p >= stats.min_p_one_sided(len(x), len(y)) * (1 - 1e-12)
        assert stats.mannwhitney_one_sided(y, x, mirror) == pytest.approx(p)


def test_ties_in_small_samples_never_undercut_the_exact_floor():
    # scipy's normal approximation says 0.023 here; no permutation test can go below 1/20
    assert scipy.stats.mannwhitneyu([1, 1, 1], [2, 2, 2], alternative="less").pvalue < 0.05
    assert stats.mannwhitney_one_sided([1, 1, 1], [2, 2, 2], "less") == pytest.approx(0.05)
    assert stats.mannwhitney_one_sided([1.0, 1.0], [1.0, 1.0], "less") == 1.0


def test_mann_whitney_refuses_what_it_cannot_answer():
    with pytest.raises(ValueError, match="empty"):
        stats.mannwhitney_one_sided([], [1.0], "less")
    with pytest.raises(ValueError, match="not finite"):
        stats.mannwhitney_one_sided([1.0, math.inf], [1.0], "less")
    with pytest.raises(ValueError, match="alternative"):
        stats.mannwhitney_one_sided([1.0], [2.0], "two-sided")


def test_holm_and_bh_known_values():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.bh_qvalues([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.04, 0.04])
    # a family larger than the p-values given: untested hypotheses count as p = 1
    assert stats.holm([0.01], m=3) == pytest.approx([0.03])
    assert stats.bh_qvalues([0.01, 0.02], m=4) == pytest.approx([0.04, 0.04])
    assert stats.holm([]) == [] and stats.bh_qvalues([]) == []
    with pytest.raises(ValueError):
        stats.holm([0.5, float("nan")])
    with pytest.raises(ValueError):
        stats.bh_qvalues([1.5])
    with pytest.raises(ValueError, match="family size"):
        stats.holm([0.1, 0.2], m=1)


def _holm_by_definition(p, m):
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


@given(pvalues, st.integers(0, 10))
@settings(max_examples=80, deadline=None)
def test_holm_and_bh_properties(p, extra):
    m = len(p) + extra
    h = stats.holm(p, m)
    q = stats.bh_qvalues(p, m)
    assert h == pytest.approx(_holm_by_definition(p, m))
    for raw, hi, qi in zip(p, h, q):
        assert raw <= qi + 1e-12 and qi <= hi + 1e-12 and hi <= 1.0
    # monotone: a smaller raw p never gets a larger adjusted p
    for i in range(len(p)):
        for j in range(len(p)):
            if p[i] < p[j]:
                assert h[i] <= h[j] + 1e-12 and q[i] <= q[j] + 1e-12


@given(pvalues, st.integers(0, 5))
@settings(max_examples=40, deadline=None)
def test_bh_fallback_without_scipy_agrees_with_scipy(p, extra):
    expected = stats.bh_qvalues(p, len(p) + extra)
    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(scipy.stats, "false_discovery_control")
        assert stats.bh_qvalues(p, len(p) + extra) == pytest.approx(expected)


def test_exact_tied_p_agrees_with_scipy_permutation_test():
    rng = np.random.default_rng(7)
    x, y = np.round(rng.random(6), 1), np.round(rng.random(7) + 0.2, 1)
    assert len(np.unique(np.concatenate([x, y]))) < 13  # ties, so the exact branch runs
    for alt in ("less", "greater"):
        ref = scipy.stats.mannwhitneyu(x, y, alternative=alt,
                                       method=scipy.stats.PermutationMethod(n_resamples=np.inf)).pvalue
        assert stats.mannwhitney_one_sided(x, y, alt) == pytest.approx(ref)


def test_median_ci_ranks_are_the_textbook_order_statistics():
    # n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2): [x(2), x(9)], 0-based (1, 8); n = 20: [x(6), x(15)].
    assert stats.median_ci_ranks(10) == (1, 8)
    assert stats.median_ci_ranks(20) == (5, 14)
    assert stats.median_ci_ranks(5) is None  # 2/32 > 0.05: no 95% interval from 5 values
    assert stats.median_ci_ranks(6) == (0, 5)


@settings(max_examples=60, deadline=None)
@given(st.integers(6, 3000))
def test_median_ci_ranks_cover_at_least_the_confidence_and_are_the_tightest(n):
    lo, hi = stats.median_ci_ranks(n)
    assert hi == n - 1 - lo
    coverage = 1 - 2 * scipy.stats.binom.cdf(lo, n, 0.5)  # P(x(lo+1) <= median <= x(hi+1))
    assert coverage >= 0.95
    assert 1 - 2 * scipy.stats.binom.cdf(lo + 1, n, 0.5) < 0.95  # one rank tighter would not do


def test_median_ci_halfwidth_is_the_longer_side_over_the_median():
    values = [100.0] * 5 + [90.0, 110.0, 120.0, 100.0, 100.0]  # sorted: 90, 100 x7, 110, 120
    assert stats.median_ci_halfwidth(values) == pytest.approx(0.10)  # x(2)=100, x(9)=110
    assert stats.median_ci_halfwidth([1.0, 2.0, 3.0]) == math.inf
    with pytest.raises(ValueError):
        stats.median_ci_halfwidth([])


@pytest.mark.parametrize("n1,n2", [(9, 9), (25, 25), (12, 40), (3, 25)])
@pytest.mark.parametrize("ties", [False, True])
def test_mannwhitney_many_gives_each_row_what_its_own_test_gives(n1, n2, ties):
    # compare tests tens of thousands of points in batches: every p-value must be the single test's, bit for bit
    rng = np.random.default_rng(n1 * 100 + n2 + ties)
    x, y = rng.lognormal(0.0, 0.05, (40, n1)), rng.lognormal(0.01, 0.05, (40, n2))
    if ties:
        x, y = np.round(x, 2), np.round(y, 2)
    x[0], y[0] = 1.0, 1.0  # every value equal
    alternatives = rng.choice(["less", "greater"], 40).tolist()
    many = stats.mannwhitney_one_sided_many(x, y, alternatives)
    assert many == [stats.mannwhitney_one_sided(a, b, alt) for a, b, alt in zip(x, y, alternatives)]
    assert many[0] == 1.0


def test_mannwhitney_many_raises_what_the_single_test_raises():
    with pytest.raises(ValueError, match="not finite"):
        stats.mannwhitney_one_sided_many(np.full((2, 10), np.nan), np.ones((2, 10)), ["less", "less"])
    with pytest.raises(ValueError, match="alternative"):
        stats.mannwhitney_one_sided_many(np.ones((1, 10)), np.ones((1, 10)), ["two-sided"])
    with pytest.raises(ValueError, match="2-D"):
        stats.mannwhitney_one_sided_many(np.ones(10), np.ones(10), ["less"])
