"""The points of curves: which rows a curve is drawn from, and their medians per point, in one query.

Every reader of curves takes it, whether the rows lie in files (a large input, a Query over them)
or in memory (a frame, handed to the engine with the columns read here only): plot's lines
(figurequery.plot_lines), the report's peak and point tables and the reduce-scatter gap
(summary.py), its Settings tables (settingsview.py), the figures' titles (the first row of each
run drawn). So the rules below are written once, in SQL:

- a row is drawn when its value is finite at a positive size (a time also positive);
- a buckets row is drawn as its collective "in buckets", at its bucket size;
- a line is LINE_KEYS (two settings of a run are two lines); a key no row holds is filled:
  dtype and run_id "?", label and settings "", in_place false ("" for a column no file has);
- a point is a line's size; its medians are over its rows (every repetition, every rank's row),
  NaN read as missing (as pandas' median skips it), and #wrong sums its rows (None when none was checked).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from commbench.analysis.points.pointtable import Query, frame_source, quote
from commbench.core.columns import LINE_KEY
from commbench.core.errors import BadInput
from commbench.core.grouplabel import PARTS, label_sql

SETTINGS = "settings"
GROUP = "layout_group"  # a layout run's group: 'dp0 [0,2]', 'dp0 [0,2] solo' (core/grouplabel.py); '' off one
LINE_KEYS = (*LINE_KEY, SETTINGS, GROUP)  # a curve's identity with its setting and group
BUCKETS_SUFFIX = " in buckets"  # a buckets row is drawn as its collective with this suffix
# a point's medians; ci: how precisely its rows' medians are known (time_ci; NULL in older files)
MEASURES = {"busbw": "busbw_GBps", "algbw": "algbw_GBps", "time": "time_us", "ci": "time_ci"}
# What a point's groups may name besides LINE_KEYS (the Settings tables and the gap group by them).
EXTRA_KEYS = ("world_size", "backend")
# The columns read of rows in memory: a frame is handed to the engine with these only.
READ = (*LINE_KEYS, "size_bytes", "workload", "bucket_bytes", *MEASURES.values(), "wrong", *EXTRA_KEYS,
        "wire_per_payload", *(p.column for p in PARTS))
_FILLS = {"dtype": "'?'", "label": "''", "run_id": "'?'", SETTINGS: "''"}


def rows_of(rows: pd.DataFrame | Query, column: str = "busbw_GBps") -> Query:
    """The query a curve of `column` is drawn from: the files' (a Query, as it is) or a frame's,
    of its READ columns; BadInput in one line when the frame holds no rows or lacks a column."""
    if isinstance(rows, Query):
        return rows
    if rows is None or len(rows) == 0:
        raise BadInput("the results hold no points (an empty or interrupted run): nothing to plot")
    missing = [c for c in ("collective", "size_bytes", column) if c not in rows.columns]
    if missing:
        raise BadInput(f"the results have no column {missing[0]}: pass files written by commbench")
    frame = rows[[c for c in rows.columns if c in READ]]
    return Query(frame_source(frame, "plotted", require=()), "plotted")


def _key(q: Query, name: str) -> str:
    """One LINE_KEYS column as a line holds it (the fills above), as SQL."""
    has = q.source.columns
    if name == GROUP:
        return _group(has)
    if name not in has:
        return f"{'false' if name == 'in_place' else repr('')} AS {name}"
    if name == "in_place":
        return "coalesce(CAST(in_place AS BOOLEAN), false) AS in_place"
    text = f"CAST({quote(name)} AS VARCHAR)"
    if name == "collective" and "workload" in has and "bucket_bytes" in has:
        text = f"CASE WHEN {_IN_BUCKETS} THEN {text} || '{BUCKETS_SUFFIX}' ELSE {text} END"
    return f"coalesce({text}, {_FILLS[name]}) AS {name}" if name in _FILLS else f"{text} AS {name}"


def _group(has: Iterable[str]) -> str:
    """A row's group label with its ranks (core/grouplabel.py) as SQL; '' off a layout run."""
    return f"{label_sql(has) or repr('')} AS {GROUP}"


_IN_BUCKETS = "coalesce(workload = 'buckets' AND bucket_bytes IS NOT NULL, false)"


def _number(q: Query, name: str) -> str:
    """A measured column as DOUBLE, NaN as NULL; NULL where no file has it."""
    if name not in q.source.columns:
        return "CAST(NULL AS DOUBLE)"
    value = f"CAST({quote(name)} AS DOUBLE)"
    return f"CASE WHEN isnan({value}) THEN NULL ELSE {value} END"


