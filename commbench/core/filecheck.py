"""The door every results file passes before any analysis reads it: its types and its values.

A parquet file is a commbench results file when it holds the required columns (core/columns.py),
no schema_version newer than this commbench reads, every known column in a type the registry's
can be read as (an int64 where int32 is declared, whole floats where an integer is (pandas writes
an integer column holding a null as float64), a large_string or dictionary for a string, an
all-null column for anything), and no value that would mislead or break a reader: a negative size,
a time or bandwidth that is infinite or absurd, a timestamp no datetime can hold, more per-row
samples than commbench ever writes. A file that fails is refused with one line naming the file,
the column and what was expected (BadInput, exit 2). Columns the registry does not know are kept
and ignored. Values are read a column at a time (the checked numeric columns only), and list
lengths from the footer, so the check costs little next to the read itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commbench.core.columns import BY_NAME, REQUIRED_COLUMNS, SCHEMA_VERSION
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.options import MAX_ITERATIONS
from commbench.core.inputs import shown_path
from commbench.core.safetext import printable

FIX = "pass a file written by commbench"
MAX_TIME_US = 1e12  # 11.6 days for one call: beyond it a time is a damaged or hand-edited cell
MAX_GBPS = 1e9  # an exabyte a second
# (column, least, most): numeric columns whose every non-null value must lie within the bounds
# (NaN allowed: a failed pairs link has no time).
RANGES = (("size_bytes", 0, 2 ** 62), ("count", 0, 2 ** 62), ("world_size", 1, 2 ** 31 - 1),
          ("nnodes", 1, 2 ** 31 - 1), ("time_us", 0, MAX_TIME_US), ("time_us_min", 0, MAX_TIME_US),
          ("time_us_max", 0, MAX_TIME_US), ("time_us_p99", 0, MAX_TIME_US), ("algbw_GBps", 0, MAX_GBPS),
          ("busbw_GBps", 0, MAX_GBPS))
VALUE_COLUMNS = ("schema_version", "started_at") + tuple(c for c, _, _ in RANGES)


@dataclass(frozen=True)
class Checked:
    """What the door learnt of a file: its Arrow schema and its rows."""

    schema: pa.Schema
    rows: int


def name(f: str | os.PathLike[str]) -> str:
    """A file as messages show it: printable, and shortened when long (core/inputs.py shown_path)."""
    return printable(shown_path(f))


def unreadable(f: str | os.PathLike[str], exc: BaseException) -> Exception:
    """What a file pyarrow cannot read is, said once for every reader: out of memory is not damage."""
    if isinstance(exc, (MemoryError, pa.ArrowMemoryError)):
        return RuntimeFailure(f"out of memory while reading {name(f)}: read fewer files at once, or raise the "
                              "memory limit (ulimit -v)")
    return BadInput(f"{name(f)} is not a readable parquet file ({type(exc).__name__}): {FIX}")


def check_file(f: str | os.PathLike[str]) -> Checked:
    """Open `f`'s footer and check it as a results file, reading only the columns whose values are
    checked; BadInput in one line if it is not one (analysis/points/pointtable.py: DuckDB reads the rest)."""
    try:
        pf = pq.ParquetFile(f)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a foreign or broken file
        raise unreadable(f, exc) from None
    check_unread(f, check_schema(f, pf), ())
    return Checked(pf.schema_arrow, pf.metadata.num_rows)


def check_unread(f: str | os.PathLike[str], schema: pa.Schema, read: Iterable[str]) -> None:
    """The checked columns of `f` that the caller did not read (`read`), one at a time: a file is
    refused for the same values whichever command reads it."""
    read = set(read)
    for column in VALUE_COLUMNS:
        if column in schema.names and column not in read:
            try:
                table = pq.read_table(f, columns=[column])
            except Exception as exc:  # noqa: BLE001 - a column chunk pyarrow cannot decode
                raise unreadable(f, exc) from None
            check_values(f, table)


def check_schema(f: str | os.PathLike[str], pf: pq.ParquetFile) -> pa.Schema:
    """What the footer tells: the required columns, every known column's type, list lengths."""
    schema = pf.schema_arrow
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise BadInput(f"{name(f)} is not a commbench results file (no column {missing[0]}): {FIX}")
    check_types(f, schema)
    _check_lists(f, pf, schema)
    return schema


def check_values(f: str | os.PathLike[str], table: pa.Table) -> None:
    """The checked columns `table` holds (read with the types the file has, or conformed)."""
    names = table.column_names
    if "schema_version" in names:
        got = pc.max(table.column("schema_version")).as_py()
        if got is not None and got > SCHEMA_VERSION:
            raise BadInput(f"{name(f)} has schema_version {got}, newer than this commbench reads "
                           f"({SCHEMA_VERSION}): upgrade commbench")
    for column, low, high in RANGES:
        if column in names and not pa.types.is_null(table.schema.field(column).type):
            _check_range(f, column, table.column(column), low, high)
    if "started_at" in names and pa.types.is_timestamp(table.schema.field("started_at").type):
        _check_stamps(f, table.column("started_at"))


