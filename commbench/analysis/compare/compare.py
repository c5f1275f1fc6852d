"""Before/after comparison of two sets of results: a verdict per point and overall.

The rules are in docs/COMPARE.md. In short: rows are repetitions; a point is decided by a
one-sided Mann-Whitney test over repetitions when both sides hold enough of them for the test
to reach the Holm-corrected alpha at all; Holm's procedure over all common points decides,
Benjamini-Hochberg q-values are shown; a significant change smaller than the minimum effect is
"unchanged". Nothing fails open: too few repetitions is "inconclusive" (exit 3), and damaged
data or a statistics error raises. The table and Markdown it is written as are
analysis/compare/comparetext.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from commbench.analysis.catalog import sections
from commbench.analysis.points import settingsview
from commbench.analysis.points.frames import REQUIRED_COLUMNS, check_frame, jsonable, scalar
from commbench.analysis.points.runsdiffer import (  # noqa: F401 - SAME_RUN is part of compare's interface (cli/analyze.py)
    DIFFERENCE_COLUMNS, SAME_RUN, WARN_COLUMNS, differences_between, run_values, same_run_warning, warnings_between)
from commbench.analysis.points.sides import KEY_COLUMNS, Lost, Side, describe_point
from commbench.core import stats
from commbench.core.columns import TOPOLOGY_COLUMNS
from commbench.core.errors import BadInput, RuntimeFailure

if TYPE_CHECKING:
    from commbench.analysis.points.pointtable import Aggregate

# A collective's peak busbw is taken over the before side's points of the same collective on
# the same topology under the same setting (a setting that quarters the bandwidth, a slow rail,
# does not make its points latency-bound); a layout run's groups all at once against each other's
# peak, not against the faster solo rows' (docs/LAYOUTS.md).
PEAK_GROUP = ("collective", *TOPOLOGY_COLUMNS, "settings", "group_dim", "concurrent")
BANDWIDTH_BOUND_FRACTION = 0.5
WITHIN_RUN_ALPHA_DIVISOR = 10

# Should be the same on both sides: a difference makes the comparison suspect.
# Every column compare_frames reads: callers reading files for it read only these (results.read_results).
READ_COLUMNS = tuple(dict.fromkeys(REQUIRED_COLUMNS + KEY_COLUMNS + WARN_COLUMNS + DIFFERENCE_COLUMNS + (
    "schema_version", "run_id", "algbw_GBps", "time_us", "samples_us", "repetition", "env", "status", "error",
    "confirm", "wire", "wire_trouble", "net")))  # the wire columns only where a file has them (older files do not)

# A pairs link measured before and failed after, failed before and measured after, failed on both
# sides (docs/COMPARE.md, "Links that failed"). "link down" counts as a regression.
LINK_DOWN, LINK_RESTORED, STILL_DOWN = "link down", "link restored", "still down"
REGRESSIONS = ("regression", LINK_DOWN)
VERDICTS = ("regression", LINK_DOWN, "improvement", LINK_RESTORED, "unchanged", "inconclusive", STILL_DOWN)


@dataclass
class PointComparison:
    key: dict
    before_busbw: float | None  # None: no repetition of that side was measured (a failed link)
    after_busbw: float | None
    before_spread: tuple[float, float] | None
    after_spread: tuple[float, float] | None
    ratio: float | None  # None when a side has no measured repetition
    n_before: int
    n_after: int
    test: str  # "repetitions", "within-run only", or "none" (no samples to test at all)
    p_value: float | None
    p_holm: float | None
    q_bh: float | None
    threshold: float
    bandwidth_bound: bool
    verdict: str
    note: str
    # the trouble counters that moved after at a point whose counters were read and clean before
    # (docs/COMPARE.md, "Likely cause"); None otherwise. Never changes the verdict.
    likely_cause: str | None = None


@dataclass
class Comparison:
    points: list[PointComparison]
    only_before: list[dict]
    only_after: list[dict]
    geomean_ratio: float | None
    verdict: str
    warnings: list[str]
    differences: list[str]
    alpha: float
    threshold: float
    latency_threshold: float
    allow_within_run: bool = False
    repetitions_needed: int | None = None  # a side, for the number of common points
    # each section's own findings by its id (points/section.py CompareHooks.compared): "replay", the
    # replayed steps (docs/REPLAY.md)
    parts: dict[str, Any] = field(default_factory=dict)

    def exit_code(self) -> int:
        if self.verdict == "regression":
            return 1
        if self.verdict in ("unchanged", "improvement"):
            return 0
        return 3  # inconclusive, nothing comparable: never a pass

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(out.pop("parts"))  # each section's findings under its id, beside the points
        out["exit_code"] = self.exit_code()
        return jsonable(out)


# ---- the comparison ----


def _check_fraction(value: float, name: str, low_open: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{name} {value!r} is not a number") from None
    ok = (0 < v < 1) if low_open else (0 <= v < 1)
    if not ok or math.isnan(v):
        bound = "more than 0" if low_open else "0 or more"
        raise BadInput(f"{name} {value} must be {bound} and less than 1 (a fraction: 0.05 is 5%)")
    return v


def compare_frames(before: pd.DataFrame, after: pd.DataFrame, threshold: float = 0.03,
                   latency_threshold: float = 0.10, alpha: float = 0.05,
                   allow_within_run: bool = False) -> Comparison:
    """Compare two result tables (read_results output, or frames a caller built): the same
    aggregation as files take (analysis/points/pointtable.py), over the rows in memory; docs/COMPARE.md."""
    from commbench.analysis.points import pointtable

    limits = _limits(threshold, latency_threshold, alpha)
    check_frame(before, "before")
    check_frame(after, "after")
    b, a = (pointtable.aggregate((), name, pointtable.frame_source(frame, name))
            for name, frame in (("before", before), ("after", after)))
    return compare_aggregates(b, a, **limits, allow_within_run=allow_within_run)


def compare_aggregates(before: Aggregate, after: Aggregate, threshold: float = 0.03, latency_threshold: float = 0.10,
                       alpha: float = 0.05, allow_within_run: bool = False) -> Comparison:
    """compare_frames over two pointtable.Aggregate sides (large inputs, analysis/points/pointtable.py): the same
    rules and verdicts; the setup differences come from the distinct values of each side's runs."""
    from commbench.core.results import check_schema_versions

    limits = _limits(threshold, latency_threshold, alpha)
    for agg in (before, after):
        if len(agg.context):
            check_schema_versions({scalar(v) for v in agg.context["schema_version"].unique()},
                                  f"the {agg.name} results", comparing=True)
    b_lost, a_lost = before.lost, after.lost
    same = same_run_warning(run_values(before.context, "run_id"), run_values(after.context, "run_id"))
    c = _compare(before.side(), after.side(), b_lost, a_lost,
                 ([same] if same else []) + warnings_between(before.context, after.context),
                 differences_between(before.context, after.context), _settings_of(before.context, after.context),
                 lambda common: _causes(before, after, common), limits, allow_within_run)
    for s in sections.SECTIONS:
        if s.compare is not None and s.compare.compared is not None:
            c.parts[s.id] = s.compare.compared(before, after, c.points)
    return c


