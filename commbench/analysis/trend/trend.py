"""`commbench trend`: every point's bandwidth across runs in time order, a change-point test per
point, the first run after each change and what differed between the runs around it.

A point's value in a run is the median of its rows (every repetition and rank), read through the
engine's one query (analysis/points/pointtable.py), so a year of nightly runs costs a table of runs x points,
never their rows. The test is Pettitt's (1979) rank test for one change in location: distribution
free, as the per-run medians of a shared fabric are not normal, and one change per point per
window is what a nightly job asks ("since when is it slower?"); the run named is where a
two-segment fit of the series puts the step (step_at). Its p-values are adjusted over the
points by Benjamini-Hochberg, the multiple-testing care compare takes (compare: Holm over points;
here a change moves many points at once, and BH keeps its power where Holm would lose it; under no
change at all both bound the chance of any false alarm). A change is named only when it also moves
the median by at least the threshold. The false alarm rate measured on generated series is in
docs/TREND.md.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from commbench.analysis.points.pointtable import Query, open_source, quote
from commbench.analysis.points.runsdiffer import differences_between
from commbench.analysis.points.sides import KEY_COLUMNS, describe_point
from commbench.core import stats
from commbench.core.errors import BadInput, Inconclusive

MIN_RUNS = 6  # fewer runs than this are never tested (the test's smallest p-value is above 0.1)
SAME_SHAPE = ("world_size", "collective")  # what every run must share: trend compares like with like


@dataclass(frozen=True)
class Run:
    """One run in time order (index from 1, as the output numbers them)."""

    index: int
    run_id: str
    started_at: str
    label: str

    def name(self) -> str:
        label = f" '{self.label}'" if self.label else ""
        return f"run {self.index} ({self.run_id}{label}, {self.started_at})"


@dataclass(frozen=True)
class PointChange:
    """A point whose series changed: `at` is the position (from 0) of the first run after the change."""

    key: dict
    at: int
    before: float  # the median of the per-run values before the change
    after: float
    p: float
    q: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before > 0 else math.inf

    def hosts(self) -> tuple[str, ...]:
        """The ends of a pairs link (none for a point of all ranks)."""
        return tuple(str(self.key[h]) for h in ("src_host", "dst_host") if self.key.get(h))


@dataclass
class Trend:
    runs: list[Run]
    points: int  # points tested (those in at least MIN_RUNS runs)
    changes: list[PointChange]
    differs: dict[int, list[str]] = field(default_factory=dict)  # at -> what differs between runs at-1 and at
    table: pd.DataFrame | None = None  # per_run_points' table with pos, each run's position: a figure's series

    def change_runs(self) -> list[int]:
        return sorted({c.at for c in self.changes})

    def worse(self) -> bool:
        return any(c.change < 0 for c in self.changes)


def pettitt(values: Sequence[float]) -> tuple[int, float]:
    """(t, p) of Pettitt's test on a series: t the position (from 0) of the first value after the
    most likely change, p its approximate two-sided p-value, 2 exp(-6 K^2 / (n^3 + n^2)) (at most 1).
    U_t sums sign(x_i - x_j) over i <= t < j; it is built in O(n^2) as
    U_t = U_(t-1) + sum_j sign(x_t - x_j)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2:
        return 0, 1.0
    v = np.sign(x[:, None] - x[None, :]).sum(axis=1)
    u = np.cumsum(v)[:-1]  # U_1 .. U_(n-1)
    k = float(np.abs(u).max())
    last_before = int(np.argmax(np.abs(u)))
    return last_before + 1, min(1.0, 2.0 * math.exp(-6.0 * k * k / (n**3 + n**2)))


def _l1_cost(logs: np.ndarray, t: int) -> float:
    """How badly two medians, before and after position t, fit a series of logarithms."""
    return float(np.abs(logs[:t] - np.median(logs[:t])).sum() + np.abs(logs[t:] - np.median(logs[t:])).sum())


def step_at(values: Sequence[float]) -> int:
    """Where a step in `values` most likely lies (the position, from 0, of the first value after it):
    the split whose two medians fit the logarithms best (least absolute deviations), each side two
    values at least. Pettitt's own argmax says whether there is a change but leans toward the middle
    of the series (its statistic is largest there), so a run or three early on a noisy series."""
    x = np.log(np.asarray(values, dtype=float))
    if x.size < 4:
        return x.size // 2
    return 2 + int(np.argmin([_l1_cost(x, t) for t in range(2, x.size - 1)]))


