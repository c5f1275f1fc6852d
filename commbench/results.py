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
import pyarrow.parquet as pq

from commbench.errors import BadInput, RuntimeFailure

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


def read_results(paths: Iterable[str | os.PathLike]):
    """Read one or more result files (or folders of them) into one pandas DataFrame."""
    import pandas as pd

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
    frames = []
    for f in files:
        try:
            table = pq.read_table(f)
        except Exception as exc:  # pyarrow raises several types for a foreign or broken file
            raise BadInput(f"{f} is not a readable parquet file ({type(exc).__name__}): "
                           "pass a file written by commbench") from None
        missing = [c for c in ("schema_version", "collective", "size_bytes", "busbw_GBps") if c not in table.column_names]
        if missing:
            raise BadInput(f"{f} is not a commbench results file (no column {missing[0]}): "
                           "pass a file written by commbench")
        versions = set(table.column("schema_version").to_pylist())
        if versions and max(versions) > SCHEMA_VERSION:
            raise BadInput(f"{f} has schema_version {max(versions)}, newer than this commbench reads "
                           f"({SCHEMA_VERSION}): upgrade commbench")
        frames.append(table.to_pandas())
    return pd.concat(frames, ignore_index=True)


def env_json(env: dict) -> str:
    return json.dumps(env, sort_keys=True)
