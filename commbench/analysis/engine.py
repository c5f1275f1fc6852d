"""The one aggregation from results to points: DuckDB over the parquet files, or over rows in memory.

compare, gate and plot need, of a million rows, only a few numbers a point: each point's
repetition values (busbw, algbw on one rank), whether its rows hold damaged samples, and the
distinct values of the columns that describe a run. The same queries group every input, whatever
its size: files where they lie (open_source: each through core/filecheck.py's door, read through
descriptors, only the columns a query names), or a frame already in memory (frame_source:
compare_frames, gate.judge and plot.aggregate of read_results' frames), so memory follows the
number of points and repetitions, not the columns of every row, and no grouping is written twice.
Per-iteration samples are read only when a point needs the within-run test; the failed
repetitions of a point (a pairs link) come back counted per point. Wire counters (compare's likely
cause, the report's Wire section) are read from the wire_trouble flag a row; the wire JSON only
of the flagged rows, a batch at a time. MIN_ROWS decides only whether plot and report read the
rows into pandas at all (their tables are drawn from rows), never how points are grouped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commbench.analysis.frames import GROUP_KEYS
from commbench.analysis.linkrank import FAILED
from commbench.analysis.sides import KEY_COLUMNS, SAME_MEASUREMENT, Lost, Side, describe_point, lost_points, summarise
from commbench.core import filecheck
from commbench.core.columns import BY_NAME, GATE_KEY, INT_KEYS, REQUIRED_COLUMNS, RUN_COLUMNS
from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_NESTING, UNREADABLE, nests_deeper

# From this many rows on (both sides together), plot and report never read the rows into pandas:
# their figures come from the files by the engine and the report's tables from a few columns
# (report_frame). compare and gate aggregate in the engine at every size.
MIN_ROWS = int(os.environ.get("COMMBENCH_ENGINE_ROWS", "500000"))
_WIRE_BATCH = 10_000  # wire JSON values held at once while their trouble counters are summed
_ROW_BITS = 40  # a row's global number: file index << 40 | its row in the file (the order read_results reads)


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


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Query:
    """One DuckDB connection over a side's files; `rows` is a view of every row with its global
    number (gi), the value compared (v) and whether the row was left out as failed or a
    confirmation (excluded)."""

    def __init__(self, source: Source, side: str):
        import duckdb

        self.source, self.side = source, side
        self.con = duckdb.connect(config={"threads": max(1, min(4, os.cpu_count() or 1))})
        if source.table is not None:
            self.con.register("_table", source.table)
            self.con.execute(f"CREATE TEMP VIEW rows AS SELECT * EXCLUDE (_gi), _gi AS gi, {self._derived()} FROM _table")
            return
        # Each file by its descriptor (core/results.ResultFile): a name is never a glob pattern, and a
        # live run's part read once stays readable for every later query of this connection.
        paths = [os.fspath(f) for f in source.files]
        self.con.register("_files", pa.table({"filename": paths, "fi": list(range(len(source.files)))}))
        names = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)  # SQL string literals
        self.con.execute(
            f"CREATE TEMP VIEW rows AS SELECT *, (fi::BIGINT << {_ROW_BITS}) + file_row_number AS gi, {self._derived()} "
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
        return (f"CAST({v} AS DOUBLE) AS v, ({failed} AND NOT {confirm}) AS failed_row, "
                f"({failed} OR {confirm}) AS excluded")

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

    def batches(self, sql: str, rows: int = 10_000):
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
                out.append(f"{_absent(name, self.source)} AS {_quote(name)}")
            elif not normal:
                out.append(_quote(name))
            elif name in INT_KEYS:
                value = f"TRY_CAST({_quote(name)} AS BIGINT)"
                if BY_NAME[name].absent:  # a file of the side without the column: its rows as the registry says
                    value = f"coalesce({value}, {_absent(name, self.source)})"
                out.append(f"{value} AS {_quote(name)}")
            elif name == "in_place":
                out.append("CAST(in_place AS BOOLEAN) AS in_place")
            elif name == "workload":
                same = " ".join(f"WHEN workload = '{a}' THEN '{b}'" for a, b in SAME_MEASUREMENT.items())
                out.append(f"CASE {same} ELSE workload END AS workload")
            else:
                out.append(_quote(name))
        return out

    def has_any(self, name: str) -> bool:
        if name not in self.source.columns:
            return False
        got = self.run(f"SELECT count({_quote(name)}) AS n FROM rows")
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
    has_samples: np.ndarray  # per point: a row holds samples
    damaged: np.ndarray  # per point: a row's time or a sample is not a positive number
    context: pd.DataFrame  # distinct rows of the describing columns (compare's warnings and differences)
    lost: dict[tuple, Lost]  # point -> its repetitions that could not be measured (a failed pairs link)
    query: _Query | None = field(default=None, repr=False)
    rows: int = 0

    def side(self) -> Side:
        """This side as compare reads one (sides.Side): a point's rows are its values' positions."""
        return AggregateSide.of(self)

    def likely_causes(self, after: "Aggregate", keys: Iterable[tuple]) -> dict[tuple, str]:
        """compare's likely cause of each point of `keys`, this side before and `after` after."""
        return likely_causes(self, after, keys)