def _causes(before: Aggregate, after: Aggregate, common: list[tuple]) -> dict[tuple, str]:
    """Each point's likely cause, as the sections that name causes see it (the wire's trouble
    counters), several joined by '; '."""
    found: dict[tuple, list[str]] = {}
    for s in sections.SECTIONS:
        if s.compare is not None and s.compare.causes is not None:
            for k, cause in s.compare.causes(before, after, common).items():
                found.setdefault(k, []).append(cause)
    return {k: "; ".join(v) for k, v in found.items()}


def compare_paths(before: Sequence[str | os.PathLike], after: Sequence[str | os.PathLike],
                  **limits: Any) -> Comparison:
    """The comparison of two sides' files, aggregated where they lie (whatever their size:
    compare_frames takes the same aggregation over rows already in memory)."""
    from commbench.analysis.points import pointtable

    b, a = pointtable.open_source(before), pointtable.open_source(after)
    return compare_aggregates(pointtable.aggregate(before, "before", b), pointtable.aggregate(after, "after", a),
                              **limits)


def _limits(threshold: float, latency_threshold: float, alpha: float) -> dict:
    return dict(threshold=_check_fraction(threshold, "threshold", low_open=False),
                latency_threshold=_check_fraction(latency_threshold, "latency threshold", low_open=False),
                alpha=_check_fraction(alpha, "alpha", low_open=True))


