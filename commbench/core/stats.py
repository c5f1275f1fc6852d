"""Small, pure statistics for comparisons (docs/COMPARE.md): medians and spreads, the median's
distribution-free confidence interval, one-sided Mann-Whitney, Holm, Benjamini-Hochberg, the
repetitions a test needs.

Every function checks its input and raises ValueError on anything it cannot answer honestly
(an empty sample, a NaN, a p-value outside [0, 1]): a comparison must never pass because the
statistics quietly produced nothing.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# A sample: numbers in a sequence or an array (every function reads it through np.asarray).
Values = Sequence[float] | np.ndarray


def _scipy() -> Any:
    """scipy.stats, loaded on first use: it costs a second at start-up, and commands that refuse a
    flag or read no samples never need it."""
    from scipy import stats

    return stats

# Largest number of arrangements C(n1 + n2, n1) enumerated exactly when samples hold ties
# (8 a side: 12,870 splits, a few milliseconds); larger samples use the tie-corrected normal approximation.
EXACT_TIES_LIMIT = 13_000


def _finite(values: Values, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{what} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} holds a value that is not finite")
    return arr


def median(values: Values) -> float:
    return float(np.median(_finite(values, "median of")))


def min_max(values: Values) -> tuple[float, float]:
    arr = _finite(values, "min..max of")
    return float(arr.min()), float(arr.max())


def iqr(values: Values) -> tuple[float, float]:
    """The 25th and 75th percentiles (linear interpolation)."""
    arr = _finite(values, "IQR of")
    lo, hi = np.percentile(arr, [25, 75])
    return float(lo), float(hi)


def geomean(values: Values) -> float:
    arr = _finite(values, "geometric mean of")
    if np.any(arr <= 0):
        raise ValueError("geometric mean of a value that is not positive")
    return float(np.exp(np.mean(np.log(arr))))


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """0-based positions (lo, hi) in a sorted sample of n of the distribution-free confidence
    interval of the median, [x(k), x(n+1-k)]: k is the largest with P(Binomial(n, 1/2) < k) at most
    (1 - confidence) / 2, so the interval covers the true median with at least `confidence`
    whatever the distribution (order statistics, no bootstrap). None when n is too small for any
    (n <= 5 at 95%)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} must lie between 0 and 1")
    if n < 1:
        return None
    tail = (1 - confidence) / 2
    j = int(_scipy().binom.ppf(tail, n, 0.5))  # the smallest j with P(B <= j) >= tail
    if _scipy().binom.cdf(j, n, 0.5) > tail:
        j -= 1  # keep P(B <= j) <= tail: coverage at least `confidence`
    if j < 0:
        return None
    return j, n - 1 - j


def median_ci_halfwidth(values: Values, confidence: float = 0.95) -> float:
    """Half-width of the median's confidence interval (median_ci_ranks) relative to the median:
    the longer of its two sides, over the median; inf when the sample is too small for one."""
    arr = np.sort(_finite(values, "confidence interval of"))
    ranks = median_ci_ranks(arr.size, confidence)
    med = float(np.median(arr))
    if ranks is None or med <= 0:
        return math.inf
    lo, hi = ranks
    return max(med - float(arr[lo]), float(arr[hi]) - med) / med


def mannwhitney_one_sided(x: Values, y: Values, alternative: str) -> float:
    """p-value of the one-sided Mann-Whitney U test of x against y.

    alternative "less": x tends to be smaller than y; "greater": x tends to be larger. scipy picks
    the exact distribution for small samples without ties and the normal approximation (with
    tie correction and continuity correction) otherwise.
    """
    if alternative not in ("less", "greater"):
        raise ValueError(f"alternative must be 'less' or 'greater', not {alternative!r}")
    xa, ya = _finite(x, "first sample"), _finite(y, "second sample")
    both = np.concatenate([xa, ya])
    if np.ptp(both) == 0:
        return 1.0  # every value equal: no evidence either way (scipy would return NaN)
    if np.unique(both).size < both.size and math.comb(both.size, xa.size) <= EXACT_TIES_LIMIT:
        # Ties (rounded imports) in small samples: the normal approximation can undercut the
        # exact floor 1 / C(n1 + n2, n1), and scipy's exact method ignores ties.
        p = _exact_with_ties(both, xa.size, alternative)
    else:
        p = float(_scipy().mannwhitneyu(xa, ya, alternative=alternative).pvalue)
    if not 0.0 <= p <= 1.0:  # NaN included
        raise ValueError(f"Mann-Whitney U gave p={p} for samples of {xa.size} and {ya.size}")
    # No permutation test can go below one arrangement in C(n1 + n2, n1); the approximation can.
    return max(p, min_p_one_sided(xa.size, ya.size))


