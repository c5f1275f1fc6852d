"""What plot and report read through the engine: the curves' lines, each run's first row, the report's rows.

Large inputs are drawn from the files without reading their rows into pandas (plot_source: curves
only, every row a curve point; zero, buckets and pairs rows stay with pandas); a figure's lines
over rows already in memory take the same query (frame_lines). The report's rows come as a few
columns, each string column categorical and hosts one shared list per distinct value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commbench.core import workloadspec
from commbench.analysis.points import points
from commbench.analysis.points.pointtable import ROW_BITS, Query, Source, large, open_source, quote
from commbench.analysis.points.sides import summarise
from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_NESTING, UNREADABLE, nests_deeper
from commbench.core.stragglers import MIN_ITERS, rank_hosts

# curves only; zero, buckets and pairs rows stay with pandas
PLOT_WORKLOADS = workloadspec.names(drawn_as=workloadspec.CURVE)
HEAVY_COLUMNS = ("samples_us", "rank_time_us", "rank_skew_us", "env", "plan")


def plot_source(paths: Sequence[str | os.PathLike], force: bool = False) -> Query | None:
    """A query over files the engine can draw (MIN_ROWS rows or more, unless `force`; every row a
    curve point, no zero grid, buckets or pairs rows), else None."""
    if not force and not large(paths):
        return None
    source = open_source(paths)
    q = Query(source, "plotted")
    if "workload" in source.columns:
        allowed = ", ".join(f"'{w}'" for w in PLOT_WORKLOADS)
        if q.run(f"SELECT count(*) AS n FROM rows WHERE coalesce(workload NOT IN ({allowed}), false)"
                 ).column("n")[0].as_py():
            return None
    return q


def frame_lines(frame: pd.DataFrame, column: str, side: str | None = None) -> list:
    """plot_lines over rows in memory (the columns a curve reads, handed to the engine)."""
    return plot_lines(points.rows_of(frame, column), column, side)


def plot_lines(q: Query, column: str, side: str | None = None) -> list:
    """curveplot.aggregate's lines of `column` over the files, in the same order with the same numbers,
    each the fields of a curveplot.Line; `side`: every run of the files as one, named so (the overlay)."""
    keys = points.LINE_KEYS
    named = {"label": "''", "run_id": "'" + side.replace("'", "''") + "'"} if side is not None else {}
    exprs = [f"{named[k]} AS {k}" if k in named else k for k in keys]
    got = q.run(f"SELECT {', '.join(exprs)}, size_bytes, min(gi) AS first, list(value ORDER BY gi) AS vals, "
                f"bool_or(coalesce(wrong, 0) > 0) AS wrong, median(ci) AS ci FROM ({points.curve_rows(q, column)}) "
                "GROUP BY ALL ORDER BY first")
    if not got.num_rows:
        raise BadInput(f"the results hold no finite {column} values: nothing to plot")
    groups = list(zip(*[got.column(k).to_pylist() for k in keys]))
    counts = pc.list_value_length(got.column("vals")).to_numpy().astype(np.int64)
    values = got.column("vals").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(float)
    numbered: list[tuple] = [(i,) for i in range(len(groups))]  # each group by its position
    summary = summarise(numbered, np.repeat(np.arange(len(groups)), counts), values)
    sizes, wrong_of = got.column("size_bytes").to_pylist(), got.column("wrong").to_pylist()
    cis = np.asarray([math.nan if c is None else c for c in got.column("ci").to_pylist()], dtype=float)
    by_line: dict[tuple, list[int]] = {}
    for i, k in enumerate(groups):
        by_line.setdefault(k, []).append(i)
    lines = []
    for k, idx in by_line.items():
        idx = sorted(idx, key=lambda i: sizes[i])  # stable: sizes of one line are distinct anyway
        s = np.asarray([sizes[i] for i in idx], dtype=float)
        med, lo, hi = (np.array([summary[(i,)][j] for i in idx], dtype=np.float64) for j in range(3))
        lines.append(dict(key=dict(zip(keys, k)), sizes=s, median=med, lo=lo, hi=hi, reps=counts[idx],
                          wrong_sizes=s[np.asarray([bool(wrong_of[i]) for i in idx])], ci=cis[idx]))
    return lines


def run_firsts(q: Query, column: str) -> pd.DataFrame:
    """The first row of every run that a curve of `column` is drawn from, every column but the
    per-row lists and env/plan: what the figures' titles read of a run (runs.run_rows)."""
    wanted = points.first_rows(q, column)
    names = [quote(c) for c in q.source.columns if not pa.types.is_list(q.source.columns[c])
             and not pa.types.is_large_list(q.source.columns[c])] + (["hosts"] if "hosts" in q.source.columns else [])
    frame = q.run(f"SELECT {', '.join(dict.fromkeys(names))} FROM rows WHERE {_rows_at(wanted)} "
                  "ORDER BY gi").to_pandas()
    for name in ("env", "net", "plan"):
        if name in frame.columns:
            frame[name] = [_bounded(t) for t in frame[name]]
    if "run_id" in frame.columns:
        frame["run_id"] = frame["run_id"].fillna("?")
    if "label" in frame.columns:
        frame["label"] = frame["label"].fillna("")
    return frame


