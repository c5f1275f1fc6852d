"""The one aggregation from results to points: DuckDB over the parquet files, or over rows in memory.

compare, gate and plot need, of a million rows, only a few numbers a point: each point's
repetition values (busbw, algbw on one rank), whether its rows hold damaged samples, and the
distinct values of the columns that describe a run. The same queries group every input, whatever
its size: files where they lie (open_source: each through core/filecheck.py's door, read through
descriptors, only the columns a query names), or a frame already in memory (frame_source:
compare_frames, gate.judge and curveplot.aggregate of read_results' frames), so memory follows the
number of points and repetitions, not the columns of every row, and no grouping is written twice.
Per-iteration samples are read only when a point needs the within-run test; the failed
repetitions of a point (a pairs link) come back counted per point. Wire counters (compare's likely
cause, the report's Wire section) are read from the wire_trouble flag a row; the wire JSON only
of the flagged rows, a batch at a time. MIN_ROWS decides only whether plot and report read the
rows into pandas at all (their tables are drawn from rows), never how points are grouped.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from commbench.core.linkstatus import FAILED
from commbench.analysis.points.sides import (KEY_COLUMNS, SAME_MEASUREMENT, Lost, Side, describe_point, lost_points,
                                             summarise)
from commbench.core import filecheck
from commbench.core.columns import BY_NAME, GATE_KEY, INT_KEYS, REQUIRED_COLUMNS, RUN_COLUMNS
from commbench.core.errors import BadInput
from commbench.core.grouplabel import label_sql
from commbench.core.inputs import MAX_NESTING, UNREADABLE, nests_deeper

# From this many rows on (both sides together), plot and report never read the rows into pandas:
# their figures come from the files by the engine and the report's tables from a few columns
# (report_frame). compare and gate aggregate in the engine at every size.
MIN_ROWS = int(os.environ.get("COMMBENCH_ENGINE_ROWS", "500000"))
ROW_BITS = 40  # a row's global number: file index << 40 | its row in the file (the order read_results reads)


def result_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The files read_results reads (core/results.py): each results file with its parts not yet
    compacted into it, each a checked regular file."""
    from commbench.core import results

    return results.result_files(paths)


def total_rows(files: Sequence[Path]) -> int:
    """Rows in all the files, from their footers (nothing else is read); 0 for a file that is
    not readable parquet (the reader that opens it says why)."""
    n = 0
    for f in files:
        try:
            n += pq.ParquetFile(f).metadata.num_rows
        except Exception:  # noqa: BLE001 - pyarrow raises several types; the real read reports it
            continue
    return n


@dataclass
class Source:
    """The checked files of one side and the columns they hold between them, or rows already in
    memory (`table`: a frame's, frame_source) that the same queries read instead."""

    files: list[Path]
    columns: dict[str, pa.DataType]  # name -> type, the first file's type where several hold it
    rows: int
    table: pa.Table | None = None