CONTEXT_COLUMNS = RUN_COLUMNS  # what describes a run (core/columns.py)


def aggregate(paths: Iterable[str | os.PathLike], side: str, source: Source | None = None) -> Aggregate:
    """The points of `side` (its files or folders) aggregated in the engine."""
    source = source or open_source(paths)
    q = _Query(source, side)
    if "world_size" in source.columns and "algbw_GBps" not in source.columns:
        if q.run("SELECT count(*) AS n FROM rows WHERE world_size = 1").column("n")[0].as_py():
            raise BadInput(f"the {side} results hold world_size 1 points but no algbw_GBps column")
    _check_values(q)
    keys = q.key_exprs()
    damaged = "false"
    has = "false"
    if "samples_us" in source.columns:
        has = "coalesce(len(samples_us) > 0, false)"
        time_ok = "coalesce(isfinite(time_us) AND time_us > 0, false)" if "time_us" in source.columns else "false"
        damaged = (f"({has} AND NOT (coalesce(list_count(samples_us) = len(samples_us) AND "
                   f"isfinite(list_max(samples_us)) AND list_min(samples_us) > 0, false) AND {time_ok}))")
    got = q.run(f"SELECT {', '.join(keys)}, count(*) AS n, min(gi) AS first, list(v ORDER BY gi) AS vals, "
                f"bool_or({has}) AS has, bool_or({damaged}) AS damaged FROM rows WHERE NOT excluded "
                "GROUP BY ALL ORDER BY first")
    key_lists = [got.column(name).to_pylist() for name in KEY_COLUMNS]
    vals = got.column("vals").combine_chunks() if got.num_rows else pa.array([], pa.list_(pa.float64()))
    values = vals.flatten().to_numpy(zero_copy_only=False).astype(float) if got.num_rows else np.zeros(0)
    return Aggregate(name=side, keys=list(zip(*key_lists)) if got.num_rows else [],
                     counts=got.column("n").to_numpy().astype(np.int64), values=values,
                     has_samples=got.column("has").to_numpy(zero_copy_only=False).astype(bool),
                     damaged=got.column("damaged").to_numpy(zero_copy_only=False).astype(bool),
                     context=_context(q), lost=_lost(q), query=q, rows=source.rows)


def _check_values(q: _Query) -> None:
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


def _context(q: _Query) -> pd.DataFrame:
    """The distinct rows of the describing columns, env cells nested too deep read as UNREADABLE."""
    names = [c for c in CONTEXT_COLUMNS if c in q.source.columns]
    # In the order of their first row, as the rows themselves would list them (a setting's values in
    # the order they were measured), never in the hash table's order.
    frame = q.run(f"SELECT {', '.join(map(_quote, names))}, min(gi) AS _first FROM rows GROUP BY ALL "
                  "ORDER BY _first").to_pandas().drop(columns="_first")
    if "env" in frame.columns:
        import json

        frame["env"] = [json.dumps(UNREADABLE) if isinstance(t, str) and nests_deeper(t, MAX_NESTING) else t
                        for t in frame["env"]]
    return frame


def _lost(q: _Query) -> dict[tuple, Lost]:
    """The failed rows' repetitions per point, with their statuses and errors (few: links that
    could not be measured; a confirmation round's rows are evidence, not repetitions)."""
    if "status" not in q.source.columns:
        return {}
    error = "error" if "error" in q.source.columns else "NULL AS error"
    got = q.run(f"SELECT {', '.join(q.key_exprs())}, status, {error} FROM rows WHERE failed_row ORDER BY gi")
    keys = list(zip(*[got.column(n).to_pylist() for n in KEY_COLUMNS])) if got.num_rows else []
    return lost_points(keys, got.column("status").to_pylist(), got.column("error").to_pylist())


