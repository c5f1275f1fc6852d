"""The contention factor of a group (`sweep --layout ... --solo`, docs/LAYOUTS.md): its busbw
while every group ran at once over its busbw alone, with a distribution-free confidence interval
and a Mann-Whitney verdict in compare's words, from the per-iteration times of both kinds of pass.

A factor of 0.6 says the group moved 60% of the bytes a second it moved alone: the others took
the rest of what they share (a NIC, a switch port, a PCIe root, memory bandwidth). Plain numbers
in, plain values and text out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench.core import stats

ALPHA = 0.05  # compare's default significance level
THRESHOLD = 0.03  # compare's default minimum effect for bandwidth: a factor within 3% of 1 is no contention
# Each median's interval at this confidence: both hold together with at least 95% (Bonferroni), so
# the ratio's interval, taken from their ends, covers the true ratio with at least 95% too.
EACH = 1 - (1 - 0.95) / 2


@dataclass(frozen=True)
class Contention:
    """concurrent busbw / solo busbw of one group at one point (times in seconds)."""

    factor: float
    low: float | None  # the 95% interval; None when a side has too few iterations (6 or fewer)
    high: float | None
    p_value: float  # one-sided Mann-Whitney U on the iteration times, in the direction seen
    verdict: str  # "contended", "faster", "unchanged" or "inconclusive", as compare words them
    concurrent: int  # iterations of each kind
    solo: int

    def text(self) -> str:
        ci = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None and self.high is not None else ""
        return (f"contention {self.factor:.2f}{ci} ({self.verdict}, Mann-Whitney p={self.p_value:.2g}, "
                f"{self.concurrent} concurrent / {self.solo} solo iterations)")


def contention(concurrent_s: Sequence[float], solo_s: Sequence[float], alpha: float = ALPHA,
               threshold: float = THRESHOLD) -> Contention:
    """The factor from per-iteration times: busbw is S x factor / time, so concurrent busbw over
    solo busbw is solo time over concurrent time, medians taken on the times."""
    conc, solo = np.sort(np.asarray(concurrent_s, float)), np.sort(np.asarray(solo_s, float))
    factor = float(np.median(solo) / np.median(conc))
    low = high = None
    rc, rs = stats.median_ci_ranks(conc.size, EACH), stats.median_ci_ranks(solo.size, EACH)
    if rc is not None and rs is not None:
        low, high = float(solo[rs[0]] / conc[rc[1]]), float(solo[rs[1]] / conc[rc[0]])
    slower = factor < 1  # concurrent times longer: test that they tend to be greater
    p = stats.mannwhitney_one_sided(conc, solo, "greater" if slower else "less")
    big = abs(factor - 1) >= threshold
    if p < alpha:
        verdict = ("contended" if slower else "faster") if big else "unchanged"
    else:
        verdict = "inconclusive" if big else "unchanged"
    return Contention(factor, low, high, p, verdict, int(conc.size), int(solo.size))


def aggregate_bps(size_bytes: int, times_s: Sequence[float]) -> float:
    """The bytes a second every concurrent group moved together: each group's S over its median
    time, summed (algbw's bytes, nccl-tests' S: what the groups' users asked to move)."""
    return float(sum(size_bytes / t for t in times_s if t > 0 and math.isfinite(t)))