def frame_source(frame: pd.DataFrame, side: str, require: Sequence[str] = REQUIRED_COLUMNS) -> Source:
    """A results table in memory (read_results' frame, or one a caller built) as a source of the
    same aggregation as files: converted to Arrow once, through the door a file passes (`require`:
    the columns it must hold; a figure's rows, already chosen, need only theirs)."""
    from commbench.core.safetext import printable

    if not isinstance(frame, pd.DataFrame):
        raise BadInput(f"the {side} side is not a table of results")
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
        raise BadInput(f"the {side} results hold a column of mixed or unknown types "
                       f"({printable(str(exc).splitlines()[0][:160])}): pass files written by commbench") from None
    name = f"the {side} results"
    for i, f in enumerate(table.schema):  # a column with nothing in it (pandas: all NaN) holds no type
        if f.name in BY_NAME and table.num_rows and table.column(i).null_count == table.num_rows:
            table = table.set_column(i, f.name, pa.nulls(table.num_rows, BY_NAME[f.name].type))
    if table.num_rows:
        missing = [c for c in require if c not in table.column_names]
        if missing:
            raise BadInput(f"{name} have no column {missing[0]}: pass files written by commbench")
    filecheck.check_types(name, table.schema)
    filecheck.check_values(name, table)
    table = filecheck.conform(table, name).append_column("_gi", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    columns = {f.name: f.type for f in table.schema if f.name != "_gi"}
    return Source([], columns, table.num_rows, table)


def open_source(paths: Iterable[str | os.PathLike]) -> Source:
    """The files checked as read_results checks them (core/filecheck.py), one line of BadInput for
    the first bad one; a known column's type is the registry's (DuckDB reads the files' own)."""
    files = result_files(paths)
    columns: dict[str, pa.DataType] = {}
    rows = 0
    for f in files:
        checked = filecheck.check_file(f)
        for col in checked.schema:
            known = BY_NAME.get(col.name)
            columns.setdefault(col.name, known.type if known is not None else col.type)
        rows += checked.rows
    return Source(files, columns, rows)


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


MEMORY_LIMIT = os.environ.get("COMMBENCH_DUCKDB_MEMORY", "1GB")  # DuckDB's share of a command's 2 GB budget
_DATABASE: tuple[int, Any] | None = None  # (pid, the in-memory DuckDB database of this process)


def _connection() -> Any:
    """A connection of its own (its own temporary views and registered tables) to this process's
    one in-memory database: opening a database costs 15 ms, a connection to it 0.2 ms, and compare
    opens two a side. A forked child opens its own."""
    global _DATABASE
    import duckdb

    if _DATABASE is None or _DATABASE[0] != os.getpid():
        # An explicit memory limit (DuckDB's default is 80% of the machine): what a query needs beyond
        # it spills to a private folder under the system's temporary one, or ends in "out of memory".
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": max(1, min(4, os.cpu_count() or 1)), "memory_limit": MEMORY_LIMIT,
            "temp_directory": os.path.join(tempfile.gettempdir(), f"commbench-duckdb-{os.getpid()}")}
        _DATABASE = (os.getpid(), duckdb.connect(config=config))
    return _DATABASE[1].cursor()