# ---- compare's likely cause: the wire counters of the points that need them ----


def likely_causes(before: Aggregate, after: Aggregate, keys: Iterable[tuple]) -> dict[tuple, str]:
    """wireview.likely_causes over two aggregated sides, with the same answers: per point, whether
    counters were read and whether a trouble counter moved (from the wire_trouble flag, a bool a
    row), then the wire JSON of only the flagged rows of the points whose cause is asked, a batch at
    a time, summed per host, place and counter as core/wire.totals sums them."""
    from commbench.analysis import wireview

    if before.query is None or after.query is None or "wire" not in after.query.source.columns:
        return {}
    b_flags, a_flags = _wire_flags(before.query), _wire_flags(after.query)
    wanted = [k for k in keys if b_flags.get(k, (False, False))[0] and a_flags.get(k, (False, False))[1]]
    if not wanted:
        return {}
    b_totals, a_totals = _wire_totals(before.query, set(wanted)), _wire_totals(after.query, set(wanted))
    b_count, a_count = (dict(zip(agg.keys, agg.counts.tolist())) for agg in (before, after))
    out = {}
    for k in wanted:
        cause = wireview.cause_of(wireview.totals_of(b_totals.get(k, {})), b_count[k],
                                  wireview.totals_of(a_totals.get(k, {})), a_count[k])
        if cause:
            out[k] = cause
    return out


def _wire_flags(q: _Query) -> dict[tuple, tuple[bool, bool]]:
    """Per point (its key as aggregate gives it): (counters were read in a row, a trouble counter
    moved in one), as wireview.row_flags reads the rows: the wire_trouble flag where a file has
    it, the JSON where no file has it, nothing read where there is no wire column."""
    keys = q.key_exprs()
    if "wire_trouble" in q.source.columns:
        got = q.run(f"SELECT {', '.join(keys)}, bool_or(wire_trouble IS NOT NULL) AS r, "
                    "bool_or(coalesce(CAST(wire_trouble AS BOOLEAN), false)) AS t FROM rows WHERE NOT excluded "
                    "GROUP BY ALL")
        return dict(zip(zip(*[got.column(n).to_pylist() for n in KEY_COLUMNS]),
                        zip(got.column("r").to_pylist(), got.column("t").to_pylist())))
    if "wire" not in q.source.columns:
        return {}
    from commbench.core import wire

    out: dict[tuple, tuple[bool, bool]] = {}
    for key, value in _key_values(q, "wire", "wire IS NOT NULL"):
        state = wire.is_clean(value)
        read, trouble = out.get(key, (False, False))
        out[key] = (read or state is not None, trouble or state is False)
    return out


def _wire_totals(q: _Query, wanted: set) -> dict[tuple, dict]:
    """Per point of `wanted`: its trouble counters summed (wireview.merge_totals) over its flagged
    rows (every row with counters where no file has the flag: a clean row adds nothing)."""
    from commbench.analysis import wireview
    from commbench.analysis.frames import present
    from commbench.core import wire

    flagged = ("coalesce(CAST(wire_trouble AS BOOLEAN), false)" if "wire_trouble" in q.source.columns
               else "true")
    out: dict[tuple, dict] = {}
    pending: dict[tuple, list] = {}
    held = 0
    for key, value in _key_values(q, "wire", f"{flagged} AND wire IS NOT NULL"):
        if key in wanted and isinstance(value, str) and present(value):
            pending.setdefault(key, []).append(value)
            held += 1
        if held >= _WIRE_BATCH:  # summed so far: the JSON of a batch of rows held at a time, not of every row
            for k, values in pending.items():
                wireview.merge_totals(out.setdefault(k, {}), wire.totals(values))
            pending, held = {}, 0
    for k, values in pending.items():
        wireview.merge_totals(out.setdefault(k, {}), wire.totals(values))
    return out