def _rows_at(gis: Sequence[int]) -> str:
    """The condition of the rows numbered `gis`: their row numbers within a file first, a filter
    DuckDB applies while it reads the files (only the row groups that hold them are decoded;
    `gi IN` alone reads every row of every column asked for, a large run's wire JSON included)."""
    within = sorted({int(g) & ((1 << ROW_BITS) - 1) for g in gis})
    return (f"file_row_number IN ({', '.join(map(str, within))}) AND gi IN ({', '.join(str(int(g)) for g in gis)})"
            if within else "gi IN ()")


def _bounded(text: Any) -> Any:
    """A JSON cell nested deeper than MAX_NESTING read as UNREADABLE, as read_results reads it."""
    import json

    return json.dumps(UNREADABLE) if isinstance(text, str) and nests_deeper(text, MAX_NESTING) else text


# ---- report: every row, but only the columns a report reads, strings as categories ----

# What the report's sections read of a curves-only run's frame (runs.py, wireview.py; the curves' tables and
# the wire/payload ratios come from the files, summary.curve_tables): per row, the line, the point and its
# numbers; per run, what its facts show.
REPORT_COLUMNS = ("collective", "dtype", "op", "in_place", "label", "run_id", "settings", "size_bytes", "world_size",
                  "nnodes", "ranks_per_node", "busbw_GBps", "algbw_GBps", "time_us", "wrong", "repetition",
                  "workload", "status", "wire", "wire_trouble", "started_at", "launcher",
                  "backend", "device",
                  "device_name", "iface", "mtu", "link_layer", "hosts", "commbench_version", "torch_version",
                  "nccl_version", "env", "net", "plan", "schema_version")


# What the baseline's "Runs" section reads of its rows (report.runs_html): a run's facts and, per
# run, its collectives, dtypes, sizes, repetitions, rows and settings; not the measured values.
BASELINE_COLUMNS = tuple(c for c in REPORT_COLUMNS if c not in (
    "op", "in_place", "busbw_GBps", "algbw_GBps", "time_us", "wrong", "status", "wire", "wire_trouble",
    "plan", "schema_version"))