def mannwhitney_one_sided_many(x: Any, y: Any, alternatives: Sequence[str]) -> list[float]:
    """mannwhitney_one_sided of row i of x against row i of y, for every row: the same p-values,
    far faster for thousands of points (scipy's per-call overhead is most of a small test).

    x and y are 2-D (rows of equal length). Where both samples are longer than 8, scipy always
    takes the normal approximation and the exact ties enumeration is out of reach, so one
    vectorised scipy call per alternative gives each row what its own call gives; otherwise, or
    on anything the single test would reject, this falls back to one call per row."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    alternatives = list(alternatives)
    if xa.ndim != 2 or ya.ndim != 2 or not len(xa) == len(ya) == len(alternatives):
        raise ValueError("x and y must be 2-D arrays with one row per alternative")
    n1, n2 = xa.shape[1], ya.shape[1]
    def one_by_one() -> list[float]:
        return [mannwhitney_one_sided(a, b, alt) for a, b, alt in zip(xa, ya, alternatives)]

    if (n1 <= 8 or n2 <= 8 or not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya)))
            or not set(alternatives) <= {"less", "greater"} or math.comb(n1 + n2, n1) <= EXACT_TIES_LIMIT):
        return one_by_one()
    p = np.empty(len(xa))
    which = np.asarray(alternatives)
    for alternative in ("less", "greater"):
        rows = which == alternative
        if rows.any():
            with np.errstate(divide="ignore", invalid="ignore"):
                p[rows] = _scipy().mannwhitneyu(xa[rows], ya[rows], alternative=alternative, axis=1).pvalue
    p[np.ptp(np.concatenate([xa, ya], axis=1), axis=1) == 0] = 1.0  # as the single test: no evidence
    if not np.all((p >= 0.0) & (p <= 1.0)):  # NaN included: let the single test name the error
        return one_by_one()
    floored: list[float] = np.maximum(p, min_p_one_sided(n1, n2)).tolist()
    return floored


def _exact_with_ties(both: np.ndarray, n1: int, alternative: str) -> float:
    """Exact permutation p of the rank sum of the first n1 values (mid-ranks for ties): the
    share of all C(n, n1) splits whose rank sum is at least as extreme as the observed one."""
    ranks = _scipy().rankdata(both)
    observed = ranks[:n1].sum()
    splits = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(both.size), n1)),
                         dtype=np.intp).reshape(-1, n1)
    sums = ranks[splits].sum(axis=1)  # mid-ranks are multiples of 1/2: these sums are exact
    extreme = sums <= observed if alternative == "less" else sums >= observed
    return float(np.count_nonzero(extreme) / sums.size)


def _check_pvalues(pvalues: Sequence[float], m: int | None) -> tuple[np.ndarray, int]:
    p = np.asarray(pvalues, dtype=float).ravel()
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    family = p.size if m is None else int(m)
    if family < p.size:
        raise ValueError(f"family size {family} is smaller than the {p.size} p-values given")
    return p, family


def holm(pvalues: Sequence[float], m: int | None = None) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    m is the size of the family when it holds more hypotheses than p-values given (hypotheses
    that could not be tested count as p = 1, which is conservative).
    """
    p, family = _check_pvalues(pvalues, m)
    order = np.argsort(p, kind="stable")
    steps = (family - np.arange(p.size)) * p[order]
    adjusted = np.minimum(1.0, np.maximum.accumulate(steps))
    out = np.empty_like(p)
    out[order] = adjusted
    adjusted_p: list[float] = out.tolist()
    return adjusted_p


def bh_qvalues(pvalues: Sequence[float], m: int | None = None) -> list[float]:
    """Benjamini-Hochberg q-values (adjusted p-values), in the input order; m as for holm()."""
    p, family = _check_pvalues(pvalues, m)
    if p.size == 0:
        return []
    padded = np.concatenate([p, np.ones(family - p.size)])
    fdc = getattr(_scipy(), "false_discovery_control", None)
    if fdc is not None:  # scipy >= 1.11
        q = np.asarray(fdc(padded, method="bh"), dtype=float)
    else:
        order = np.argsort(padded, kind="stable")
        ranked = padded[order] * family / np.arange(1, family + 1)
        q = np.empty_like(padded)
        q[order] = np.minimum(1.0, np.minimum.accumulate(ranked[::-1])[::-1])
    qvalues: list[float] = q[: p.size].tolist()
    return qvalues


def min_p_one_sided(n1: int, n2: int) -> float:
    """The smallest p-value a one-sided Mann-Whitney test can give for samples of n1 and n2:
    1 / C(n1 + n2, n1), reached when the samples do not overlap at all (exact distribution)."""
    if n1 < 1 or n2 < 1:
        raise ValueError(f"samples of {n1} and {n2}: each needs at least one value")
    if n1 + n2 > 1000:  # beyond 1e-300 anyway; skip the big-integer arithmetic
        return math.exp(-(math.lgamma(n1 + n2 + 1) - math.lgamma(n1 + 1) - math.lgamma(n2 + 1)))
    return 1 / math.comb(n1 + n2, n1)  # int / int: exact even where the integer exceeds a float


def can_reach(n1: int, n2: int, alpha: float, m: int = 1) -> bool:
    """Whether samples of n1 and n2 could be significant at the strictest Holm step alpha / m."""
    _check_alpha(alpha, m)
    return min_p_one_sided(n1, n2) < alpha / m


def repetitions_needed(alpha: float, m: int = 1) -> int:
    """The fewest repetitions a side (n1 = n2 = n) with which a one-sided Mann-Whitney test can
    reach alpha / m, the strictest step of Holm's procedure over m points."""
    _check_alpha(alpha, m)
    target = alpha / m
    if not target > 1e-300:  # an alpha that underflows: no sample size reaches it (and the loop would not end)
        raise ValueError(f"alpha {alpha} over {m} points is below 1e-300: no number of repetitions reaches it")
    n = 1
    while not min_p_one_sided(n, n) < target:
        n += 1
    return n


def _check_alpha(alpha: float, m: int) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha {alpha} must lie between 0 and 1")
    if m < 1:
        raise ValueError(f"number of points {m} must be at least 1")