def _key_values(q: _Query, column: str, where: str):
    """(point key, value of `column`) of the rows that pass `where`, in row order, a batch at a time."""
    sql = (f"SELECT {', '.join(q.key_exprs())}, {_quote(column)} AS value FROM rows WHERE NOT excluded AND "
           f"({where}) ORDER BY gi")
    for batch in q.batches(sql):
        keys = zip(*[batch.column(n).to_pylist() for n in KEY_COLUMNS])
        yield from zip(keys, batch.column("value").to_pylist())


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
    def of(cls, agg: Aggregate) -> "AggregateSide":
        ends = np.cumsum(agg.counts)
        starts = ends - agg.counts
        rows = {k: np.arange(s, e) for k, s, e in zip(agg.keys, starts.tolist(), ends.tolist())}
        summary = summarise(agg.keys, np.repeat(np.arange(len(agg.keys)), agg.counts), agg.values)
        side = cls(agg.name, rows, agg.values, summary, np.repeat(agg.has_samples, agg.counts),
                   np.repeat(agg.damaged, agg.counts))
        side.aggregate, side.point_of, side.loaded = agg, np.repeat(np.arange(len(agg.keys)), agg.counts), None
        return side

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


def compare_paths(before: Sequence[str | os.PathLike], after: Sequence[str | os.PathLike], **limits):
    """compare.Comparison of two sides' files, aggregated where they lie (whatever their size:
    compare_frames takes the same aggregation over rows already in memory)."""
    from commbench.analysis import compare

    b, a = open_source(before), open_source(after)
    return compare.compare_aggregates(aggregate(before, "before", b), aggregate(after, "after", a), **limits)


GATE_KEYS = GATE_KEY


def gate_groups(paths: Iterable[str | os.PathLike], source: Source | None = None) -> dict:
    """The gated rows of a run grouped by what an entry matches on (gate._Rows' fields, one group
    an entry): the rows gate.judge would read, with each group's values, in the order of its first row."""
    from commbench.analysis import gate
    from commbench.core.results import check_schema_versions

    source = source or open_source(paths)
    q = _Query(source, "gated")
    if not source.rows:
        raise BadInput("the results hold no rows: pass a run that measured something")
    versions = q.run("SELECT DISTINCT schema_version FROM rows").column("schema_version").to_pylist()
    check_schema_versions(set(versions), "the gated results", comparing=True)
    col = {n: (_quote(n) if n in source.columns else "NULL") for n in GATE_KEYS + ("wrong",)}
    workload = f"coalesce({col['workload']}, 'sweep')"
    kept = "(" + " OR ".join(f"{workload} = '{w}'" for w in gate.GATED_WORKLOADS) + ")"
    ignored = q.run(f"SELECT {workload} AS w, count(*) AS n, min(gi) AS first FROM rows WHERE NOT {kept} "
                    "GROUP BY ALL ORDER BY first")
    exprs = [f"{col['collective']} AS collective", f"TRY_CAST({col['size_bytes']} AS BIGINT) AS size_bytes",
             f"{col['world_size']} AS world_size", f"{col['dtype']} AS dtype", f"{col['op']} AS op",
             f"CAST({col['in_place']} AS BOOLEAN) AS in_place", f"{col['nnodes']} AS nnodes",
             f"{workload} AS workload", f"nullif({col['settings']}, '') AS settings"]
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


def gate_paths(bands, paths: Sequence[str | os.PathLike]):
    """gate.GateReport of the files, grouped where they lie (whatever their size: gate.judge takes
    the same aggregation over rows already in memory)."""
    from commbench.analysis import gate

    return gate.judge(bands, gate_groups(paths))


# ---- predict: a sweep's median time per point ----


def curve_points(source: Source, workloads: Sequence[str]) -> tuple[list[str], list[tuple]]:
    """(the settings the rows hold, [(collective, world_size, dtype, in_place, size_bytes, median
    time_us)]): the rows of `workloads` (or without one) measured (no failed status) at a positive
    size and time, the median over every repetition and file of a point (predict's curve)."""
    q = _Query(source, "curve")
    has = source.columns
    col = {n: (_quote(n) if n in has else "NULL") for n in ("workload", "status", "settings", "in_place", "dtype",
                                                             "world_size")}
    kept = " AND ".join([
        f"({col['workload']} IS NULL OR {col['workload']} IN ({', '.join(repr(w) for w in workloads)}))",
        f"({col['status']} IS NULL OR {col['status']} = 'ok')",
        "coalesce(time_us > 0 AND size_bytes > 0, false)",
        f"collective IS NOT NULL AND {col['world_size']} IS NOT NULL AND {col['dtype']} IS NOT NULL"])  # all three
    if "time_us" not in has:
        return [], []
    settings = q.run(f"SELECT DISTINCT coalesce(CAST({col['settings']} AS VARCHAR), '') AS s FROM rows WHERE {kept}")
    got = q.run(f"SELECT collective, {col['world_size']} AS world_size, {col['dtype']} AS dtype, "
                f"coalesce(CAST({col['in_place']} AS BOOLEAN), false) AS in_place, size_bytes, "
                f"median(CAST(time_us AS DOUBLE)) AS t FROM rows WHERE {kept} GROUP BY ALL")
    points = list(zip(*[got.column(n).to_pylist() for n in ("collective", "world_size", "dtype", "in_place",
                                                            "size_bytes", "t")])) if got.num_rows else []
    return settings.column("s").to_pylist(), points


