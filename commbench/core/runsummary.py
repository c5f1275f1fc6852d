"""A run's rows in a few sentences: whether each point reached the precision its stop rule aimed at
(and why not), each collective's average and peak busbw, each point's median over repetitions,
and reduce_scatter's busbw next to all_reduce's. Plain rows in, plain values and text out: the
sweep's closing lines (harness/closing.py) and the report (analysis/curves/curvetables.py) say the same.

Nothing here needs a column the results file lacks: the achieved precision is the half-width of
the median's confidence interval over `samples_us` (the per-iteration maxima over ranks that the
stop rule itself judged, harness/timing.py StopRule), and why a point stopped follows from its
iteration count and the time its samples add up to.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

from commbench.core import workloadspec
from commbench.core.columns import RUN_POINT_KEY
from commbench.core.grouplabel import group_label
from commbench.core.options import target_note
from commbench.core.stats import median_ci_halfwidth, median_ci_ranks
from commbench.core.units import counted, format_size
from commbench.core.vocab import COLLECTIVES

# Workloads whose samples_us are the maxima the stop rule judged (Session.time_call); pairs' rows
# hold one end's own times (Session.time_each), so their precision is not the rule's.
JUDGED_BY_STOP_RULE = frozenset(workloadspec.names(stop_rule=True))
MISSED_MARK = "~"
REACHED, TIME_BUDGET, MAX_ITERS = "reached", "time budget", "max iters"


@dataclass(slots=True)
class Precision:
    halfwidth: float  # the 95% CI half-width of the median over the median; inf: too few samples
    target: float  # --precision
    why: str  # REACHED, TIME_BUDGET or MAX_ITERS

    @property
    def reached(self) -> bool:
        return self.why == REACHED


def point_precision(samples_us: Sequence[float] | None, iters: int, target: float, max_iters: int,
                    width: float | None = None) -> Precision | None:
    """How precisely a point's median is known and why its loop stopped; None where no target
    applied (fixed --iters, --precision 0) or nothing was timed. `width`: the half-width when the
    caller has it (halfwidths, for many rows at once)."""
    if width is None:
        values = [] if samples_us is None else [float(v) for v in samples_us if _finite(v)]
        if target <= 0 or not values:
            return None
        width = median_ci_halfwidth(values)
    if target <= 0 or math.isnan(width):
        return None
    if width <= target * (1 + 1e-9):  # the rule judged seconds, these are microseconds: rounding only
        return Precision(width, target, REACHED)
    # StopRule.next_batch stops at only three: precision, --max-iters, or the time budget spent
    return Precision(width, target, MAX_ITERS if max_iters and iters >= max_iters else TIME_BUDGET)


def halfwidths(samples: Sequence[Sequence[float] | None]) -> list[float]:
    """median_ci_halfwidth of many samples at once (a run's 100,000 rows in a second, not in 13):
    those of one length sorted together; nan where a sample is empty or holds a value that is not
    finite (point_precision then drops those values itself)."""
    out = [math.nan] * len(samples)
    by_length: dict[int, list[int]] = {}
    for i, values in enumerate(samples):
        if values is not None and len(values):
            by_length.setdefault(len(values), []).append(i)
    for n, where in by_length.items():
        arr = np.sort(np.asarray([np.asarray(samples[i], dtype=float) for i in where]), axis=1)
        ok = np.all(np.isfinite(arr), axis=1)
        med = np.median(arr, axis=1)
        ranks = median_ci_ranks(n)
        if ranks is None:
            width = np.full(len(where), math.inf)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                width = np.maximum(med - arr[:, ranks[0]], arr[:, ranks[1]] - med) / med
            width[~(med > 0)] = math.inf
        for i, w, good in zip(where, width.tolist(), ok.tolist()):
            out[i] = w if good else math.nan
    return out


def precision_of(row: Mapping[str, Any], plan: Mapping[str, Any], width: float | None = None) -> Precision | None:
    """point_precision for a result row under its plan (RunOptions' fields: iters, precision,
    time_budget, max_iters); None for a fixed count, --precision 0 or a workload the rule did not judge."""
    if plan.get("iters") or row.get("workload", "sweep") not in JUDGED_BY_STOP_RULE:
        return None
    return point_precision(row.get("samples_us"), int(row.get("iters") or 0), float(plan.get("precision") or 0),
                           int(plan.get("max_iters") or 0), None if width is None or math.isnan(width) else width)


def percent(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


CAP = 1.0  # a half-width beyond the median itself says only that the median is not known: shown capped


def halfwidth_text(width: float) -> str:
    """±7.3%, ±12%; >±100% past CAP (±856% would claim a precision about the imprecision); ±? where
    too few samples gave no interval."""
    if not math.isfinite(width):
        return "±?"
    if width > CAP:
        return f">±{CAP:.0%}"
    return f"±{width:.0%}" if width >= 0.095 else f"±{width:.1%}"


def rule_fields(plan: Any) -> dict[str, Any]:
    """What the stop rule judged a run by, from its RunOptions (the closing lines and the table's
    marks read these): the fields precision_lines and precision_of take."""
    return {name: getattr(plan, name, None) for name in
            ("iters", "precision", "time_budget", "max_iters", "auto_fields", "backend", "workload", "layout",
             "split")}


def precision_lines(rows: Sequence[Mapping[str, Any]], plan: Mapping[str, Any]) -> list[str]:
    """'N of M points reached 3%' and, when some did not, why they stopped, the worst, and what
    the mark in the table means; [] where no target applied."""
    if plan.get("iters") or not float(plan.get("precision") or 0) > 0:
        return []
    widths = halfwidths([r.get("samples_us") if r.get("workload", "sweep") in JUDGED_BY_STOP_RULE else None
                         for r in rows])
    judged = [(r, p) for r, w in zip(rows, widths) if (p := precision_of(r, plan, w)) is not None]
    if not judged:
        return []
    target = judged[0][1].target
    missed = [(r, p) for r, p in judged if not p.reached]
    reps = len({r.get("repetition") for r, _ in judged})
    count = f"{len(judged) - len(missed)} of {len(judged)} points" + (
        f" ({len(judged) // reps} x {reps} repetitions)" if reps > 1 and len(judged) % reps == 0 else "")
    lines = [f"# Precision: {count} reached {percent(target)} (95% CI half-width of the median)"]
    if missed:
        why = {w: sum(1 for _, p in missed if p.why == w) for w in (TIME_BUDGET, MAX_ITERS)}
        reasons = [f"{n} at the time budget ({float(plan.get('time_budget') or 0):g} s)" if w == TIME_BUDGET else
                   f"{n} at --max-iters {plan.get('max_iters')}" for w, n in why.items() if n]
        lines[0] += f"; {len(missed)} stopped short: " + ", ".join(reasons)
        lines.append(_missed_line(missed))
    if any(_cell(r.get("group_dim")) for r, _ in judged):  # a group stopping early would leave the others alone
        lines[0] += " (parallel groups do not stop at the target: each fills the time budget, docs/LAYOUTS.md)"
    note = target_note(plan)
    return lines[:1] + ([f"# Target: {note}"] if note else []) + lines[1:]


def _missed_line(missed: Sequence[tuple[Mapping[str, Any], Precision]]) -> str:
    """What the marks mean and the worst of them; past CAP, how many are only known to be wide (one
    calm line: such a point's times varied more than its median, not a failure)."""
    worst_row, worst = max(missed, key=lambda rp: rp[1].halfwidth)
    # sweep's table marks them; a layout run's live line (one per point and dimension) does not
    marked = any(r.get("workload", "sweep") == "sweep" and not _cell(r.get("group_dim")) for r, _ in missed)
    wide = sum(1 for _, p in missed if CAP < p.halfwidth < math.inf)  # inf: too few samples, not wide
    worst_text = f"{halfwidth_text(worst.halfwidth)}: {point_name(worst_row)}"
    if wide and math.isfinite(worst.halfwidth):
        worst_text = (f"{halfwidth_text(worst.halfwidth)}: {counted(wide, 'point')}, e.g. {point_name(worst_row)}, "
                      "whose times varied more than their median")
    return (f"# {MISSED_MARK} ±N% in the table: that point's median is known only to ±N% ("
            f"{'' if worst_text.startswith('>') else 'worst '}{worst_text})" if marked
            else f"# Worst: {worst_text} (its median's 95% CI half-width)") + \
        "; more --time-budget or --max-iters, or a quieter machine, narrow it"


def point_where(row: Mapping[str, Any]) -> str:
    """What tells a point from its neighbours: its size (a sweep), its bucket (buckets, with its
    ZeRO stage in zero, and its gradient accumulation where that is more than 1)."""
    bucket, stage, accum = row.get("bucket_bytes"), row.get("zero_stage"), row.get("grad_accum")
    if _finite(bucket) or _finite(stage):
        parts = [f"ZeRO-{int(stage)}" if _finite(stage) else "",
                 f"buckets of {format_size(int(bucket))}" if _finite(bucket) else "",
                 f"GAS {int(accum)}" if _finite(accum) and accum > 1 else ""]
        return ", ".join(p for p in parts if p)
    return format_size(int(row.get("size_bytes") or 0))


def point_name(row: Mapping[str, Any]) -> str:
    where = " in place" if row.get("in_place") and row.get("collective") in _BOTH else ""
    return f"{row.get('collective')} {point_where(row)}{where}"


_BOTH = frozenset(c.name for c in COLLECTIVES if len(c.placements) > 1)  # the collectives that have both placements


# --------------------------------------------------------------------------- medians, series


POINT_KEYS = RUN_POINT_KEY  # a point of one run (core/columns.py)


@dataclass
class PointMedian:
    """One point over its repetitions."""

    first: Mapping[str, Any]  # the point's first row (its key columns, count, workload)
    time_us: float
    algbw: float
    busbw: float
    times_us: list[float]  # each repetition's median time
    halfwidth: float = math.nan  # the median over its rows of their medians' 95% CI half-width (nan: unknown)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.times_us), max(self.times_us)


def _finite(value: Any) -> TypeGuard[float]:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _cell(value: Any) -> Any:
    """A key cell: NaN (pandas' missing value) as None, so that missing cells are one key."""
    return None if isinstance(value, float) and math.isnan(value) else value


def point_medians(rows: Iterable[Mapping[str, Any]]) -> list[PointMedian]:
    """Per point (POINT_KEYS), medians over its repetitions of time, algbw and busbw, in the order
    the points were first measured; rows without a finite busbw (a failed link) are left out."""
    groups: dict[tuple[Any, ...], list[tuple[Mapping[str, Any], float]]] = {}
    kept = [r for r in rows if _finite(r.get("busbw_GBps")) and _finite(r.get("time_us"))]
    for r, w in zip(kept, halfwidths([r.get("samples_us") for r in kept])):
        groups.setdefault(tuple(_cell(r.get(k)) for k in POINT_KEYS), []).append((r, w))
    return [PointMedian(g[0][0], statistics.median(float(r["time_us"]) for r, _ in g),
                        statistics.median(float(r.get("algbw_GBps") or 0) for r, _ in g),
                        statistics.median(float(r["busbw_GBps"]) for r, _ in g), [float(r["time_us"]) for r, _ in g],
                        _median_of([w for _, w in g]))
            for g in groups.values()]


def _median_of(values: Sequence[float]) -> float:
    """The median of the values that are not nan (inf counts: too few samples); nan where none is."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan


@dataclass
class Series:
    """One collective (in one setting and, in a layout run, one group dimension) of a run: its
    points' medians; a layout run's points are its groups' concurrent rows (series_of)."""

    collective: str
    workload: str
    settings: str | None
    points: list[PointMedian]
    group_dim: str | None = None

    @property
    def label(self) -> str:
        what = self.collective if self.workload in ("sweep", "") else f"{self.collective} ({self.workload})"
        if self.group_dim:
            what += f" ({self.group_dim}, concurrent groups)"
        return what + (f" [{self.settings}]" if self.settings else "")

    @property
    def avg(self) -> float:
        """nccl-tests' "Avg bus bandwidth": the mean over every size and placement."""
        return statistics.fmean(p.busbw for p in self.points)

    @property
    def peak(self) -> PointMedian:
        return max(self.points, key=lambda p: p.busbw)


def solo(row: Mapping[str, Any]) -> bool:
    """A layout run's row of a group measured alone (`--solo`): not what the run's groups do at once."""
    return bool(_cell(row.get("group_dim"))) and not row.get("concurrent")


def series_of(medians: Iterable[PointMedian]) -> list[Series]:
    """A series per collective, setting and group dimension. A layout run's solo rows are left out:
    averaged with the concurrent ones they would mix two questions (the groups at once, each alone),
    and the concurrent rows are what the layout does; each group's row at a point counts once."""
    out: dict[tuple[Any, ...], Series] = {}
    for p in medians:
        if solo(p.first):
            continue
        key = (_cell(p.first.get("settings")), p.first.get("collective"), p.first.get("workload") or "",
               _cell(p.first.get("group_dim")))
        if key not in out:
            out[key] = Series(str(key[1]), str(key[2]), key[0], [], key[3])
        out[key].points.append(p)
    return list(out.values())


def gbps(value: float) -> str:
    """A bandwidth with 3 significant digits (GB/s)."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) < 1e-4:
        return f"{value:.2e}"
    return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"


def size_range(sizes: Iterable[int]) -> str:
    s = sorted(set(int(v) for v in sizes))
    return format_size(s[0]) if len(s) == 1 else f"{format_size(s[0])}..{format_size(s[-1])}"


def _extent(points: Sequence[PointMedian]) -> str:
    """What a series covers: its sizes, or its ZeRO stages, buckets and accumulations."""
    stages: list[Any] = [p.first.get("zero_stage") for p in points]
    buckets: list[Any] = [p.first.get("bucket_bytes") for p in points]
    parts = []
    if all(_finite(v) for v in stages):
        lo, hi = min(int(v) for v in stages), max(int(v) for v in stages)
        parts.append(f"ZeRO-{lo}" if lo == hi else f"ZeRO-{lo}..{hi}")
    if all(_finite(v) for v in buckets):
        parts.append(f"buckets of {size_range(int(v) for v in buckets)}")
    accums = {int(v) for v in (p.first.get("grad_accum") for p in points) if _finite(v)}
    if parts and len(accums) > 1:
        parts.append(f"GAS {min(accums)}..{max(accums)}")
    return ", ".join(parts) or size_range(int(p.first.get("size_bytes") or 0) for p in points)


def bandwidth_lines(series: Sequence[Series]) -> list[str]:
    """Each collective's average and peak busbw, with units and what they cover; nccl-tests' own
    "Avg bus bandwidth" line (now with its unit) only where one collective makes it meaningful."""
    if not series:
        return []
    width = max(len(s.label) for s in series)
    lines = []
    for s in series:
        peak = s.peak
        both = len({p.first.get("in_place") for p in s.points}) > 1
        where = (f" {'in place' if peak.first.get('in_place') else 'out of place'}" if both else "")
        lines.append(f"# {s.label:<{width}}  avg bus bandwidth {gbps(s.avg)} GB/s, peak {gbps(peak.busbw)} GB/s"
                     f"{_plus_minus(peak.halfwidth)} at {point_where(peak.first)}{where}{_group_of(peak.first)} "
                     f"({_extent(s.points)}: {counted(len(s.points), 'point')}{_groups_counted(s.points)})")
    if len(series) == 1:
        lines.append(f"# Avg bus bandwidth    : {series[0].avg:.4f} GB/s")
    return lines


def _plus_minus(width: float) -> str:
    """' ±4.1%' after a figure whose median's half-width is known (busbw is bytes over that median
    time, so it is known to the same fraction, to first order); '' where it is not (or too few samples
    gave no interval)."""
    return f" {halfwidth_text(width)}" if math.isfinite(width) else ""


def _group_of(row: Mapping[str, Any]) -> str:
    """The group a layout run's peak was measured in: `, dp1 [1,3]`."""
    dim = _cell(row.get("group_dim"))
    return f", {group_label(dim, row.get('group_index'), True, row.get('group_ranks'))}" if dim else ""


def _groups_counted(points: Sequence[PointMedian]) -> str:
    """A layout series' points are its groups' rows: say how many groups they hold."""
    if not points or not _cell(points[0].first.get("group_dim")):
        return ""
    return f" of {counted(len({p.first.get('group_index') for p in points}), 'group')}"


# --------------------------------------------------------------------------- reduce_scatter vs all_reduce


@dataclass(frozen=True)
class Gap:
    """reduce_scatter's busbw over all_reduce's at the sizes where both are bandwidth-bound."""

    ratio: float  # geometric mean of the per-size ratios
    sizes: tuple[int, ...]
    backend: str
    label: str  # the run or setting it holds for ("" for a single one)

    def sentence(self) -> str:
        text = (f"reduce_scatter busbw is {self.ratio:.2f}x all_reduce's at {size_range(self.sizes)} "
                f"({len(self.sizes)} size{'s' if len(self.sizes) != 1 else ''} where all_reduce reaches half its "
                f"peak{', ' + self.label if self.label else ''})")
        if self.backend == "gloo":
            text += (": gloo runs reduce_scatter as an all_reduce of the whole input and keeps this rank's "
                     "share (torch's ProcessGroupGloo), so it moves all_reduce's bytes but is credited half "
                     "the bus bytes: where bandwidth limits both, about 0.5x at best")
        return text


def _mean_ratio(pairs: Sequence[tuple[float, float]]) -> float:
    return math.exp(statistics.fmean(math.log(rs / ar) for rs, ar in pairs))


def reduce_scatter_gap(points: Iterable[Mapping[str, Any]], label: str = "") -> Gap | None:
    """From points of one run (dicts: collective, size_bytes, busbw, backend; medians over
    repetitions, one placement each or both): the Gap, or None unless both collectives were
    measured. Sizes pair up within 5% (both round sizes to their ranks: nccl-tests' counts)."""
    best: dict[str, dict[int, float]] = {"all_reduce": {}, "reduce_scatter": {}}
    backend = ""
    for p in points:
        name, bw = p.get("collective"), p.get("busbw")
        if name in best and _finite(bw) and float(bw) > 0:
            size = int(p["size_bytes"])
            best[name][size] = max(best[name].get(size, 0.0), float(bw))  # the better placement
            backend = str(p.get("backend") or backend)
    ar, rs = best["all_reduce"], best["reduce_scatter"]
    if not ar or not rs:
        return None
    half = max(ar.values()) / 2
    pairs = []
    for size, bw in sorted(rs.items()):
        near = min(ar, key=lambda s: abs(math.log(s / size)))
        if abs(near - size) <= 0.05 * size and ar[near] >= half:
            pairs.append((size, bw, ar[near]))
    if not pairs:
        return None
    return Gap(_mean_ratio([(b, a) for _, b, a in pairs]), tuple(s for s, _, _ in pairs), backend, label)