class Query:
    """One DuckDB connection over a side's files; `rows` is a view of every row with its global
    number (gi), the value compared (v) and whether the row was left out as failed or a
    confirmation (excluded)."""

    def __init__(self, source: Source, side: str):
        self.source, self.side = source, side
        self.con = _connection()
        if source.table is not None:
            self.con.register("_table", source.table)
            self.con.execute(f"CREATE TEMP VIEW rows AS SELECT * EXCLUDE (_gi), _gi AS gi, {self._derived()} "
                             "FROM _table")
            return
        # Each file by its descriptor (core/results.ResultFile): a name is never a glob pattern, and a
        # live run's part read once stays readable for every later query of this connection.
        paths = [os.fspath(f) for f in source.files]
        self.con.register("_files", pa.table({"filename": paths, "fi": list(range(len(source.files)))}))
        names = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)  # SQL string literals
        self.con.execute(
            f"CREATE TEMP VIEW rows AS SELECT *, (fi::BIGINT << {ROW_BITS}) + file_row_number AS gi, {self._derived()} "
            f"FROM read_parquet([{names}], union_by_name = true, filename = true, file_row_number = true) "
            "JOIN _files USING (filename)")

    def _derived(self) -> str:
        """The view's own columns: the value compared (v: busbw, algbw on one rank), whether a row
        failed (a pairs link) and whether it is left out of the points (failed or a confirmation)."""
        has = self.source.columns
        v = "busbw_GBps" if "busbw_GBps" in has else "NULL"
        if "algbw_GBps" in has and "busbw_GBps" in has:
            v = "CASE WHEN world_size = 1 THEN algbw_GBps ELSE busbw_GBps END" if "world_size" in has else v
        failed = ("coalesce(status IN (" + ", ".join(f"'{s}'" for s in FAILED) + "), false)"
                  if "status" in has else "false")
        confirm = "coalesce(CAST(confirm AS BOOLEAN), false)" if "confirm" in has else "false"
        # a replayed barrier moves no byte: it has a time, but no bandwidth to compare
        empty = "coalesce(workload = 'replay' AND size_bytes = 0, false)" if {"workload", "size_bytes"} <= set(has) \
            else "false"
        return (f"CAST({v} AS DOUBLE) AS v, ({failed} AND NOT {confirm}) AS failed_row, "
                f"({failed} OR {confirm} OR {empty}) AS excluded")

    def text_column(self, name: str, default: str = "NULL") -> str:
        """SQL for a column as text, or `default` where the files have no such column."""
        return f"CAST({quote(name)} AS VARCHAR)" if name in self.source.columns else default

    def workload_sql(self) -> str:
        """SQL for a row's workload: files from before the column was written hold sweeps."""
        return f"coalesce({self.text_column('workload')}, 'sweep')"

    def run(self, sql: str, params: Sequence = ()) -> pa.Table:
        import duckdb

        try:
            return self.con.sql(sql, params=list(params) or None).to_arrow_table()
        except duckdb.OutOfMemoryException:
            raise filecheck.unreadable(f"the {self.side} results", MemoryError()) from None
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0][:200]
            raise BadInput(f"the {self.side} results could not be read ({type(exc).__name__}: {first}): "
                           "a damaged file; re-run the measurement or pass files written by commbench") from None

    def batches(self, sql: str, rows: int = 10_000) -> Iterator[pa.RecordBatch]:
        """The answer of `sql` a record batch at a time (memory follows the batch, not the answer)."""
        import duckdb

        try:
            reader = self.con.sql(sql).to_arrow_reader(rows)
            yield from reader
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0][:200]
            raise BadInput(f"the {self.side} results could not be read ({type(exc).__name__}: {first}): "
                           "a damaged file; re-run the measurement or pass files written by commbench") from None

    def key_exprs(self, normal: bool = True) -> list[str]:
        """Each KEY_COLUMNS column as a point's key holds it (sides._key_value), NULL where no file has it."""
        out = []
        for name in KEY_COLUMNS:
            if name not in self.source.columns:
                out.append(f"{_absent(name, self.source)} AS {quote(name)}")
            elif not normal:
                out.append(quote(name))
            elif name in INT_KEYS:
                value = f"TRY_CAST({quote(name)} AS BIGINT)"
                if BY_NAME[name].absent:  # a file of the side without the column: its rows as the registry says
                    value = f"coalesce({value}, {_absent(name, self.source)})"
                out.append(f"{value} AS {quote(name)}")
            elif name == "in_place":
                out.append("CAST(in_place AS BOOLEAN) AS in_place")
            elif name == "workload":
                same = " ".join(f"WHEN workload = '{a}' THEN '{b}'" for a, b in SAME_MEASUREMENT.items())
                out.append(f"CASE {same} ELSE workload END AS workload")
            else:
                out.append(quote(name))
        return out

    def has_any(self, name: str) -> bool:
        if name not in self.source.columns:
            return False
        got = self.run(f"SELECT count({quote(name)}) AS n FROM rows")
        return bool(got.column("n")[0].as_py())


def _absent(name: str, source: Source) -> str:
    """A key column no file of the side holds, as SQL: what the registry says an older file's rows
    meant without it (grad_accum 1 for zero), else NULL."""
    cases = [f"WHEN workload = '{w}' THEN {v!r}" for w, v in BY_NAME[name].absent if "workload" in source.columns]
    return f"CASE {' '.join(cases)} END" if cases else "NULL"