# ---- plot: the curves' lines, median, min and max at every size ----

PLOT_WORKLOADS = ("sweep", "nccl-tests")  # curves only; zero, buckets and pairs rows stay with pandas
HEAVY_COLUMNS = ("samples_us", "rank_time_us", "rank_skew_us", "env", "plan")


def plot_source(paths: Sequence[str | os.PathLike], force: bool = False) -> _Query | None:
    """A query over files the engine can draw (MIN_ROWS rows or more, unless `force`; every row a
    curve point, no zero grid, buckets or pairs rows), else None."""
    if not force and not large(paths):
        return None
    source = open_source(paths)
    q = _Query(source, "plotted")
    if "workload" in source.columns:
        allowed = ", ".join(f"'{w}'" for w in PLOT_WORKLOADS)
        if q.run(f"SELECT count(*) AS n FROM rows WHERE coalesce(workload NOT IN ({allowed}), false)"
                 ).column("n")[0].as_py():
            return None
    return q


def _line_keys(q: _Query) -> list[str]:
    """frames.prepare's GROUP_KEYS and the setting, as it fills them: "" where no file has the column."""
    has = q.source.columns
    fill = {"dtype": "'?'", "label": "''", "run_id": "'?'"}
    out = []
    for name in GROUP_KEYS:
        if name not in has:
            out.append(f"{'false' if name == 'in_place' else repr('')} AS {name}")
        elif name == "in_place":
            out.append("coalesce(CAST(in_place AS BOOLEAN), false) AS in_place")
        elif name in fill:
            out.append(f"coalesce(CAST({name} AS VARCHAR), {fill[name]}) AS {name}")
        else:
            out.append(f"CAST({name} AS VARCHAR) AS {name}")
    out.append("coalesce(CAST(settings AS VARCHAR), '') AS settings" if "settings" in has else "'' AS settings")
    return out


def _kept(q: _Query, column: str) -> str:
    """The rows a curve of `column` is drawn from (frames.prepare): a finite value at a positive size."""
    if column not in q.source.columns:
        raise BadInput(f"the results have no column {column}: pass files written by commbench")
    cond = f"coalesce(isfinite(CAST({_quote(column)} AS DOUBLE)) AND size_bytes > 0, false)"
    return cond + (f" AND {_quote(column)} > 0" if column == "time_us" else "")


def frame_lines(frame: pd.DataFrame, column: str) -> list:
    """plot_lines over rows in memory (frames.prepare's, with their settings text)."""
    return plot_lines(_Query(frame_source(frame, "plotted", require=()), "plotted"), column)


def plot_lines(q: _Query, column: str, side: str | None = None) -> list:
    """plot.aggregate's lines of `column` over the files, in the same order with the same numbers,
    each the fields of a plot.Line; `side`: every run of the files as one, named so (the overlay)."""
    from commbench.analysis.settingsview import LINE_KEYS as keys

    wrong = "coalesce(wrong, 0) > 0" if "wrong" in q.source.columns else "false"
    exprs = _line_keys(q)
    if side is not None:
        exprs = [e if not e.endswith((" AS label", " AS run_id")) else
                 ("'' AS label" if e.endswith(" AS label") else f"'{side}' AS run_id") for e in exprs]
    got = q.run(f"SELECT {', '.join(exprs)}, size_bytes, min(gi) AS first, "
                f"list(CAST({_quote(column)} AS DOUBLE) ORDER BY gi) AS vals, bool_or({wrong}) AS wrong "
                f"FROM rows WHERE {_kept(q, column)} GROUP BY ALL ORDER BY first")
    if not got.num_rows:
        raise BadInput(f"the results hold no finite {column} values: nothing to plot")
    groups = list(zip(*[got.column(k).to_pylist() for k in keys]))
    counts = pc.list_value_length(got.column("vals")).to_numpy().astype(np.int64)
    values = got.column("vals").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(float)
    summary = summarise(list(range(len(groups))), np.repeat(np.arange(len(groups)), counts), values)
    sizes, wrong_of = got.column("size_bytes").to_pylist(), got.column("wrong").to_pylist()
    by_line: dict[tuple, list[int]] = {}
    for i, k in enumerate(groups):
        by_line.setdefault(k, []).append(i)
    lines = []
    for k, idx in by_line.items():
        idx = sorted(idx, key=lambda i: sizes[i])  # stable: sizes of one line are distinct anyway
        s = np.asarray([sizes[i] for i in idx], dtype=float)
        med, lo, hi = (np.asarray([summary[i][j] for i in idx], dtype=float) for j in range(3))
        lines.append(dict(key=dict(zip(keys, k)), sizes=s, median=med, lo=lo, hi=hi, reps=counts[idx],
                          wrong_sizes=s[np.asarray([bool(wrong_of[i]) for i in idx])]))
    return lines