NEAR = 2  # runs: points whose own steps lie this close are one change (one noisy night moves a step by one)


def joint_step(series: Sequence[tuple[np.ndarray, np.ndarray]], around: Sequence[int]) -> int:
    """The one run position (from 0) where the steps of several points' series ((positions, values)
    each, in run order) fit best together, within NEAR of their own steps `around`."""
    best, best_cost = around[0], math.inf
    for pos in range(min(around) - NEAR, max(around) + NEAR + 1):
        cost = 0.0
        for positions, values in series:
            t = int(np.searchsorted(positions, pos))
            if t < 2 or t > values.size - 2:
                cost = math.inf
                break
            cost += _l1_cost(np.log(values), t)
        if cost < best_cost:
            best, best_cost = pos, cost
    return best


def smallest_p(n: int) -> float:
    """The smallest p-value Pettitt's test can give n values (every one after below every one before)."""
    k = (n // 2) * (n - n // 2)
    return min(1.0, 2.0 * math.exp(-6.0 * k * k / (n**3 + n**2))) if n >= 2 else 1.0


def runs_needed(alpha: float) -> int:
    """The fewest runs whose most extreme series passes `alpha` (one point tested)."""
    n = 2
    while smallest_p(n) > alpha and n < 10_000:
        n += 1
    return n


def per_run_points(paths: Iterable[str | os.PathLike]) -> tuple[pd.DataFrame, Query]:
    """One row a run and point: run_id, started_at (its earliest row), label, the key columns and v,
    the median of the point's rows in that run (failed and confirmation rows left out)."""
    q = Query(open_source(paths), "trend")
    has = q.source.columns
    for name in ("run_id", "started_at"):
        if name not in has:
            raise BadInput(f"the results have no column {name}: pass files written by commbench")
    keys = q.key_exprs()
    names = [quote(k) for k in KEY_COLUMNS]
    label = "coalesce(CAST(label AS VARCHAR), '')" if "label" in has else "''"
    sql = (
        f"SELECT run_id, min(started_at) AS started_at, min(label) AS label, {', '.join(names)}, "
        f"median(v) AS v FROM (SELECT CAST(run_id AS VARCHAR) AS run_id, CAST(started_at AS VARCHAR) AS "
        f"started_at, {label} AS label, {', '.join(keys)}, v FROM rows WHERE NOT excluded AND isfinite(v)) "
        f"GROUP BY run_id, {', '.join(names)}"
    )
    return q.run(sql).to_pandas(), q


def _runs(table: pd.DataFrame) -> list[Run]:
    first = table.groupby("run_id", sort=False).agg(started_at=("started_at", "min"), label=("label", "min"))
    first = first.sort_values(["started_at"], kind="stable").reset_index()
    return [Run(i + 1, str(r.run_id), str(r.started_at)[:19], str(r.label)) for i, r in enumerate(first.itertuples())]


def _check_shape(table: pd.DataFrame) -> None:
    """One line of BadInput when the runs are not of one shape: a trend of 2 ranks then 8 is not a trend."""
    for name in SAME_SHAPE:
        per_run = table.groupby("run_id")[name].agg(lambda s: tuple(sorted({str(x) for x in s})))
        shapes = sorted(set(per_run))
        if len(shapes) > 1:
            shown = "; ".join(", ".join(s) for s in shapes[:3])
            raise BadInput(
                f"the runs differ in {name} ({shown}): trend follows one measurement over time; "
                f"pass runs of the same {name.replace('_', ' ')}s (e.g. one nightly job's results)"
            )


def find_changes(table: pd.DataFrame, runs: list[Run], alpha: float, threshold: float) -> tuple[int, list[PointChange]]:
    """Every point's series (in run order) tested; the changes that pass BH at `alpha` and move the
    median by at least `threshold`, with the number of points tested."""
    order = {r.run_id: r.index - 1 for r in runs}
    table = table.assign(pos=table["run_id"].map(order))
    tested: list[tuple[dict, np.ndarray, np.ndarray, int, float]] = []
    for key, group in table.groupby(list(KEY_COLUMNS), dropna=False, sort=False):
        group = group.sort_values("pos")
        values, positions = group["v"].to_numpy(float), group["pos"].to_numpy(int)
        if values.size < MIN_RUNS:
            continue
        _, p = pettitt(values)
        t = step_at(values)
        tested.append((dict(zip(KEY_COLUMNS, key, strict=True)), values, positions, t, p))
    qs = stats.bh_qvalues([p for *_, p in tested]) if tested else []
    passed = [(key, values, positions, int(positions[t]), p, q)
              for (key, values, positions, t, p), q in zip(tested, qs, strict=True) if q <= alpha]
    changes = []
    for group in _near_groups(passed):
        at = joint_step([(positions, values) for _, values, positions, *_ in group], [g[3] for g in group])
        for key, values, positions, _, p, q in group:
            t = int(np.searchsorted(positions, at))
            before, after = float(np.median(values[:t])), float(np.median(values[t:]))
            if (abs(after / before - 1) if before > 0 else math.inf) >= threshold:
                changes.append(PointChange(_plain(key), at, before, after, p, q))
    return len(tested), changes


def _near_groups(passed: list) -> list[list]:
    """The significant points grouped by where their own steps lie: a group spans at most 2 x NEAR runs."""
    groups: list[list] = []
    for item in sorted(passed, key=lambda c: c[3]):
        if groups and item[3] - groups[-1][0][3] <= 2 * NEAR:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _plain(key: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in key.items()}


def what_differs(q: Query, runs: list[Run], at: int) -> list[str]:
    """The "what differs" facts (analysis/points/runsdiffer.py) between the run before a change and the first after."""
    frames = [
        q.run(
            "SELECT * EXCLUDE (gi, v, failed_row, excluded) FROM rows WHERE CAST(run_id AS VARCHAR) = ?",
            [runs[i].run_id],
        ).to_pandas()
        for i in (at - 1, at)
    ]
    # Each run's label is already in its name, and nightly labels differ every night by design.
    return [d for d in differences_between(*frames) if not d.startswith("label:")]


def trend(paths: Iterable[str | os.PathLike], alpha: float = 0.05, threshold: float = 0.05) -> Trend:
    """The trend of the results at `paths` (files or folders): Inconclusive when too few runs."""
    table, q = per_run_points(paths)
    if table.empty:
        raise BadInput("the results hold no measured point: pass the results of finished runs")
    _check_shape(table)
    runs = _runs(table)
    need = max(MIN_RUNS, runs_needed(alpha))
    if len(runs) < need:
        raise Inconclusive(
            f"{len(runs)} runs cannot show a change at --alpha {alpha:g} (the test needs at "
            f"least {need}): pass more runs' results"
        )
    points, changes = find_changes(table, runs, alpha, threshold)
    order = {r.run_id: r.index - 1 for r in runs}
    result = Trend(
        runs,
        points,
        sorted(changes, key=lambda c: (c.at, c.change)),
        table=table.assign(pos=table["run_id"].map(order)),
    )
    result.differs = {at: what_differs(q, runs, at) for at in result.change_runs()}
    return result


def series(found: Trend, key: dict) -> tuple[np.ndarray, np.ndarray]:
    """(run indexes from 1, values) of one point across the runs, in time order."""
    assert found.table is not None
    mask = np.ones(len(found.table), dtype=bool)
    for name in KEY_COLUMNS:
        column, want = found.table[name], key.get(name)
        mask &= column.isna().to_numpy() if want is None else (column == want).to_numpy()
    rows = found.table[mask].sort_values("pos")
    return rows["pos"].to_numpy(int) + 1, rows["v"].to_numpy(float)


def common_host(changes: Sequence[PointChange]) -> tuple[str | None, int]:
    """The host at one end of every changed link (pairs points), and how many links changed."""
    links = [c.hosts() for c in changes if c.hosts()]
    if not links:
        return None, 0
    counts = Counter(h for link in links for h in set(link))
    host, n = counts.most_common(1)[0]
    return (host if n == len(links) and (len(counts) > 2 or len(links) == 1) else None), len(links)


def describe(change: PointChange) -> str:
    sign = "+" if change.change >= 0 else ""
    return (
        f"{describe_point(change.key)}: {change.before:.3g} -> {change.after:.3g} GB/s "
        f"({sign}{change.change * 100:.0f}%, q = {change.q:.2g})"
    )