@dataclass
class Aggregate:
    """One side aggregated: its points in the order of their first row, each point's values
    (repetitions, in row order), the distinct values of the columns that describe its runs, and
    its failed rows as a pandas frame."""

    name: str
    keys: list[tuple]
    counts: np.ndarray  # repetitions of each point
    values: np.ndarray  # every point's values, one after the other
    context: pd.DataFrame  # distinct rows of the describing columns (compare's warnings and differences)
    lost: dict[tuple, Lost]  # point -> its repetitions that could not be measured (a failed pairs link)
    query: Query | None = field(default=None, repr=False)
    rows: int = 0
    # Per point: a row holds samples, and a row's time or a sample is not a positive number; read
    # the first time a point needs its samples (sample_flags): with enough repetitions none does,
    # and a pass over every sample of 10M rows costs more than all the rest of a comparison.
    has_samples: np.ndarray | None = field(default=None, repr=False)
    damaged: np.ndarray | None = field(default=None, repr=False)

    def side(self) -> Side:
        """This side as compare reads one (sides.Side): a point's rows are its values' positions."""
        return AggregateSide.of(self)

    def sample_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(has_samples, damaged), per point in the order of `keys`."""
        if self.has_samples is None or self.damaged is None:
            self.has_samples, self.damaged = _sample_flags(self)
        return self.has_samples, self.damaged


CONTEXT_COLUMNS = RUN_COLUMNS  # what describes a run (core/columns.py)


def aggregate(paths: Iterable[str | os.PathLike], side: str, source: Source | None = None) -> Aggregate:
    """The points of `side` (its files or folders) aggregated in the engine."""
    source = source or open_source(paths)
    q = Query(source, side)
    if "world_size" in source.columns and "algbw_GBps" not in source.columns:
        if q.run("SELECT count(*) AS n FROM rows WHERE world_size = 1").column("n")[0].as_py():
            raise BadInput(f"the {side} results hold world_size 1 points but no algbw_GBps column")
    keys = q.key_exprs()
    got = q.run(f"SELECT {', '.join(keys)}, count(*) AS n, min(gi) AS first, list(v ORDER BY gi) AS vals, "
                "bool_and(coalesce(isfinite(v) AND v > 0, false)) AS ok "
                "FROM rows WHERE NOT excluded GROUP BY ALL ORDER BY first")
    if not all(got.column("ok").to_pylist()):
        _check_values(q)  # names the first damaged row
    key_lists = [got.column(name).to_pylist() for name in KEY_COLUMNS]
    vals = got.column("vals").combine_chunks() if got.num_rows else pa.array([], pa.list_(pa.float64()))
    values = vals.flatten().to_numpy(zero_copy_only=False).astype(float) if got.num_rows else np.zeros(0)
    return Aggregate(name=side, keys=list(zip(*key_lists)) if got.num_rows else [],
                     counts=got.column("n").to_numpy().astype(np.int64), values=values,
                     context=_context(q), lost=_lost(q), query=q, rows=source.rows)


def _sample_flags(agg: Aggregate) -> tuple[np.ndarray, np.ndarray]:
    """Per point, in the order of agg.keys: whether a row holds samples, and whether a row's time or
    one of its samples is not a positive number (a damaged or hand-edited file)."""
    q = agg.query
    has, damaged = np.zeros(len(agg.keys), dtype=bool), np.zeros(len(agg.keys), dtype=bool)
    if q is None or "samples_us" not in q.source.columns:
        return has, damaged
    held = "coalesce(len(samples_us) > 0, false)"
    time_ok = "coalesce(isfinite(time_us) AND time_us > 0, false)" if "time_us" in q.source.columns else "false"
    bad = (f"({held} AND NOT (coalesce(list_count(samples_us) = len(samples_us) AND "
           f"isfinite(list_max(samples_us)) AND list_min(samples_us) > 0, false) AND {time_ok}))")
    got = q.run(f"SELECT {', '.join(q.key_exprs())}, bool_or({held}) AS has, bool_or({bad}) AS damaged "
                "FROM rows WHERE NOT excluded GROUP BY ALL")
    at = {k: i for i, k in enumerate(agg.keys)}
    for k, h, d in zip(zip(*[got.column(n).to_pylist() for n in KEY_COLUMNS]), got.column("has").to_pylist(),
                       got.column("damaged").to_pylist()):
        if k in at:
            has[at[k]], damaged[at[k]] = bool(h), bool(d)
    return has, damaged


def _check_values(q: Query) -> None:
    """A row whose value is not a positive number refuses the side, as sides.group does."""
    got = q.run(f"SELECT v, {'repetition' if 'repetition' in q.source.columns else 'NULL AS repetition'}, "
                f"{', '.join(q.key_exprs())} FROM rows WHERE NOT excluded AND NOT coalesce(isfinite(v) AND v > 0, "
                "false) ORDER BY gi LIMIT 1")
    if not got.num_rows:
        return
    row = {name: got.column(name)[0].as_py() for name in got.column_names}
    value = float("nan") if row["v"] is None else row["v"]
    rep = row["repetition"] if "repetition" in q.source.columns else "?"
    raise BadInput(f"the {q.side} results hold busbw_GBps {value} for {describe_point(row)} (repetition {rep}): "
                   "a damaged or hand-edited file; re-run the measurement")


def _context(q: Query) -> pd.DataFrame:
    """The distinct rows of the describing columns, env cells nested too deep read as UNREADABLE."""
    names = [c for c in CONTEXT_COLUMNS if c in q.source.columns]
    # In the order of their first row, as the rows themselves would list them (a setting's values in
    # the order they were measured), never in the hash table's order.
    frame = q.run(f"SELECT {', '.join(map(quote, names))}, min(gi) AS _first FROM rows GROUP BY ALL "
                  "ORDER BY _first").to_pandas().drop(columns="_first")
    if "env" in frame.columns:
        import json

        frame["env"] = [json.dumps(UNREADABLE) if isinstance(t, str) and nests_deeper(t, MAX_NESTING) else t
                        for t in frame["env"]]
    return frame


def _lost(q: Query) -> dict[tuple, Lost]:
    """The failed rows' repetitions per point, with their statuses and errors (few: links that
    could not be measured; a confirmation round's rows are evidence, not repetitions)."""
    if "status" not in q.source.columns:
        return {}
    error = "error" if "error" in q.source.columns else "NULL AS error"
    got = q.run(f"SELECT {', '.join(q.key_exprs())}, status, {error} FROM rows WHERE failed_row ORDER BY gi")
    keys = list(zip(*[got.column(n).to_pylist() for n in KEY_COLUMNS])) if got.num_rows else []
    return lost_points(keys, got.column("status").to_pylist(), got.column("error").to_pylist())