def run_firsts(q: _Query, column: str) -> pd.DataFrame:
    """The first row of every run that a curve of `column` is drawn from, every column but the
    per-row lists and env/plan: what the figures' titles read of a run (runs.run_rows)."""
    firsts = q.run(f"SELECT min(gi) AS gi FROM rows WHERE {_kept(q, column)} "
                   f"GROUP BY {'coalesce(run_id, ' + repr('?') + ')' if 'run_id' in q.source.columns else '1'}")
    wanted = sorted(firsts.column("gi").to_pylist())
    names = [_quote(c) for c in q.source.columns if not pa.types.is_list(q.source.columns[c])
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
    within = sorted({int(g) & ((1 << _ROW_BITS) - 1) for g in gis})
    return (f"file_row_number IN ({', '.join(map(str, within))}) AND gi IN ({', '.join(str(int(g)) for g in gis)})"
            if within else "gi IN ()")


def _bounded(text):
    """A JSON cell nested deeper than MAX_NESTING read as UNREADABLE, as read_results reads it."""
    import json

    return json.dumps(UNREADABLE) if isinstance(text, str) and nests_deeper(text, MAX_NESTING) else text


# ---- report: every row, but only the columns a report reads, strings as categories ----

# What the report's sections read of a curves-only run (summary.py, runs.py, settingsview.py,
# wireview.py): per row, the line, the point and its numbers; per run, what its facts show.
REPORT_COLUMNS = ("collective", "dtype", "op", "in_place", "label", "run_id", "settings", "size_bytes", "world_size",
                  "nnodes", "ranks_per_node", "busbw_GBps", "algbw_GBps", "time_us", "wrong", "repetition",
                  "workload", "status", "wire", "wire_trouble", "wire_per_payload", "started_at", "launcher", "backend", "device",
                  "device_name", "iface", "mtu", "link_layer", "hosts", "commbench_version", "torch_version",
                  "nccl_version", "env", "net", "plan", "schema_version")


# What the baseline's "Runs" section reads of its rows (report.runs_html): a run's facts and, per
# run, its collectives, dtypes, sizes, repetitions, rows and settings; not the measured values.
BASELINE_COLUMNS = tuple(c for c in REPORT_COLUMNS if c not in (
    "op", "in_place", "busbw_GBps", "algbw_GBps", "time_us", "wrong", "status", "wire", "wire_trouble",
    "wire_per_payload", "plan", "schema_version"))


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
    for name in ("label", "dtype", "run_id"):  # frames.prepare's fills, done here: a category cannot take them
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
    q = _Query(source, "reported")
    for batch in q.batches("SELECT gi, wire FROM rows WHERE coalesce(CAST(wire_trouble AS BOOLEAN), false) "
                           "AND wire IS NOT NULL"):
        gi = batch.column("gi").to_numpy()
        out[starts[gi >> _ROW_BITS] + (gi & ((1 << _ROW_BITS) - 1))] = batch.column("wire").to_numpy(
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
    gis = (fi.astype(np.int64) << _ROW_BITS) + (firsts - starts[fi])
    got = _Query(source, "reported").run(f"SELECT gi, hosts FROM rows WHERE {_rows_at(gis.tolist())}")
    at = dict(zip(got.column("gi").to_pylist(), got.column("hosts").to_pylist()))
    for row, gi in zip(firsts.tolist(), gis.tolist()):
        out[row] = at.get(gi)
    return out


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)
