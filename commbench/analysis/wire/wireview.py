"""The `wire` column as compare and report read it (core/wire.py holds its format).

Per row: whether counters were read and whether a trouble counter (error, drop, retransmit, pause,
congestion) moved, from the `wire_trouble` flag (the JSON is parsed only where a flag is missing
or a trouble counter must be named). Compare's likely cause for a point whose trouble counters were
0 (or GROWTH times smaller) before and moved after (cause_of; analysis/points/pointtable.py sums them); and the
rows of the reports' "Wire" section. Files from before the counters lack the columns: everything reads as not read.
Plain text only; the HTML page and the Markdown escape it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from commbench.analysis.points import points
from commbench.analysis.points.frames import column, is_true, present
from commbench.core import wire
from commbench.core.units import counted, format_size
from commbench.core.vocab import order_key

CAUSE_LIMIT = 4  # counters a likely cause names; the rest are counted
KINDS_TEXT = "link, error, drop, retransmit, pause or congestion"
NOT_READ_TEXT = "No counters were read (results from before counters, or --no-wire)."
WIRE_NOTE = ("NIC, port and TCP counters read on every host before and after each point (docs/RESULTS.md): "
             "the trouble counters that moved, summed over the points they moved in, and the bytes each "
             "host sent on the wire per byte the collective had to send (about 1.05 on a clean TCP link "
             "at MTU 1500: the frames' headers).")
TROUBLE_HEADERS = ["host", "place", "counter", "kind", "summed delta", "points"]
PAYLOAD_HEADERS = ["collective", "run", "points", "median wire/payload", "min..max", "at the largest size"]


# ---- per row ----


def row_flags(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (counters were read, a trouble counter moved). From `wire_trouble` where the frame
    has it; from the `wire` JSON otherwise; nothing read when it has neither column."""
    n = len(frame)
    if "wire_trouble" in frame.columns:
        read = frame["wire_trouble"].notna().to_numpy(dtype=bool)
        return read, is_true(frame, "wire_trouble") & read
    if "wire" not in frame.columns:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    states = [wire.is_clean(v) for v in column(frame, "wire")]
    read = np.fromiter((s is not None for s in states), dtype=bool, count=n)
    return read, np.fromiter((s is False for s in states), dtype=bool, count=n)


def troubles_at(frame: pd.DataFrame, idx: np.ndarray | None = None) -> list[tuple[wire.Trouble, int]]:
    """Per host, place and counter: the summed delta over the rows (positions `idx`; every row by
    default) and the number of rows it moved in (core/wire.py totals). Where the frame holds the
    `wire_trouble` flag, only the flagged rows' JSON is parsed."""
    if "wire" not in frame.columns:
        return []
    idx = np.arange(len(frame)) if idx is None else np.asarray(idx, dtype=np.int64)
    if "wire_trouble" in frame.columns:
        idx = idx[is_true(frame, "wire_trouble")[idx]]
    values = frame["wire"].to_numpy(dtype=object)[idx]
    return wire.totals(v for v in values if isinstance(v, str) and present(v))


# ---- per point (compare) ----


GROWTH = 10  # a counter that moved before too is a lead when it moved this many times more a row after


def cause_text(found: list[tuple[wire.Trouble, int | None]], limit: int = CAUSE_LIMIT) -> str:
    """'cbnode2 eth0 qdisc drops +1,815, cbnode2 tcp RetransSegs +2,736 (trouble counters were 0 before)';
    a counter that moved before too carries its before figure: 'cbnode1 tcp RetransSegs +3,945 (+45 before)'."""
    found = sorted(found, key=lambda item: item[0].cause_rank())  # the drop before the retransmissions it causes
    named = ", ".join(t.text() + ("" if was is None else f" (+{was:,} before)") for t, was in found[:limit])
    more = f", +{len(found) - limit} more" if len(found) > limit else ""
    new = [was is None for _, was in found]
    tail = " (trouble counters were 0 before)" if all(new) else " (the others were 0 before)" if any(new) else ""
    return f"{named}{more}{tail}"


def cause_of(before: list[tuple[wire.Trouble, int]], before_rows: int, after: list[tuple[wire.Trouble, int]],
             after_rows: int) -> str | None:
    """A point's likely cause from each side's summed trouble counters (troubles_at) and its row
    counts: the counters that moved after and were 0 before, or moved GROWTH times more a row."""
    was = {_counter(t): t.delta for t, _ in before}
    found = [(t, was.get(_counter(t))) for t, _ in after]
    found = [(t, w) for t, w in found if w is None or t.delta * before_rows >= GROWTH * w * after_rows]
    return cause_text(found) if found else None