def large(paths: Iterable[str | os.PathLike]) -> bool:
    """Whether the inputs hold MIN_ROWS rows or more (the footers only)."""
    try:
        return total_rows(result_files(paths)) >= MIN_ROWS
    except BadInput:
        return False  # the pandas reader names the problem


class AggregateSide(Side):
    """sides.Side over an Aggregate: row i is the i-th value; per-iteration samples are read from
    the files the first time a point needs the within-run test, for every point at once."""

    aggregate: Aggregate
    point_of: np.ndarray
    loaded: list | None

    @classmethod
    def of(cls, agg: Aggregate) -> AggregateSide:
        ends = np.cumsum(agg.counts)
        starts = ends - agg.counts
        rows = {k: np.arange(s, e) for k, s, e in zip(agg.keys, starts.tolist(), ends.tolist())}
        summary = summarise(agg.keys, np.repeat(np.arange(len(agg.keys)), agg.counts), agg.values)
        none = np.zeros(0, dtype=bool)  # the per-row flags: read at the first check_samples
        side = cls(agg.name, rows, agg.values, summary, none, none)
        side.aggregate, side.point_of, side.loaded = agg, np.repeat(np.arange(len(agg.keys)), agg.counts), None
        return side

    def check_samples(self, idx: np.ndarray, key: dict) -> bool:
        if self.has_samples.size != self.value.size:
            has, damaged = self.aggregate.sample_flags()
            counts = self.aggregate.counts
            self.has_samples, self.damaged = np.repeat(has, counts), np.repeat(damaged, counts)
        return super().check_samples(idx, key)

    def iteration_values(self, idx: np.ndarray) -> np.ndarray:
        if self.loaded is None:
            self.loaded = _iterations(self.aggregate)
        return self.loaded[int(self.point_of[idx[0]])] if idx.size else np.zeros(0)


