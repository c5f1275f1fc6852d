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
        return spread_basis("runs", len(runs), _rel_sd(medians))
    if values.size >= 2:
        return spread_basis("repetitions", int(values.size), _rel_sd(values))
    return _single(values, samples, time_us)


def spread_basis(kind: str, n: int, sd: float) -> Basis:
    """The basis of `n` runs' medians or `n` repetitions with relative sd `sd`: the sd of the
    difference of a new run's median and the reference's."""
    if kind == "runs":
        return Basis(kind, n, sd, sd * math.sqrt(1 + MEDIAN_SD ** 2 / n))
    return Basis(kind, n, sd, math.sqrt(2) * MEDIAN_SD * sd / math.sqrt(n))


def count_for(b: Basis, floor: float, widest: float, most: int) -> int | None:
    """The fewest runs or repetitions (b's kind) that, at b's spread, give a band no wider than
    `widest`; None when more than `most` would be needed, or when b is one repetition's CI (how much
    repetitions spread is not known from one)."""
    if b.kind == "single-run CI":
        return None
    for n in range(b.n + 1, most + 1):
        if tolerance(spread_basis(b.kind, n, b.spread), floor) <= widest:
            return n
    return None


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


# ---- points whose band would be too wide (gate --suggest leaves them out and says what would band them) ----

MOST_REPETITIONS = 20  # a fix asking for more than this is no fix: a quieter system or larger sizes are
MOST_RUNS = 10


@dataclass(frozen=True)
class WidePoint:
    name: str  # the point as messages name it: 'all_reduce float32 1 MiB in place on 2 ranks'
    size: int
    width: float  # its band's lower tolerance (inf: no spread to judge)
    basis: Basis

    def text(self) -> str:
        width = "no spread to judge" if not math.isfinite(self.width) else f"{self.width:.1%}"
        return f"{self.name}: {width} from {self.basis.n} {self.basis.kind}"


def fix(wide: list[WidePoint], written_sizes: set[int], floor: float, widest: float) -> str:
    """The one change that would have banded the wide points, as the numbers say: the runs or
    repetitions (-R) their spread needs, if few enough; else --min-size above them where larger
    points were banded; else --allow-wide where no band passes MAX_ALLOWED_BAND."""
    kinds = {w.basis.kind for w in wide}
    if kinds == {"single-run CI"}:
        return "measure repetitions (-R 5): one repetition cannot say how much a point's median moves"
    kind = "runs" if kinds == {"runs"} else "repetitions"
    most = MOST_RUNS if kind == "runs" else MOST_REPETITIONS
    needed = [count_for(w.basis, floor, widest, most) if w.basis.kind == kind else None for w in wide]
    some = [n for n in needed if n is not None]
    what = f"{max(some, default=0)} runs (gate --suggest RUN1 .. RUN{max(some, default=0)})" if kind == "runs" \
        else f"-R {max(some, default=0)}"
    if len(some) == len(wide):
        return f"measure {what}: their spread needs that many {kind} for a band within {widest:.0%}"
    above = sorted(s for s in written_sizes if s > max(w.size for w in wide))
    if above:
        return (f"--min-size {size_arg(above[0])} leaves them out on purpose (their spread would need more than "
                f"{most} {kind})")
    if all(w.width <= MAX_ALLOWED_BAND for w in wide):
        return f"--allow-wide writes them as wide as measured (at most {MAX_ALLOWED_BAND:.0%})"
    if some:
        return (f"measure {what} to band {len(some)} of them; the others would need more than {most} {kind}: "
                "measure on a quieter system")
    return f"none: more than {most} {kind} would be needed; measure on a quieter system"


def size_arg(n: int) -> str:
    """A size as --min-size takes it: 4M, 64K, 1G, or bytes."""
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def wide_warning(wide: list[WidePoint], written_sizes: set[int], floor: float, widest: float) -> str:
    """'2 points left out, their bands wider than --max-band 15% (...: 23.5% from 5 repetitions; ...); fix: ...'."""
    shown = "; ".join(w.text() for w in wide[:5]) + (f"; and {len(wide) - 5} more" if len(wide) > 5 else "")
    many = len(wide) != 1
    return (f"{len(wide)} point{'s' if many else ''} left out, {'their bands' if many else 'its band'} wider than "
            f"--max-band {widest:.0%} ({shown}); fix: {fix(wide, written_sizes, floor, widest)}")