def _compare(b: Side, a: Side, b_lost: dict, a_lost: dict, warnings: list[str], differences: list[str],
             sides: tuple[str, str] | None, causes_of: Callable[[list[tuple]], dict[tuple, str]], limits: dict,
             allow_within_run: bool) -> Comparison:
    """The comparison of two grouped sides (sides.Side): points paired, tested and decided."""
    threshold, latency_threshold, alpha = limits["threshold"], limits["latency_threshold"], limits["alpha"]
    b_keys, a_keys = list(dict.fromkeys([*b.rows, *b_lost])), list(dict.fromkeys([*a.rows, *a_lost]))
    in_b, in_a = set(b_keys), set(a_keys)
    common = [k for k in b_keys if k in in_a]
    only_before = [dict(zip(KEY_COLUMNS, k)) for k in b_keys if k not in in_a]
    only_after = [dict(zip(KEY_COLUMNS, k)) for k in a_keys if k not in in_b]
    base = dict(only_before=only_before, only_after=only_after, warnings=warnings, differences=differences,
                allow_within_run=allow_within_run, **limits)
    if sides and common:  # some points still pair up: the others' setting is a setup difference
        differences.append(f"settings: before {sides[0]}, after {sides[1]}")
    if not common:
        if (hint := _workload_only_hint(b, a)) is not None:
            warnings.append(hint)
        if sides:
            warnings.append(f"the before results have settings {sides[0]} and the after results {sides[1]}: "
                            "compare runs made with the same --env (a point's setting is part of its key: only "
                            "points measured under the same setting are paired)")
        return Comparison(points=[], geomean_ratio=None, verdict="nothing comparable", **base)

    # Points measured on both sides are tested; a point that failed on a side in every repetition
    # (a pairs link down) is decided by that alone and is not one of the m tested points.
    tested = [k for k in common if k in b.rows and k in a.rows]
    needed = stats.repetitions_needed(alpha, len(tested)) if tested else None
    decided = dict(zip(tested, _tested_points(tested, b, a, alpha, threshold, latency_threshold, allow_within_run,
                                              needed)))
    points = [_with_failures(decided[k], b_lost.get(k), a_lost.get(k)) if k in decided
              else _failed_point(k, b, a, b_lost.get(k), a_lost.get(k), threshold) for k in common]
    causes = causes_of(common)
    points = [dataclasses.replace(p, likely_cause=causes[k]) if k in causes else p for k, p in zip(common, points)]
    bound = [p.ratio for p in points if p.bandwidth_bound and p.ratio is not None]  # a bound point has a ratio
    geo = stats.geomean(bound) if bound else None
    return Comparison(points=points, geomean_ratio=geo, verdict=overall_verdict({p.verdict for p in points}),
                      repetitions_needed=needed, **base)


def overall_verdict(verdicts: set[str]) -> str:
    if verdicts & set(REGRESSIONS):
        return "regression"
    if verdicts & {"inconclusive", STILL_DOWN}:
        return "inconclusive"
    if verdicts & {"improvement", LINK_RESTORED}:
        return "improvement"
    return "unchanged"


def _tested_points(tested: list[tuple], b: Side, a: Side, alpha: float, threshold: float, latency_threshold: float,
                   allow_within_run: bool, needed: int | None) -> list[PointComparison]:
    """The points measured on both sides: tests, Holm over the m of them, verdicts."""
    m = len(tested)
    peaks: dict[tuple, float] = {}
    for k, (med, _, _) in b.summary.items():
        g = _peakgroup(k)
        peaks[g] = max(peaks.get(g, 0.0), med)

    drafts = []
    for k in tested:
        key = dict(zip(KEY_COLUMNS, k))
        try:
            drafts.append(_measure_point(key, b, a, k, peaks[_peakgroup(k)], alpha, m))
        except ValueError as exc:  # the statistics could not answer: never a pass
            raise RuntimeFailure(f"statistics failed for {describe_point(key)}: {exc}") from None
    _test_points(drafts)

    rep = [i for i, d in enumerate(drafts) if d["test"] == "repetitions"]
    within = [i for i, d in enumerate(drafts) if d["test"] == "within-run only"]
    for family in (rep, within):
        ps = [drafts[i]["p_value"] for i in family]
        for i, ph, q in zip(family, stats.holm(ps, m), stats.bh_qvalues(ps, m)):
            drafts[i]["p_holm"], drafts[i]["q_bh"] = ph, q
    return [_decide(d, alpha, threshold, latency_threshold, allow_within_run, needed) for d in drafts]


# ---- failed links (pairs rows with a status in linkrank.FAILED) ----