def _iterations(agg: Aggregate) -> list[np.ndarray]:
    """Per point, in the order of agg.keys: v * time_us / sample of every sample of its rows."""
    q = agg.query
    assert q is not None
    got = q.run(f"SELECT {', '.join(q.key_exprs())}, min(gi) AS first, "
                "flatten(list(list_transform(samples_us, lambda s: v * time_us / s) ORDER BY gi) "
                "FILTER (WHERE len(samples_us) > 0)) AS it FROM rows WHERE NOT excluded GROUP BY ALL ORDER BY first")
    by_key = dict(zip(zip(*[got.column(n).to_pylist() for n in KEY_COLUMNS]), got.column("it").to_pylist()))
    return [np.asarray(by_key.get(k) or [], dtype=float) for k in agg.keys]


# ---- gate: the rows an entry matches on, grouped ----


GATE_KEYS = (*GATE_KEY, "group")  # and a layout run's group: its label, core/grouplabel.py's ('dp1 solo')


def _group_sql(columns: Any) -> str:
    """A row's group label without ranks (core/grouplabel.py) in SQL; NULL off a layout run (gaterows' None)."""
    label = label_sql(columns, ranks=False)
    return "NULL" if label is None else f"nullif({label}, '')"


def gate_groups(paths: Iterable[str | os.PathLike], workloads: Sequence[str], source: Source | None = None) -> dict:
    """The gated rows of a run grouped by what an entry matches on (gate._Rows' fields, one group
    an entry): the rows of `workloads` (gate.GATED_WORKLOADS; others counted as ignored), with each
    group's values, in the order of its first row."""
    from commbench.core.results import check_schema_versions

    source = source or open_source(paths)
    q = Query(source, "gated")
    if not source.rows:
        raise BadInput("the results hold no rows: pass a run that measured something")
    versions = q.run("SELECT DISTINCT schema_version FROM rows").column("schema_version").to_pylist()
    check_schema_versions(set(versions), "the gated results", comparing=True)
    col = {n: (quote(n) if n in source.columns else "NULL") for n in GATE_KEYS + ("wrong",)}
    col["group"] = _group_sql(source.columns)
    workload = f"coalesce({col['workload']}, 'sweep')"
    kept = "(" + " OR ".join(f"{workload} = '{w}'" for w in workloads) + ")"
    ignored = q.run(f"SELECT {workload} AS w, count(*) AS n, min(gi) AS first FROM rows WHERE NOT {kept} "
                    "GROUP BY ALL ORDER BY first")
    exprs = [f"{col['collective']} AS collective", f"TRY_CAST({col['size_bytes']} AS BIGINT) AS size_bytes",
             f"{col['world_size']} AS world_size", f"{col['dtype']} AS dtype", f"{col['op']} AS op",
             f"CAST({col['in_place']} AS BOOLEAN) AS in_place", f"{col['nnodes']} AS nnodes",
             f"{workload} AS workload", f"nullif({col['settings']}, '') AS settings", f"{col['group']} AS \"group\""]
    got = q.run(f"SELECT {', '.join(exprs)}, count(*) AS n, min(gi) AS first, list(v ORDER BY gi) AS vals, "
                f"count(*) FILTER (WHERE coalesce({col['wrong']}, 0) > 0) AS wrong FROM rows WHERE {kept} "
                "GROUP BY ALL ORDER BY first")
    counts = got.column("n").to_numpy().astype(np.int64)
    values = (got.column("vals").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(float)
              if got.num_rows else np.zeros(0))
    out = {name: got.column(name).to_pylist() for name in GATE_KEYS}
    out.update(value=values, wrong=got.column("wrong").to_pylist(), time_us=[], samples=[], run_id=[],
               ignored=dict(zip(ignored.column("w").to_pylist(), ignored.column("n").to_pylist())),
               starts=np.cumsum(counts) - counts, counts=counts)
    return out
