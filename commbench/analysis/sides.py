"""One side of a comparison: its rows grouped by point, checked, summarised.

A point is one value of KEY_COLUMNS (collective, dtype, size, placement, ranks, workload, ...);
its rows are the repetitions. Every per-row quantity is an array (a million rows): the point of
every row, the busbw compared (algbw on one rank), each point's median, min and max, and the
per-iteration samples, flattened, for the within-run test. Damaged data raises, never compares.
Rows that could not be measured (a failed pairs link) are split off first (`split_failed`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from commbench.analysis.frames import column, is_true, printable, scalar, short
from commbench.analysis.linkrank import FAILED
from commbench.core.columns import INT_KEYS, POINT_KEY
from commbench.core.errors import BadInput
from commbench.core.units import format_size

KEY_COLUMNS = POINT_KEY  # a point (core/columns.py: the registry's key columns)
ERROR_CHARS = 200  # of a failed row's reason, in a note
_INT_KEYS = set(INT_KEYS)


# Workloads that measure the same thing: an imported nccl-tests log and commbench's own sweep are
# both one collective at one size, with the same definitions (docs/RESULTS.md, "Definitions"), so
# they pair up; the workload then shows as a difference between the sides.
SAME_MEASUREMENT = {"nccl-tests": "sweep"}


def _key_value(name: str, value: Any) -> Any:
    """One key column's value as the point's key holds it."""
    v = scalar(value)
    if name == "workload":
        v = SAME_MEASUREMENT.get(v, v)
    if name in _INT_KEYS:
        v = int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    elif name == "in_place":
        v = bool(v) if v is not None else None
    return v


def _points(frame: pd.DataFrame) -> tuple[list[tuple], np.ndarray]:
    """The distinct point keys, in the order of their first row, and the point of every row.

    Each column's distinct values are normalised once (not once a row: a million rows), then the
    columns' codes are combined into one number per row."""
    n = len(frame)
    codes, values = [], []
    for name in KEY_COLUMNS:
        if name not in frame.columns:
            codes.append(np.zeros(n, dtype=np.int64))
            values.append([None])
            continue
        raw, distinct = pd.factorize(frame[name], use_na_sentinel=False)
        ids: dict = {}
        normal = [ids.setdefault(_key_value(name, v), len(ids)) for v in distinct]
        codes.append(np.asarray(normal, dtype=np.int64)[raw] if n else np.zeros(0, dtype=np.int64))
        values.append(list(ids))
    combined, size = np.zeros(n, dtype=np.int64), 1
    for c, v in zip(codes, values):
        if size * len(v) >= 2 ** 62:  # renumber densely before the product overflows
            combined = np.unique(combined, return_inverse=True)[1].reshape(-1).astype(np.int64)
            size = int(combined.max()) + 1 if n else 1
        combined, size = combined * len(v) + c, size * len(v)
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # points numbered in the order of their first row
    number = np.empty_like(order)
    number[order] = np.arange(order.size)
    firsts = first[order]
    columns = []
    for c, v in zip(codes, values):
        distinct = np.empty(len(v), dtype=object)
        distinct[:] = v
        columns.append(distinct[c[firsts]])
    return list(zip(*columns)), number[inverse.reshape(-1)]


@dataclass
class Lost:
    """A point's repetitions that could not be measured (status in linkrank.FAILED: a pairs link)."""

    statuses: dict[str, int]  # status -> repetitions, most frequent first
    error: str | None  # the most common reason, on one line

    @property
    def count(self) -> int:
        return sum(self.statuses.values())

    def text(self, of: int) -> str:
        """'unreachable in 3 of 3 repetitions: no route to host' (`of`: the side's repetitions)."""
        what = ", ".join(f"{s} in {n}" for s, n in self.statuses.items())
        return f"{what} of {of} repetition{'s' if of != 1 else ''}" + (f": {self.error}" if self.error else "")