def _failed_point(k: tuple, b: Side, a: Side, lost_before: Lost | None, lost_after: Lost | None,
                  threshold: float) -> PointComparison:
    """A point that failed in every repetition of one side or both: no ratio, no test.
    Measured before and failed after: "link down" (a regression); failed before and measured
    after: "link restored"; failed on both sides: "still down" (no answer, exit 3)."""
    nb = int(b.rows[k].size) if k in b.rows else 0
    na = int(a.rows[k].size) if k in a.rows else 0
    fb = lost_before.count if lost_before else 0
    fa = lost_after.count if lost_after else 0
    before = f"before: {lost_before.text(nb + fb)}" if lost_before else None
    after = f"after: {lost_after.text(na + fa)}" if lost_after else None
    if na == 0 and nb > 0:
        verdict, notes = LINK_DOWN, [f"could not be measured {after}", before]
    elif na > 0:
        verdict, notes = LINK_RESTORED, [f"could not be measured {before}", "measured again after", after]
    else:
        verdict, notes = STILL_DOWN, ["could not be measured on either side, nothing to compare", before, after]
    return PointComparison(
        key=dict(zip(KEY_COLUMNS, k)), before_busbw=b.summary[k][0] if nb else None,
        after_busbw=a.summary[k][0] if na else None, before_spread=b.summary[k][1:] if nb else None,
        after_spread=a.summary[k][1:] if na else None, ratio=None, n_before=nb, n_after=na, test="none",
        p_value=None, p_holm=None, q_bh=None, threshold=threshold, bandwidth_bound=False, verdict=verdict,
        note="; ".join(n for n in notes if n))


def _with_failures(p: PointComparison, lost_before: Lost | None, lost_after: Lost | None) -> PointComparison:
    """A tested point some of whose repetitions failed: its failures in the note; failing after
    but never before makes it "link down" (the link works only some of the time now)."""
    if not lost_before and not lost_after:
        return p
    notes = []
    if lost_before:
        notes.append(f"before: {lost_before.text(p.n_before + lost_before.count)}")
    if lost_after:
        notes.append(f"after: {lost_after.text(p.n_after + lost_after.count)}"
                     + ("" if lost_before else ", never before"))
    verdict = LINK_DOWN if lost_after and not lost_before else p.verdict
    if verdict != p.verdict:
        assert p.ratio is not None  # a tested point has a ratio
        notes.append(f"the measured repetitions: {p.verdict} ({p.note or pct_text(p.ratio)})")
    elif p.note:
        notes.append(p.note)
    return dataclasses.replace(p, verdict=verdict, note="; ".join(notes))


def _workload_only_hint(b: Side, a: Side) -> str | None:
    """Name the cause when the sides would share points but for the workload column."""
    i = KEY_COLUMNS.index("workload")
    rest = lambda k: k[:i] + k[i + 1:]  # noqa: E731
    if not {rest(k) for k in b.rows} & {rest(k) for k in a.rows}:
        return None
    bw = ", ".join(sorted({str(k[i]) for k in b.rows}))
    aw = ", ".join(sorted({str(k[i]) for k in a.rows}))
    return (f"nothing compared only because the workload differs (before {bw}, after {aw}): the workload is "
            "part of a point's key, so these results share sizes but are never paired")


def _settings_of(before: pd.DataFrame, after: pd.DataFrame) -> tuple[str, str] | None:
    """The settings of each side in a phrase when they differ ("GLOO_SOCKET_IFNAME=eth0|eth1",
    "none"); None when both sides hold the same ones."""
    bs, as_ = settingsview.distinct(before), settingsview.distinct(after)
    if set(bs) == set(as_) or not (bs and as_):
        return None
    return settingsview.settings_text(bs), settingsview.settings_text(as_)


def _peakgroup(k: tuple) -> tuple:
    key = dict(zip(KEY_COLUMNS, k))
    return tuple(key[c] for c in PEAK_GROUP)


