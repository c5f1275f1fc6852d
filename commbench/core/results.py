"""The result format: one parquet row per point and repetition (docs/RESULTS.md).

Writing is atomic and incremental: after every point the whole table is written to a temporary
file beside the target and renamed over it, so a reader (or a crash, or Ctrl-C) only ever sees
a complete file holding every finished point. A file that exists before the run is never
overwritten: the first write links the file into place, which fails if the name is taken.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.inputs import MAX_NESTING, UNREADABLE, check_regular, nests_deeper

SCHEMA_VERSION = 1

SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("label", pa.string()),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("collective", pa.string()),
    ("dtype", pa.string()),
    ("op", pa.string()),
    ("root", pa.int32()),
    ("size_bytes", pa.int64()),
    ("count", pa.int64()),
    ("in_place", pa.bool_()),
    ("world_size", pa.int32()),
    ("nnodes", pa.int32()),
    ("ranks_per_node", pa.int32()),
    ("backend", pa.string()),
    ("device", pa.string()),
    ("device_name", pa.string()),
    ("launcher", pa.string()),
    ("iters", pa.int32()),
    ("warmup", pa.int32()),
    ("repetition", pa.int32()),
    ("time_us", pa.float64()),
    ("time_us_min", pa.float64()),
    ("time_us_max", pa.float64()),
    ("time_us_p99", pa.float64()),
    ("algbw_GBps", pa.float64()),
    ("busbw_GBps", pa.float64()),
    ("wrong", pa.int64()),
    ("samples_us", pa.list_(pa.float64())),
    # per rank (index = rank): its own median time and its median arrival skew (docs/RESULTS.md)
    ("rank_time_us", pa.list_(pa.float64())),
    ("rank_skew_us", pa.list_(pa.float64())),
    # per rank (index = rank): the CPUs it may run on, as a Linux cpulist ("0-3,8"); --bind decides
    ("rank_cpus", pa.list_(pa.string())),
    ("workload", pa.string()),
    ("bucket_bytes", pa.int64()),
    ("zero_stage", pa.int32()),
    ("n_collectives", pa.int32()),
    ("overlap", pa.int32()),
    ("scale", pa.float64()),
    ("bytes_per_rank", pa.int64()),
    ("paper_bytes_per_rank", pa.int64()),
    ("ops", pa.string()),
    ("mtu", pa.int32()),
    ("iface", pa.string()),
    ("link_layer", pa.string()),
    ("hosts", pa.list_(pa.string())),
    ("commbench_version", pa.string()),
    ("torch_version", pa.string()),
    ("nccl_version", pa.string()),
    ("env", pa.string()),
    ("net", pa.string()),
    ("plan", pa.string()),
    ("check_error", pa.float64()),
    ("transport", pa.string()),
    # workload pairs: the link a row measured (src sends to dst; bidir: both ways at once)
    ("src_host", pa.string()),
    ("dst_host", pa.string()),
    ("src_rank", pa.int32()),
    ("dst_rank", pa.int32()),
    # a point that could not be measured (pairs: a link whose transfer failed): why, and the message
    ("status", pa.string()),
    ("error", pa.string()),
    ("confirm", pa.bool_()),  # pairs: a row of the confirmation round
    # NIC, port and TCP counters during the point, per host (core/wire.py, docs/RESULTS.md)
    ("wire", pa.string()),
    ("wire_per_payload", pa.float64()),
    ("wire_trouble", pa.bool_()),
    # the run's settings axes (--env, --mtu): "NAME=value" per axis, joined by spaces; part of a point
    ("settings", pa.string()),
    # pairs --per-rail: the interface (rail) a row's transfer went over
    ("rail", pa.string()),
    # NCCL runs with --nccl-debug: the algorithm and protocol NCCL chose for the point's size
    ("nccl_algo", pa.string()),
    ("nccl_proto", pa.string()),
    ("schema_version", pa.int32()),
])

COLUMNS = tuple(SCHEMA.names)


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _file_mode() -> int:
    """rw-r--r-- narrowed by the umask: results are shared, never group- or world-writable
    (mkstemp alone would make them 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o644 & ~mask


def _write_atomically(table: pa.Table, target: Path, replace: bool) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), _file_mode())
            pq.write_table(table, fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails if target exists: never overwrite a file we did not make
            os.unlink(tmp)
    except FileExistsError:
        os.unlink(tmp)
        raise BadInput(f"results file {target} already exists: commbench never overwrites results; "
                       "pass another --out") from None
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise RuntimeFailure(f"cannot write results to {target}: {exc.strerror or exc}") from None
    except BaseException:  # Ctrl-C or SIGTERM mid-write: the target is intact; leave no temporary beside it
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def resolve_out(out: str, run_id: str) -> Path:
    """--out DIR -> DIR/<run_id>.parquet; --out FILE.parquet -> that file."""
    path = Path(out)
    if path.suffix.lower() == ".parquet":
        return path
    return path / f"{run_id}.parquet"


def check_writable(target: Path) -> None:
    """Fail early, before anything is measured, on a taken name or an unusable folder."""
    if target.exists():
        raise BadInput(f"results file {target} already exists: commbench never overwrites results; "
                       "pass another --out")
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise BadInput(f"--out {parent} is a file, not a folder: pass a folder or a .parquet file name")


class ResultWriter:
    """Holds the rows of one run and keeps `path` a complete parquet file of all of them."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: list[dict] = []

    def create(self) -> None:
        check_writable(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"cannot create results folder {self.path.parent}: {exc.strerror}; "
                           "pass a writable --out") from None
        _write_atomically(_table([]), self.path, replace=False)

    def append(self, rows: Iterable[dict]) -> None:
        everything = self.rows + list(rows)
        _write_atomically(_table(everything), self.path, replace=True)
        self.rows = everything  # only rows that are in the file count as kept (a full disk fails the write)


REQUIRED_COLUMNS = ("schema_version", "collective", "size_bytes", "busbw_GBps")
# The schema versions this commbench reads and compares (docs/RESULTS.md).
READABLE_SCHEMA_VERSIONS = range(1, SCHEMA_VERSION + 1)


def check_schema_versions(versions: Iterable, source: str, comparing: bool = False) -> None:
    """Refuse results of a schema_version this commbench cannot read. Reading (read_results;
    `source` names the file): a version newer than SCHEMA_VERSION. Comparing (compare and gate;
    `source` is e.g. "the before results"): any version outside READABLE_SCHEMA_VERSIONS, a
    missing one included."""
    versions = set(versions)
    if comparing:
        readable = READABLE_SCHEMA_VERSIONS
        unreadable = sorted(v for v in versions if v not in readable) if None not in versions else [None]
        if unreadable:
            raise BadInput(f"{source} have schema_version {unreadable[0]}, which this commbench cannot "
                           f"compare (it reads {readable.start}..{readable.stop - 1}): "
                           "upgrade commbench or re-run the measurement")
        return
    newest = max((v for v in versions if v is not None), default=None)
    if newest is not None and newest > SCHEMA_VERSION:
        raise BadInput(f"{source} has schema_version {newest}, newer than this commbench reads "
                       f"({SCHEMA_VERSION}): upgrade commbench")


def read_results(paths: Iterable[str | os.PathLike], columns: Iterable[str] | None = None,
                 skip: Iterable[str] = ()):
    """Read one or more result files (or folders of them) into one pandas DataFrame. Each must be a
    regular file (a pipe or device is refused before it is opened); a JSON cell of env, net or plan
    nested deeper than MAX_NESTING is read as the JSON string UNREADABLE.

    columns: read only these (those a file holds; the ones every results file must hold are always
    read); skip: read every column but these. An analysis that reads only what it uses keeps a
    million rows (per-iteration and per-rank lists) within memory."""
    import pandas as pd

    wanted = None if columns is None else set(columns) | set(REQUIRED_COLUMNS)
    skipped = set(skip) - set(REQUIRED_COLUMNS)

    files = _result_files(paths)
    frames = []
    for f in files:
        try:
            schema = pq.read_schema(f)
            names = [c for c in schema.names if (wanted is None or c in wanted) and c not in skipped]
            shared = [c for c in SHARED_STRINGS if c in names and pa.types.is_string(schema.field(c).type)]
            lists = [c for c in names if pa.types.is_list(schema.field(c).type)
                     and pa.types.is_string(schema.field(c).type.value_type)]
            # A buffered stream rather than pre-buffered column chunks: on a local file it reads a
            # million rows in half the time, with less memory at the peak.
            table = pq.read_table(f, columns=names, read_dictionary=shared, pre_buffer=False, buffer_size=1 << 20)
        except Exception as exc:  # pyarrow raises several types for a foreign or broken file
            raise BadInput(f"{f} is not a readable parquet file ({type(exc).__name__}): "
                           "pass a file written by commbench") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise BadInput(f"{f} is not a commbench results file (no column {missing[0]}): "
                           "pass a file written by commbench")
        check_schema_versions([pc.max(table.column("schema_version")).as_py()], str(f))
        frame = table.drop_columns(shared + lists).to_pandas()
        for name in table.column_names:
            if name in shared or name in lists:
                convert = _shared_strings if name in shared else _shared_lists
                frame.insert(table.column_names.index(name), name, convert(table.column(name)))
        frames.append(frame)
        del table
        pa.default_memory_pool().release_unused()  # decoding buffers back to the system, not kept for later
    return pd.concat(frames, ignore_index=True)


NOT_A_FILE = ("results file {name} is {what}, not a regular file: pass a .parquet file written by commbench "
              "(or a folder of them)")


def _result_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The files read_results reads: each path, or a folder's *.parquet. Each one is a regular file,
    checked before pyarrow opens it (a named pipe would block the open for ever, /dev/zero never
    ends); there is no size bound, a results file may be large."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.parquet")))
        elif p.exists():
            files.append(p)
        else:
            raise BadInput(f"results file {p} does not exist: pass a .parquet file or a folder of them")
    if not files:
        raise BadInput("no .parquet result files found: pass files written by commbench sweep")
    for f in files:
        check_regular(f, NOT_A_FILE)
    return files


# JSON columns repeat one long string on every row of a run (net holds every host's facts: kilobytes
# a host). Read dictionary-encoded, as parquet stores them, and share one Python string per distinct
# value: decoded per row, a million rows of a 32-node run would take tens of gigabytes.
SHARED_STRINGS = ("env", "net", "plan")


def _within_nesting(text):
    """A JSON cell nested deeper than MAX_NESTING (a damaged or hostile file: json.loads would end in
    a RecursionError in every reader) read as the JSON string UNREADABLE: shown as such by report,
    refused as not an object by compare. Checked once per distinct value, not per row."""
    if isinstance(text, str) and nests_deeper(text, MAX_NESTING):
        return json.dumps(UNREADABLE)
    return text


def _shared_strings(column: pa.ChunkedArray):
    """An object column (NaN where missing, as pandas shows a missing string) whose rows point at
    one str per distinct value of the dictionary-encoded column. Object dtype on purpose: pandas
    would turn an array of str into its own string dtype, a copy per row again."""
    import numpy as np
    import pandas as pd

    values = np.empty(len(column), dtype=object)
    at = 0
    for chunk in column.chunks:
        distinct = np.empty(len(chunk.dictionary) + 1, dtype=object)
        distinct[:-1] = [_within_nesting(v) for v in chunk.dictionary.to_pylist()]
        distinct[-1] = np.nan
        index = chunk.indices.fill_null(len(chunk.dictionary)).to_numpy(zero_copy_only=False)
        values[at:at + len(chunk)] = distinct[index]
        at += len(chunk)
    return pd.Series(values, dtype=object, copy=False)


def _shared_lists(column: pa.ChunkedArray):
    """A list-of-strings column (hosts: one list on every row of a run) as an object column whose
    rows share one array per distinct list, the array to_pandas makes for that list (a million
    rows of a 32-host list would otherwise be a million arrays)."""
    import numpy as np
    import pandas as pd

    values = np.empty(len(column), dtype=object)
    at = 0
    for chunk in column.chunks:
        n = len(chunk)
        if n == 0:
            continue
        # One text per list that no other list shares: every item as <length>:<item>, joined.
        items = chunk.values
        tagged = pc.binary_join_element_wise(pc.cast(pc.utf8_length(items), pa.string()), items, ":")
        text = pc.binary_join(pa.ListArray.from_arrays(chunk.offsets, tagged), "")
        codes = pc.dictionary_encode(text).indices.fill_null(-1).to_numpy(zero_copy_only=False)
        plain = (codes >= 0) & ~chunk.is_null().to_numpy(zero_copy_only=False)
        part = np.empty(n, dtype=object)
        rows = np.flatnonzero(plain)
        if rows.size:
            distinct, first = np.unique(codes[rows], return_index=True)
            lookup = np.empty(int(distinct.max()) + 1, dtype=object)
            lookup[distinct] = chunk.take(pa.array(rows[first])).to_pandas().to_numpy(dtype=object)
            part[rows] = lookup[codes[rows]]
        others = np.flatnonzero(~plain)  # null lists, lists holding a null: as to_pandas makes them
        if others.size:
            part[others] = chunk.take(pa.array(others)).to_pandas().to_numpy(dtype=object)
        values[at:at + n] = part
        at += n
    return pd.Series(values, dtype=object, copy=False)


def env_json(env: dict) -> str:
    return json.dumps(env, sort_keys=True)


def make_run_id(now=None) -> str:
    import datetime as dt
    import secrets

    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