def merge_totals(acc: dict[tuple, list], part: list[tuple[wire.Trouble, int]]) -> dict[tuple, list]:
    """core/wire.totals of a point's rows built a part at a time (rows read in batches): `acc`
    maps (host, place, counter, kind) to [summed delta, rows it moved in]; totals_of reads it back."""
    for t, n in part:
        got = acc.setdefault((t.host, t.where, t.counter, t.kind), [0, 0])
        got[0] += t.delta
        got[1] += n
    return acc


def totals_of(acc: dict[tuple, list]) -> list[tuple[wire.Trouble, int]]:
    """merge_totals' sums as core/wire.totals returns them."""
    rows = [(wire.Trouble(h, w, c, d, k), n) for (h, w, c, k), (d, n) in acc.items()]
    return sorted(rows, key=lambda r: (r[0].host, r[0].where, -r[0].delta))


SUM_BATCH = 10_000  # wire JSON values summed_by_point holds at once


def summed_by_point(pairs: Iterable[tuple[tuple, object]], wanted: set) -> dict[tuple, list[tuple[wire.Trouble, int]]]:
    """Per point of `wanted`: troubles_at's answer over its rows, from (point key, wire value)
    pairs in row order (a large run's flagged rows, read a batch at a time: analysis/points/pointtable.py),
    the JSON of SUM_BATCH rows held at once, summed as core/wire.totals sums (merge_totals)."""
    summed: dict[tuple, dict[tuple, list]] = {}
    pending: dict[tuple, list] = {}
    held = 0
    for key, value in pairs:
        if key in wanted and isinstance(value, str) and present(value):
            pending.setdefault(key, []).append(value)
            held += 1
        if held >= SUM_BATCH:
            for k, values in pending.items():
                merge_totals(summed.setdefault(k, {}), wire.totals(values))
            pending, held = {}, 0
    for k, values in pending.items():
        merge_totals(summed.setdefault(k, {}), wire.totals(values))
    return {k: totals_of(acc) for k, acc in summed.items()}


def _counter(t: wire.Trouble) -> tuple:
    return t.host, t.where, t.counter


# ---- the reports' "Wire" section (summary rows, plain text) ----


@dataclass
class WireSection:
    """What the "Wire" section shows: `sentence` when there is nothing to tabulate (no counters, or
    nothing moved), the trouble rows (TROUBLE_HEADERS cells), the wire bytes per payload byte
    (PAYLOAD_HEADERS cells), and a line on how many points read counters."""

    sentence: str | None
    read_line: str
    troubles: list[list[str]] = field(default_factory=list)
    payload: list[list[str]] = field(default_factory=list)


def section(df: pd.DataFrame, run_names: dict[str, str] | None = None,
            ratios: pd.DataFrame | None = None) -> WireSection:
    """The Wire section of a results table (every row a point measured once); `ratios`: its points'
    wire/payload medians (points.ratio_medians) where they were read from the files, not from df."""
    read, trouble = row_flags(df)
    n, points = int(read.sum()), len(df)
    if n == 0:
        return WireSection(NOT_READ_TEXT, "")
    read_line = (f"Counters were read during {n} of {points} points." if n < points
                 else f"Counters were read during {'all ' if n > 1 else ''}{counted(n, 'point')}.")
    rows = []
    if trouble.any():
        for t, moved in troubles_at(df, np.flatnonzero(trouble)):
            rows.append([t.host, t.where, t.counter, t.kind, f"+{t.delta:,}", f"{moved} of {n}"])
    sentence = None if rows else f"No {KINDS_TEXT} counter moved during {counted(n, 'point')}."
    return WireSection(sentence, read_line, rows, payload_rows(df if ratios is None else ratios, run_names))


def payload_rows(rows: pd.DataFrame, run_names: dict[str, str] | None = None) -> list[list[str]]:
    """Per collective and run: the points with a wire/payload ratio, the median of their medians
    over repetitions (points.ratio_medians of `rows`, or `rows` already those medians), min..max
    over those, and the median at the largest size."""
    if "wire_per_payload" not in rows.columns or len(rows) == 0:
        return []
    medians = rows if points.is_ratio_table(rows) else points.ratio_medians(rows)
    per_point = medians.rename(columns={"run_id": "run", "size_bytes": "size", "wire_per_payload": "ratio"})
    if per_point.empty:
        return []
    out = []
    for (coll, run), g in per_point.groupby(["collective", "run"], sort=False):
        largest = g.loc[g["size"].idxmax()]
        out.append([coll, (run_names or {}).get(run, run), str(len(g)), f"{g['ratio'].median():.3f}",
                    f"{g['ratio'].min():.3f}..{g['ratio'].max():.3f}",
                    f"{largest['ratio']:.3f} ({format_size(int(largest['size']))})"])
    out.sort(key=lambda r: (order_key(r[0]), r[1]))
    return out