def _measure_point(key: dict, b: Side, a: Side, k: tuple, peak: float, alpha: float, m: int) -> dict:
    """A point's numbers; the test's samples wait in "pending" for _test_points."""
    bidx, aidx = b.rows[k], a.rows[k]
    before_med, after_med = b.summary[k][0], a.summary[k][0]
    ratio = after_med / before_med
    direction = "less" if ratio < 1 else "greater"
    # Samples only where a test needs them: a spread of one repetition, or too few repetitions for
    # the test over repetitions (the within-run test). Otherwise they are never read.
    reach = stats.can_reach(bidx.size, aidx.size, alpha, m)
    needs = not reach or bidx.size < 2 or aidx.size < 2
    b_has = b.check_samples(bidx, key) if needs else False
    a_has = a.check_samples(aidx, key) if needs else False

    def spread(side: Side, idx: np.ndarray, has: bool) -> tuple[float, float]:
        if idx.size >= 2 or not has:
            return side.summary[k][1:]
        return stats.iqr(side.iteration_values(idx))

    d = dict(key=key, before_busbw=before_med, after_busbw=after_med, before_spread=spread(b, bidx, b_has),
             after_spread=spread(a, aidx, a_has), ratio=ratio, n_before=int(bidx.size), n_after=int(aidx.size),
             bandwidth_bound=bool(before_med >= BANDWIDTH_BOUND_FRACTION * peak), p_value=None, p_holm=None,
             q_bh=None, world1=key.get("world_size") == 1)
    if reach:
        d.update(test="repetitions", pending=(a.value[aidx], b.value[bidx], direction))
    elif b_has and a_has:
        d.update(test="within-run only", pending=(a.iteration_values(aidx), b.iteration_values(bidx), direction))
    else:
        d.update(test="none")
    return d


def _test_points(drafts: list[dict]) -> None:
    """The one-sided Mann-Whitney p-value of every point with a test, in batches of points whose
    samples have the same sizes (one vectorised call each instead of one call a point)."""
    batches: dict[tuple[int, int], list[dict]] = {}
    for d in drafts:
        if "pending" in d:
            x, y, _ = d["pending"]
            batches.setdefault((x.size, y.size), []).append(d)
    for batch in batches.values():
        try:
            ps = stats.mannwhitney_one_sided_many(np.stack([d["pending"][0] for d in batch]),
                                                  np.stack([d["pending"][1] for d in batch]),
                                                  [d["pending"][2] for d in batch])
        except ValueError:
            ps = None
        for i, d in enumerate(batch):
            x, y, direction = d.pop("pending")
            if ps is not None:
                d["p_value"] = ps[i]
                continue
            try:
                d["p_value"] = stats.mannwhitney_one_sided(x, y, direction)
            except ValueError as exc:  # the statistics could not answer: never a pass
                raise RuntimeFailure(f"statistics failed for {describe_point(d['key'])}: {exc}") from None


def pct_text(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def p_text(p: float) -> str:
    return f"{p:.2g}"


def _decide(d: dict, alpha: float, threshold: float, latency_threshold: float, allow_within_run: bool,
            needed: int | None) -> PointComparison:
    thr = threshold if d["bandwidth_bound"] else latency_threshold
    ratio = d["ratio"]
    big = abs(ratio - 1) >= thr
    direction = "regression" if ratio < 1 else "improvement"
    notes = []
    if d.pop("world1"):
        notes.append("one rank: algbw compared (busbw is 0)")
    test = d["test"]
    decides = test == "repetitions" or (test == "within-run only" and allow_within_run)
    if decides:
        level = alpha if test == "repetitions" else alpha / WITHIN_RUN_ALPHA_DIVISOR
        significant = d["p_holm"] < level
        prefix = "" if test == "repetitions" else "within-run only: "
        if significant and big:
            verdict = direction
            notes.append(f"{prefix}{pct_text(ratio)}, Holm p={p_text(d['p_holm'])}")
        elif significant:
            verdict = "unchanged"
            notes.append(f"{prefix}{pct_text(ratio)} is significant but below the {thr * 100:g}% minimum effect")
        elif big:
            verdict = "inconclusive"
            notes.append(f"{prefix}{pct_text(ratio)} but not significant (Holm p={p_text(d['p_holm'])} >= {level:g}): "
                         "add repetitions or quiet the machine")
        else:
            verdict = "unchanged"
            if test != "repetitions":
                notes.append(f"{prefix}{pct_text(ratio)}, Holm p={p_text(d['p_holm'])}")
    else:
        verdict = "inconclusive"
        notes.append(f"needs {needed} repetitions a side (-R {needed}) to decide")
        if test == "within-run only":
            notes.append(f"within-run only: {pct_text(ratio)}, p={p_text(d['p_value'])}")
    return PointComparison(threshold=thr, verdict=verdict, note="; ".join(notes), **d)
