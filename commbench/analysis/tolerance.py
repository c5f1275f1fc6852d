"""How wide a suggested band must be (`gate --suggest`, docs/GATE.md "How wide a band is").

The gate judges a point's median busbw, so a band must cover how much that median moves from one
run to the next on the same system, not how much single iterations scatter (a band of 3x the
per-iteration spread let a 25% regression pass). The basis, best first:

- several runs (`gate --suggest RUN1 RUN2 ...`): the spread of the runs' medians, which holds
  everything that changes between runs (placement, time of day, the fabric's other traffic);
- repetitions of one run (`-R`): the spread of the repetitions' values, scaled to the spread of
  a median of that many (a new run is assumed to repeat as often);
- one repetition: the confidence interval of its median over the iterations; it knows nothing of
  run-to-run drift, and the bands file says so.

The band is Z standard deviations of the difference between the reference median and a new
run's median, never narrower than the floor; wider than the limit it is refused (the fix is more
repetitions, a quieter system or larger sizes), unless allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from commbench.core import stats

Z = 3.5  # standard deviations of the difference a band covers: benchmarks/gate_error_rates.py chose it
# ... or more where the sd comes from few values: Student's t at this one-sided level for n - 1
# degrees of freedom (3 runs: 4.3; 5 repetitions: 3.5 stays; 2 of anything: 12.7, so refused)
T_LEVEL = 0.975
DEFAULT_FLOOR = 0.03
DEFAULT_MAX_BAND = 0.15
MAX_ALLOWED_BAND = 0.5  # even with --allow-wide: a band this wide gates nothing
MEDIAN_SD = math.sqrt(math.pi / 2)  # the sd of a median of n normal values is 1.2533 sd / sqrt(n)
CI_TO_SD = 1.96  # a 95% CI half-width is about 1.96 sd of the median


@dataclass(frozen=True)
class Basis:
    kind: str  # "runs", "repetitions" or "single-run CI"
    n: int  # runs, repetitions, or iterations
    spread: float  # relative: the runs' or repetitions' sd, or the CI half-width of the one median
    diff_sd: float  # relative sd of (reference median - a new run's median)

    @property
    def z(self) -> float:
        """How many diff_sd a band spans: Z, or Student's t where the sd rests on few values."""
        if self.kind == "single-run CI" or self.n < 2:
            return Z
        from scipy.stats import t

        return max(Z, float(t.ppf(T_LEVEL, self.n - 1)))

    def text(self, tol: float) -> str:
        what = {"runs": f"{self.n} runs: sd of their medians {self.spread:.1%}",
                "repetitions": f"{self.n} repetitions of one run: sd {self.spread:.1%} (run-to-run drift not seen)",
                "single-run CI": f"one repetition: 95% CI of its median +-{self.spread:.1%} over {self.n} "
                                 "iterations (run-to-run drift not seen)"}[self.kind]
        return f"-{tol:.1%} from {what}"


def _rel_sd(values: np.ndarray) -> float:
    """The sample standard deviation over the median. Not a robust one: with 2..10 values a robust
    estimate is often far too small, and an outlier here should widen the band, not narrow it."""
    med = float(np.median(values))
    return float(np.std(values, ddof=1)) / med if values.size >= 2 and med > 0 else 0.0


def basis(run_ids: list, values: np.ndarray, samples: list | None, time_us: list) -> Basis:
    """The basis of one point's band from its rows: each row's run id, value (busbw), per-iteration
    samples and median time."""
    runs: dict[Any, list[float]] = {}
    for r, v in zip(run_ids, values):
        runs.setdefault(r, []).append(v)
    if len(runs) >= 2:
        medians = np.asarray([float(np.median(v)) for v in runs.values()], dtype=float)
        sd = _rel_sd(medians)
        return Basis("runs", len(runs), sd, sd * math.sqrt(1 + MEDIAN_SD ** 2 / len(runs)))
    if values.size >= 2:
        sd = _rel_sd(values)
        return Basis("repetitions", int(values.size), sd, math.sqrt(2) * MEDIAN_SD * sd / math.sqrt(values.size))
    return _single(values, samples, time_us)


def _single(values: np.ndarray, samples: list | None, time_us: list) -> Basis:
    row_samples = samples[0] if samples else None
    if row_samples is None or len(row_samples) < 6 or not time_us[0]:
        return Basis("single-run CI", len(row_samples or []), math.inf, math.inf)
    arr = np.asarray(row_samples, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    per_iter = float(values[0]) * float(time_us[0]) / arr  # busbw of each iteration
    half = stats.median_ci_halfwidth(per_iter) if per_iter.size >= 6 else math.inf
    return Basis("single-run CI", int(per_iter.size), half, math.sqrt(2) * half / CI_TO_SD)


def tolerance(b: Basis, floor: float) -> float:
    """The band's lower tolerance: b.z sds of the difference, at least the floor, rounded up to 0.5%."""
    if not math.isfinite(b.diff_sd):
        return math.inf
    return max(floor, math.ceil(b.z * b.diff_sd * 200) / 200)