def split_failed(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[tuple, Lost]]:
    """(the rows compared, point -> its failed repetitions). Rows of a pairs confirmation round
    (`confirm` true) re-measure a suspect link: evidence for the fault verdict, not repetitions,
    so they are left out; failed rows (NaN time and bandwidth) are counted per point instead."""
    confirm = is_true(frame, "confirm")
    failed = np.zeros(len(frame), dtype=bool)
    if "status" in frame.columns and frame["status"].notna().any():
        failed = frame["status"].isin(FAILED).to_numpy(dtype=bool) & ~confirm
    if not (confirm | failed).any():
        return frame, {}
    lost_rows = frame[failed]
    keys, point = _points(lost_rows)
    statuses, errors = column(lost_rows, "status"), column(lost_rows, "error")
    counts: dict[int, Counter] = {}
    reasons: dict[int, Counter] = {}
    for p, status, error in zip(point.tolist(), statuses, errors):
        counts.setdefault(p, Counter())[str(status)] += 1
        if error:
            reasons.setdefault(p, Counter())[short(" ".join(printable(str(error)).split()), ERROR_CHARS)] += 1
    lost = {keys[p]: Lost(dict(c.most_common()), reasons[p].most_common(1)[0][0] if p in reasons else None)
            for p, c in counts.items()}
    return frame[~(confirm | failed)], lost


def _floats(frame: pd.DataFrame, name: str) -> np.ndarray:
    """A column as floats, NaN where missing: np.asarray(column(frame, name), dtype=float)
    without a Python object a row."""
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    try:
        return frame[name].to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError):
        return np.asarray(column(frame, name), dtype=float)


def describe_point(key: dict) -> str:
    """A point's key as messages name it: 'all_reduce float32 64 MiB in-place on 4 ranks', with its
    rail and setting when it has them ('... on 4 ranks GLOO_SOCKET_IFNAME=eth1')."""
    place = "in-place" if key.get("in_place") else "out-of-place"
    link = f" {key['src_host']} -> {key['dst_host']}" if key.get("src_host") else ""
    rail = f" rail {printable(str(key['rail']))}" if key.get("rail") else ""
    setting = f" {printable(str(key['settings']))}" if key.get("settings") else ""
    return (f"{key.get('collective')}{link}{rail} {key.get('dtype')} {format_size(key.get('size_bytes') or 0)} "
            f"{place} on {key.get('world_size')} ranks{setting}")


@dataclass
class Side:
    """The rows of one side, grouped by point; everything per row is an array (a million rows)."""

    name: str
    rows: dict[tuple, np.ndarray]  # point -> its rows, ascending; points in the order of their first row
    value: np.ndarray  # the busbw (or algbw, world_size 1) of every row
    summary: dict[tuple, tuple[float, float, float]]  # point -> median, min, max of its values
    has_samples: np.ndarray  # per row: it holds per-iteration samples
    damaged: np.ndarray  # per row: samples with a time or a sample that is not a positive number
    offsets: np.ndarray  # row i's samples are [offsets[i]:offsets[i + 1]] of them all, flattened
    samples: list  # per row: its samples_us (None where missing)
    time_us: np.ndarray
    iterations: np.ndarray | None = None  # value * time_us / sample of every sample, once a point needs them

    def check_samples(self, idx: np.ndarray, key: dict) -> bool:
        """Whether any of the point's rows holds samples; a damaged one fails the comparison."""
        if self.damaged[idx].any():
            raise BadInput(f"the {self.name} results hold a time that is not a positive number for "
                           f"{describe_point(key)}: a damaged or hand-edited file; re-run the measurement")
        return bool(self.has_samples[idx].any())

    def iteration_values(self, idx: np.ndarray) -> np.ndarray:
        """Per-iteration bandwidth of every timed iteration of the point (after check_samples).
        Computed for every row at the first point that needs them: with enough repetitions no
        point does, and a million rows' samples are not held twice."""
        if self.iterations is None:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # damaged rows are never used
                self.iterations = (np.repeat(self.value * self.time_us, np.diff(self.offsets))
                                   / _flat_samples(self.samples, self.has_samples, self.name))
        return np.concatenate([self.iterations[self.offsets[i]:self.offsets[i + 1]] for i in idx])