def check_types(f: str | os.PathLike[str], schema: pa.Schema) -> None:
    """Every known column's type readable as the registry's; unknown columns are left alone."""
    for field in schema:
        column = BY_NAME.get(field.name)
        if column is not None and not readable_as(field.type, column.type):
            raise BadInput(f"{name(f)}: column {field.name} holds {field.type}, expected {column.type}"
                           f"{' (' + column.unit + ')' if column.unit else ''}: {FIX}")


def readable_as(actual: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether values of type `actual` read as `wanted` without changing what they mean."""
    if pa.types.is_null(actual):
        return True
    if pa.types.is_dictionary(actual):
        return readable_as(actual.value_type, wanted)
    if pa.types.is_string(wanted):
        return bool(pa.types.is_string(actual) or pa.types.is_large_string(actual))
    if pa.types.is_integer(wanted):  # floats too: pandas writes an integer column with a null as float64
        return bool(pa.types.is_integer(actual) or pa.types.is_floating(actual))
    if pa.types.is_floating(wanted):
        return bool(pa.types.is_floating(actual) or pa.types.is_integer(actual))
    if pa.types.is_boolean(wanted):
        return bool(pa.types.is_boolean(actual))
    if pa.types.is_timestamp(wanted):
        return bool(pa.types.is_timestamp(actual))
    if pa.types.is_list(wanted):
        return bool((pa.types.is_list(actual) or pa.types.is_large_list(actual))
                    and readable_as(actual.value_type, wanted.value_type))
    return bool(actual == wanted)


def _check_range(f: str | os.PathLike[str], column: str, values: pa.ChunkedArray, low: float, high: float) -> None:
    if pa.types.is_dictionary(values.type):
        return
    if pa.types.is_floating(values.type):
        values = pc.filter(values, pc.invert(pc.is_nan(values)))
    got = pc.min_max(values)
    lo, hi = got["min"].as_py(), got["max"].as_py()
    if lo is not None and (lo < low or hi > high):
        bad = lo if lo < low else hi
        raise BadInput(f"{name(f)}: column {column} holds {bad}, outside {low:g}..{high:g}: a damaged or "
                       f"hand-edited file; {FIX}")


def _check_stamps(f: str | os.PathLike[str], stamps: pa.ChunkedArray) -> None:
    """started_at within what a pandas datetime holds (nanoseconds in an int64: the years 1677..2262)."""
    per_second = {"s": 1, "ms": 10 ** 3, "us": 10 ** 6, "ns": 10 ** 9}[stamps.type.unit]
    limit = (2 ** 63 - 1) // 10 ** 9 * per_second
    raw = pc.min_max(stamps.cast(pa.int64()))
    lo, hi = raw["min"].as_py(), raw["max"].as_py()
    if lo is not None and (lo < -limit or hi > limit):
        raise BadInput(f"{name(f)}: column started_at holds a time no datetime can hold (beyond the years "
                       f"1677..2262): a damaged or hand-edited file; {FIX}")


def _check_lists(f: str | os.PathLike[str], pf: pq.ParquetFile, schema: pa.Schema) -> None:
    """A list column's items a row, from the footer (nothing decoded): more than commbench ever
    writes (MAX_ITERATIONS samples, or ranks) is a file built to exhaust the reader's memory."""
    meta = pf.metadata
    rows = meta.num_rows
    if not rows:
        return
    for field in schema:
        if field.name not in BY_NAME or not pa.types.is_list(BY_NAME[field.name].type):
            continue
        leaf = [i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] == field.name]
        items = sum(meta.row_group(g).column(i).num_values for g in range(meta.num_row_groups) for i in leaf)
        if items > rows * MAX_ITERATIONS:
            raise BadInput(f"{name(f)}: column {field.name} holds {items:,} items in {rows:,} row(s), more than "
                           f"commbench writes (at most {MAX_ITERATIONS:,} a row): {FIX}")


def conform(table: pa.Table, f: str | os.PathLike[str]) -> pa.Table:
    """A checked table's known columns cast to the registry's types (a part of int64 beside a file
    of int32 reads as one column); a value that does not fit the declared type is refused."""
    for i, field in enumerate(table.schema):
        column = BY_NAME.get(field.name)
        if column is None or field.type == column.type or (
                pa.types.is_dictionary(field.type) and field.type.value_type == column.type):
            continue  # a dictionary-encoded string column stays encoded: one string a distinct value
        values = table.column(i)
        if pa.types.is_floating(field.type) and pa.types.is_integer(column.type):
            values = pc.if_else(pc.is_nan(values), pa.scalar(None, field.type), values)  # NaN: pandas' null
        try:
            table = table.set_column(i, field.name, values.cast(column.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise BadInput(f"{name(f)}: column {field.name} holds a value that is not a {column.type} "
                           f"({str(exc).splitlines()[0][:120]}): {FIX}") from None
    return table