def curve_rows(q: Query, column: str) -> str:
    """SQL (a subquery) of the rows a curve of `column` is drawn from, in row order: LINE_KEYS,
    size_bytes, `value` (the column), each MEASURES value under its short name, wrong, EXTRA_KEYS
    and gi (the row's number)."""
    has = q.source.columns
    if column not in has:
        raise BadInput(f"the results have no column {column}: pass files written by commbench")
    size = "TRY_CAST(size_bytes AS BIGINT)"
    if "workload" in has and "bucket_bytes" in has:
        size = f"CASE WHEN {_IN_BUCKETS} THEN TRY_CAST(bucket_bytes AS BIGINT) ELSE {size} END"
    measures = [f"{_number(q, c)} AS {short}" for short, c in MEASURES.items()]
    world = "coalesce(TRY_CAST(world_size AS BIGINT), 0)" if "world_size" in has else "0"
    backend = "CAST(backend AS VARCHAR)" if "backend" in has else "CAST(NULL AS VARCHAR)"
    extra = [f"{world} AS world_size", f"{backend} AS backend"]  # EXTRA_KEYS; world_size 0 where unknown
    wrong = "TRY_CAST(wrong AS BIGINT)" if "wrong" in has else "CAST(NULL AS BIGINT)"
    keep = "coalesce(isfinite(value) AND size_bytes > 0, false)" + (" AND value > 0" if column == "time_us" else "")
    return (f"SELECT * FROM (SELECT {', '.join(_key(q, k) for k in LINE_KEYS)}, {size} AS size_bytes, "
            f"CAST({quote(column)} AS DOUBLE) AS value, {', '.join(measures)}, {wrong} AS wrong, "
            f"{', '.join(extra)}, gi FROM rows) WHERE {keep}")


def medians(rows: pd.DataFrame | Query, by: Sequence[str] = LINE_KEYS, column: str = "busbw_GBps") -> pd.DataFrame:
    """One row a group of `by` (LINE_KEYS and EXTRA_KEYS columns) and size, in the order of its
    first row: the group's keys, size_bytes, the median of each MEASURES column under its short
    name, reps (its rows), wrong (their sum; None when no row was checked) and unchecked (its rows
    without a check). The rows are those a curve of `column` is drawn from."""
    q = rows_of(rows, column)
    keys = ", ".join(by)
    got = q.run(f"SELECT {keys}, size_bytes, min(gi) AS first, "
                + ", ".join(f"median({m}) AS {m}" for m in MEASURES)
                + ", count(*) AS reps, CAST(sum(wrong) AS DOUBLE) AS wrong, count(*) - count(wrong) AS unchecked "
                f"FROM ({curve_rows(q, column)}) GROUP BY {keys}, size_bytes ORDER BY first").to_pandas()
    got["wrong"] = got["wrong"].astype(object).where(got["wrong"].notna(), None)
    return got


def first_rows(q: Query, column: str) -> list[int]:
    """The number (gi) of each run's first row that a curve of `column` is drawn from, in row order."""
    got = q.run(f"SELECT min(gi) AS gi FROM ({curve_rows(q, column)}) GROUP BY run_id ORDER BY gi")
    return [int(g) for g in got.column("gi").to_pylist()]


def first_frame_rows(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """The first drawn row of every run of a frame in memory, with every column: what a figure's
    titles read of a run (a frame's row numbers are its positions)."""
    return df.iloc[first_rows(rows_of(df, column), column)]


def ratio_medians(rows: pd.DataFrame | Query, column: str = "wire_per_payload") -> pd.DataFrame:
    """Per collective, run and size, in the order of its first row: the median of the finite values
    of `column` (the Wire section's wire bytes per payload byte, a row's own ratio); no row where
    none is finite, and an empty table where no row holds the column."""
    if isinstance(rows, pd.DataFrame) and column not in rows.columns:
        return pd.DataFrame({c: [] for c in (*RATIO_COLUMNS[:3], column)})
    q = rows_of(rows, column)
    run = "coalesce(CAST(run_id AS VARCHAR), '?')" if "run_id" in q.source.columns else "'?'"
    return q.run(f"SELECT CAST(collective AS VARCHAR) AS collective, {run} AS run_id, size_bytes, "
                 f"median(value) AS {quote(column)} FROM (SELECT *, CAST({quote(column)} AS DOUBLE) AS value "
                 "FROM rows) WHERE coalesce(isfinite(value), false) GROUP BY ALL ORDER BY min(gi)").to_pandas()


RATIO_COLUMNS = ("collective", "run_id", "size_bytes", "wire_per_payload")  # ratio_medians' table


def is_ratio_table(frame: pd.DataFrame) -> bool:
    """A table of ratio_medians (one row a point) rather than rows."""
    return tuple(frame.columns) == RATIO_COLUMNS
