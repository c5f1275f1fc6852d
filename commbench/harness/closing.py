"""Rank 0's closing lines after the last point (core/runsummary.py's figures, as text): the
median-over-repetitions table after -R, each collective's average and peak busbw with units, how
many points reached --precision, and reduce_scatter's gap to all_reduce. A layout run's figures
are its groups' concurrent rows, a series per group dimension (core/runsummary.py series_of)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from commbench.core import runsummary, workloadspec
from commbench.core.options import RunOptions
from commbench.core.vocab import get_dtype
from commbench.harness.console import MEDIAN_CELL, format_median_row, placement_header, point_median_lines

# The workloads whose -R ends with a median-over-repetitions table (pairs ranks its links instead).
_MEDIAN_TABLES = frozenset(workloadspec.names(stop_rule=True))


def closing_lines(rows: Sequence[Mapping], plan: RunOptions) -> list[str]:
    """Everything rank 0 prints between the last table and '# Results:'."""
    medians = runsummary.point_medians(rows)
    series = runsummary.series_of(medians)
    lines = median_table(series, plan.repetitions) if plan.workload in _MEDIAN_TABLES else []
    lines += _out_of_bounds(rows, plan)
    lines += runsummary.bandwidth_lines(series)
    lines += runsummary.precision_lines(rows, runsummary.rule_fields(plan))
    lines += gap_lines(medians, rows[0].get("backend") if rows else "")
    return lines


def _out_of_bounds(rows: Sequence[Mapping], plan: RunOptions) -> list[str]:
    """nccl-tests' line, counting what the check found (it used to say '0 OK' whatever it found);
    'not checked' says why, since --check is the default (issue #40)."""
    checked = [int(r["wrong"]) for r in rows if r.get("wrong") is not None]
    if not checked:
        why = "--no-check" if not plan.check else f"{plan.workload} does not check its collectives' outputs; sweep does"
        return [f"# Out of bounds values : not checked ({why})"] if rows else []
    wrong = sum(checked)
    return [f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}"]


def median_table(series: Sequence[runsummary.Series], repetitions: int) -> list[str]:
    """After -R N (N > 1): one table per collective of each point's median over the repetitions,
    with the range of the repetitions' times: a sweep's in the live table's shape, a buckets or
    zero run's a line per bucket (and stage)."""
    if repetitions <= 1:
        return []
    lines = []
    for s in series:
        lines.append(f"# Median over {repetitions} repetitions: {s.label}")
        lines += _size_rows(s) if s.workload in ("sweep", "") else _point_rows(s)
    return lines


def _size_rows(s: runsummary.Series) -> list[str]:
    placements = tuple(sorted({bool(p.first.get("in_place")) for p in s.points}))
    lines = placement_header(placements, MEDIAN_CELL).splitlines()
    by_size: dict[int, dict[bool, runsummary.PointMedian]] = {}
    for p in s.points:
        by_size.setdefault(int(p.first.get("size_bytes") or 0), {})[bool(p.first.get("in_place"))] = p
    for size, cells in by_size.items():
        first = next(iter(cells.values())).first
        root = first.get("root")
        lines.append(format_median_row(
            size, int(first.get("count") or 0), get_dtype(str(first.get("dtype"))).nccl_name,
            str(first.get("op") or "none"),
            -1 if root is None else int(root),
            {ip: (p.time_us, *p.spread, p.algbw, p.busbw) for ip, p in cells.items()}, placements))
    return lines


def _point_rows(s: runsummary.Series) -> list[str]:
    """A line per point, named as the closing lines name it (ZeRO-2, buckets of 953.7 MiB, GAS 4)."""
    return point_median_lines([runsummary.point_where(p.first) for p in s.points],
                              [(p.time_us, *p.spread, p.algbw, p.busbw) for p in s.points])


def gap_lines(medians: Sequence[runsummary.PointMedian], backend: str | None) -> list[str]:
    """reduce_scatter's busbw next to all_reduce's, per setting, where the run measured both."""
    by_setting: dict = {}
    for p in medians:
        if p.first.get("workload", "sweep") == "sweep" and not runsummary.solo(p.first):
            by_setting.setdefault(p.first.get("settings"), []).append(
                {"collective": p.first.get("collective"), "size_bytes": p.first.get("size_bytes"),
                 "busbw": p.busbw, "backend": backend})
    gaps = [runsummary.reduce_scatter_gap(points, setting or "") for setting, points in by_setting.items()]
    return [f"# {g.sentence()}" for g in gaps if g is not None]