def report_frame(source: Source, wanted: Sequence[str] = REPORT_COLUMNS) -> pd.DataFrame:
    """The rows of `source` as the report's tables read them (summary.py, runs.py): `wanted` of REPORT_COLUMNS,
    each string column categorical (a code a row, not an object), hosts one shared list per
    distinct value, env/net/plan bounded as read_results bounds them, the wire JSON only on the rows
    whose wire_trouble flag is set (the Wire section reads no other: wireview.troubles_at). Converted
    a column at a time, so that the rows are held once and a column twice, not all of them twice."""
    schemas = [pq.read_schema(f) for f in source.files]
    columns = {}
    flagged_wire = "wire" in wanted and "wire" in source.columns and "wire_trouble" in source.columns
    for name in (n for n in wanted if n != "hosts" and any(n in s.names for s in schemas)
                 and not (n == "wire" and flagged_wire)):
        parts = []
        for f, schema in zip(source.files, schemas):
            if name not in schema.names:
                parts.append(pa.nulls(pq.ParquetFile(f).metadata.num_rows, source.columns[name]))
                continue
            string = pa.types.is_string(schema.field(name).type)
            parts.append(pq.read_table(f, columns=[name], read_dictionary=[name] if string else None).column(name))
        table = pa.concat_tables([pa.table({name: p}) for p in parts], promote_options="permissive")
        col = table.unify_dictionaries().column(name)
        del parts, table
        columns[name] = col.to_pandas()
        del col
        pa.default_memory_pool().release_unused()
    if flagged_wire:
        columns = {n: (_flagged_wire(source, len(next(iter(columns.values())))) if n == "wire" else columns[n])
                   for n in wanted if n in columns or n == "wire"}
    frame = pd.DataFrame(columns)
    del columns
    for name in ("env", "net", "plan"):
        if name in frame.columns and isinstance(frame[name].dtype, pd.CategoricalDtype):
            cats = [_bounded(c) for c in frame[name].cat.categories]
            if len(set(cats)) == len(cats):
                frame[name] = frame[name].cat.rename_categories(cats)
            else:
                frame[name] = np.asarray(cats, dtype=object)[frame[name].cat.codes.to_numpy()]
    for name in ("label", "dtype", "run_id"):  # points.py's fills, done here: a category cannot take them
        if name in frame.columns and isinstance(frame[name].dtype, pd.CategoricalDtype) and frame[name].isna().any():
            fill = "" if name == "label" else "?"
            col = frame[name]
            frame[name] = (col.cat.add_categories([fill]) if fill not in col.cat.categories else col).fillna(fill)
    if "hosts" in source.columns and "hosts" in wanted:
        frame["hosts"] = _run_hosts(source, frame)
    return frame


def _flagged_wire(source: Source, rows: int) -> np.ndarray:
    """The wire column with its JSON on the rows whose wire_trouble flag is set, None elsewhere,
    read a batch at a time: every row's JSON, distinct a row, is most of a large run's bytes."""
    out = np.full(rows, None, dtype=object)
    starts = np.cumsum([0] + [pq.ParquetFile(f).metadata.num_rows for f in source.files])
    q = Query(source, "reported")
    for batch in q.batches("SELECT gi, wire FROM rows WHERE coalesce(CAST(wire_trouble AS BOOLEAN), false) "
                           "AND wire IS NOT NULL"):
        gi = batch.column("gi").to_numpy()
        out[starts[gi >> ROW_BITS] + (gi & ((1 << ROW_BITS) - 1))] = batch.column("wire").to_numpy(
            zero_copy_only=False)
    return out


def _run_hosts(source: Source, frame: pd.DataFrame) -> np.ndarray:
    """hosts on the first row of every run, None elsewhere: the report reads a run's hosts from its
    first row only (runs.run_rows), and a list a row of a million rows is most of a frame."""
    out = np.full(len(frame), None, dtype=object)
    if not len(frame):
        return out
    firsts = (frame.drop_duplicates(subset=["run_id"]).index.to_numpy() if "run_id" in frame.columns
              else np.zeros(1, dtype=np.int64))
    starts = np.cumsum([0] + [pq.ParquetFile(f).metadata.num_rows for f in source.files])
    fi = np.searchsorted(starts, firsts, side="right") - 1
    gis = (fi.astype(np.int64) << ROW_BITS) + (firsts - starts[fi])
    got = Query(source, "reported").run(f"SELECT gi, hosts FROM rows WHERE {_rows_at(gis.tolist())}")
    at = dict(zip(got.column("gi").to_pylist(), got.column("hosts").to_pylist()))
    for row, gi in zip(firsts.tolist(), gis.tolist()):
        out[row] = at.get(gi)
    return out