def group(frame: pd.DataFrame, side: str) -> Side:
    keys, point = _points(frame)
    busbw = _floats(frame, "busbw_GBps")
    one = _floats(frame, "world_size") == 1
    if one.any():
        # busbw is 0 by definition on one rank (factor 2(n-1)/n): compare algbw there.
        if "algbw_GBps" not in frame.columns:
            raise BadInput(f"the {side} results hold world_size 1 points but no algbw_GBps column")
        busbw = np.where(one, _floats(frame, "algbw_GBps"), busbw)
    bad = np.flatnonzero(~(np.isfinite(busbw) & (busbw > 0)))
    if bad.size:
        i = int(bad[0])
        key = dict(zip(KEY_COLUMNS, keys[point[i]]))
        raise BadInput(f"the {side} results hold busbw_GBps {busbw[i]} for {describe_point(key)} (repetition "
                       f"{scalar(frame['repetition'].iloc[i]) if 'repetition' in frame.columns else '?'}): "
                       "a damaged or hand-edited file; re-run the measurement")
    counts = np.bincount(point, minlength=len(keys))
    ends = np.cumsum(counts)
    rows = dict(zip(keys, np.split(np.argsort(point, kind="stable"), ends[:-1])))
    summary = summarise(keys, point, busbw)
    samples = column(frame, "samples_us") if "samples_us" in frame.columns else [None] * len(frame)
    time_us = _floats(frame, "time_us")
    has, damaged, offsets = _check_samples(samples, time_us, side)
    return Side(side, rows, busbw, summary, has, damaged, offsets, samples, time_us)


def summarise(keys: list[tuple], point: np.ndarray, values: np.ndarray) -> dict[tuple, tuple[float, float, float]]:
    """Point -> median, min and max of its values, every point at once: the values sorted, then
    read at positions (the median of an even count is the mean of the middle two, as np.median
    takes it). The engine's sides (analysis/engine.py) are summarised here too."""
    counts = np.bincount(point, minlength=len(keys))
    ends = np.cumsum(counts)
    ordered = values[np.lexsort((values, point))]
    starts = ends - counts
    low, high = ordered[starts + (counts - 1) // 2], ordered[starts + counts // 2]
    with np.errstate(over="ignore"):
        median = np.where(counts % 2 == 1, low, (low + high) / 2)
    return dict(zip(keys, zip(median.tolist(), ordered[starts].tolist(), ordered[ends - 1].tolist())))


def _flat_samples(samples: list, has: np.ndarray, side: str) -> np.ndarray:
    """The samples of every row that has some, one flat array."""
    if not has.any():
        return np.zeros(0)
    try:
        return np.concatenate([np.asarray(v, dtype=float).reshape(-1) for v, h in zip(samples, has) if h])
    except (TypeError, ValueError):
        raise BadInput(f"the {side} results hold samples_us that are not numbers: a damaged or hand-edited "
                       "file; re-run the measurement") from None


def _check_samples(samples: list, time_us: np.ndarray, side: str):
    """Every row's samples checked at once: which rows hold some, which are damaged (a time or a
    sample that is not a positive number), and where each row's samples start."""
    n = len(samples)
    lengths = np.fromiter((0 if v is None else len(v) for v in samples), dtype=np.int64, count=n)
    has = lengths > 0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = _flat_samples(samples, has, side)
    positive = np.isfinite(flat) & (flat > 0)
    ok = np.zeros(n, dtype=bool)
    if has.any():
        ok[has] = (np.logical_and.reduceat(positive, offsets[:-1][has]) & np.isfinite(time_us[has])
                   & (time_us[has] > 0))
    return has, has & ~ok, offsets