# ---- report: each run's per-rank skews, for its "late arrivals" fact ----

SKEW_BATCH = 65_536  # rows a batch of rank_skew_us read from the files


def rank_skews(source: Source) -> Iterator[tuple[str, list[str], np.ndarray, np.ndarray]]:
    """Per run (run_id, '?' where missing), what core/stragglers.run_findings judges of its rows,
    read from the files: rank r's host (rank_hosts of its first row that says it), its usable
    points' skews as a (points x ranks) matrix and their time_us. Only rank_skew_us, time_us and
    iters are read of every row, a batch at a time; memory follows the usable points (10M rows of
    2 ranks: 160 MB), not the rows' other columns. Nothing for files without those columns."""
    if not {"rank_skew_us", "rank_host", "hosts", "time_us", "run_id"} <= set(source.columns):
        return
    q = Query(source, "reported")
    hosts = _run_rank_hosts(q)
    runs = list(hosts)
    if not runs:
        return
    worlds = np.asarray([len(hosts[r]) for r in runs], dtype=np.int64)
    q.con.register("_worlds", pa.table({"k": np.arange(len(runs)), "run": runs, "world": worlds}))
    iters = f" AND NOT coalesce(r.iters < {MIN_ITERS}, false)" if "iters" in source.columns else ""
    skews: list[list[np.ndarray]] = [[] for _ in runs]
    times: list[list[np.ndarray]] = [[] for _ in runs]
    for batch in q.batches("SELECT w.k, CAST(r.rank_skew_us AS DOUBLE[]) AS s, CAST(r.time_us AS DOUBLE) AS t "
                           "FROM rows r JOIN _worlds w ON coalesce(r.run_id, '?') = w.run "
                           f"WHERE len(r.rank_skew_us) = w.world{iters}", SKEW_BATCH):
        k = batch.column("k").to_numpy()
        lists = batch.column("s")
        lengths = pc.list_value_length(lists).to_numpy().astype(np.int64)
        values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(float)
        starts = np.cumsum(lengths) - lengths
        t = batch.column("t").to_numpy(zero_copy_only=False).astype(float)
        for code in np.unique(k).tolist():
            mine = k == code
            skews[code].append(values[starts[mine][:, None] + np.arange(worlds[code])])
            times[code].append(t[mine])
    for code, run in enumerate(runs):
        skew = np.concatenate(skews[code]) if skews[code] else np.zeros((0, int(worlds[code])))
        time_us = np.concatenate(times[code]) if times[code] else np.zeros(0)
        skews[code] = times[code] = []  # each run's blocks let go once joined
        yield run, hosts[run], skew, time_us


def _run_rank_hosts(q: Query) -> dict[str, list[str]]:
    """Per run, in the order of its first row, rank r's host as run_findings finds it: from the
    run's first row whose rank_host and hosts say it (stragglers.rank_hosts)."""
    run = "coalesce(run_id, '?')"
    said = "rank_host IS NOT NULL AND hosts IS NOT NULL"
    firsts = q.run(f"SELECT {run} AS run, min(gi) AS first FROM rows WHERE {said} GROUP BY ALL ORDER BY first")
    gis = firsts.column("first").to_pylist()
    got = q.run(f"SELECT gi, rank_host, hosts FROM rows WHERE {_rows_at(gis)}")
    rows = dict(zip(got.column("gi").to_pylist(), got.select(["rank_host", "hosts"]).to_pylist()))
    out = {}
    for name, gi in zip(firsts.column("run").to_pylist(), gis):
        hosts = rank_hosts(rows[gi])
        if hosts is None:  # an index past its hosts: the run's next rows, as run_findings reads them
            literal = "'" + str(name).replace("'", "''") + "'"
            hosts = next((h for b in q.batches(f"SELECT rank_host, hosts FROM rows WHERE {run} = {literal} "
                                               f"AND {said} ORDER BY gi") for h in map(rank_hosts, b.to_pylist())
                          if h is not None), None)
        if hosts is not None:
            out[str(name)] = hosts
    return out
