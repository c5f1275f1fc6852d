"""The result format: one parquet row per point and repetition (docs/RESULTS.md).

Writing is append-only, so a point costs the same at the millionth point as at the first: the
first batch of rows replaces the empty file create() made; every later batch becomes a part of
its own, FILE.parts/part-NNNNNNNN.parquet, written to a hidden temporary beside FILE and renamed
into place, so a reader (or a crash, kill -9 or Ctrl-C) sees whole parts only; every thousand
parts are merged into one (part-A-B.parquet), so a long run leaves few files. When the run ends
(close()), the rows are compacted into FILE by one atomic replace and the parts removed; FILE
records the last part it holds (metadata `commbench.parts`), so parts a killed compaction left
behind are never read twice. A file that exists before the run is never overwritten: create()
links the file into place, which fails if the name is taken (or its parts folder exists).
Readers (result_files, read_results) take FILE with its parts, compacted or not.
"""

from __future__ import annotations

import errno
import glob
import os
import queue
import re
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from commbench.core import filecheck
from commbench.core.sharedcells import SHARED_STRINGS, shared_lists, shared_strings
from commbench.core.columns import BY_NAME, REQUIRED_COLUMNS, SCHEMA, SCHEMA_VERSION
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.inputs import check_path, check_regular, path_facts, shown_path

if TYPE_CHECKING:
    import datetime as dt

    import pandas as pd

# The schema, its version and the required columns are the column registry's (core/columns.py).
COLUMNS = tuple(SCHEMA.names)


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


PARTS_SUFFIX = ".parts"  # FILE.parts: the folder of a results file's parts while its run runs
# The longest results file name: 255 bytes less its temporaries' `.NAME.<pid>.XXXXXXXX.tmp` additions.
MAX_NAME_BYTES = 255 - len("..4194304..tmp") - 8
# part-N.parquet holds part N; part-A-B.parquet holds parts A..B (merged: fewer files to read and remove)
_PART = re.compile(r"part-(\d+)(?:-(\d+))?\.parquet")
_MERGE_EVERY = 1000  # parts merged into one file: a killed 100,000-point run leaves ~100 files, not 100,000
_PARTS_KEY = b"commbench.parts"  # in FILE's metadata: the number of the last part FILE holds
# A part is written for speed (a point must cost about a millisecond): zstd and statistics on 75
# columns cost 3 ms of fixed work a file. Dictionaries only where a batch repeats one long string.
_PART_OPTIONS = {"compression": "snappy", "write_statistics": False, "use_dictionary": ["env", "net", "plan"]}
_COMPACT_BATCH = 10_000  # rows turned into Arrow at a time while compacting (memory stays bounded)


def _last(m: re.Match[str]) -> int:
    """The number of the last part a part's name (matched by _PART) says it holds."""
    return int(m.group(2) or m.group(1))


def parts_dir(path: str | os.PathLike[str]) -> Path:
    """Where the parts of results file `path` live while its run runs."""
    path = Path(path)
    return path.with_name(path.name + PARTS_SUFFIX)


def _file_mode() -> int:
    """rw-r--r-- narrowed by the umask: results are shared, never group- or world-writable
    (mkstemp alone would make them 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o644 & ~mask


def _write_atomically(write: Callable[[BinaryIO], None], target: Path, replace: bool,
                      results: Path | None = None) -> None:
    """`write(fh)` into a hidden temporary beside the results file, fsynced, then renamed over
    `target` (replace) or linked to it (never replacing a file). Messages name the results file."""
    results = results or target
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(results), suffix=".tmp", dir=results.parent)
    except OSError as exc:  # a folder we may not write (the user's fix), or no inode left (the disk's)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise BadInput(f"cannot write results to {results}: {exc.strerror}; pass a writable --out") from None
        raise RuntimeFailure(f"cannot write results to {results}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), _file_mode())
            write(fh)
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
        raise RuntimeFailure(f"cannot write results to {results}: {exc.strerror or exc}") from None
    except BaseException:  # Ctrl-C or SIGTERM mid-write: the target is intact; leave no temporary beside it
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _temp_prefix(results: Path) -> str:
    """This process's temporaries beside a results file: hidden, and named by the pid, so that a
    closing writer can find the ones a signal left between mkstemp and its own cleanup."""
    return f".{results.name}.{os.getpid()}."


def _remove_own_temporaries(results: Path) -> None:
    """At the end of a run no write of this process is in flight: any temporary of its own still
    beside the file was cut off by a signal (a second one during a write's cleanup). Others' stay."""
    for tmp in results.parent.glob(f"{glob.escape(_temp_prefix(results))}*.tmp"):
        try:
            tmp.unlink()
        except OSError:
            pass


def _whole(rows: list[dict[str, Any]], parts_held: int | None) -> Callable[[BinaryIO], None]:
    """Writes every row as one zstd parquet file, as a run's file always was, that says it holds
    the parts up to `parts_held`. Rows become Arrow a batch at a time: the dicts of a million rows
    at once would take gigabytes on the way."""
    def write(fh: BinaryIO) -> None:
        batches = [rows_table(rows[at:at + _COMPACT_BATCH]) for at in range(0, len(rows), _COMPACT_BATCH)]
        table = pa.concat_tables(batches) if batches else rows_table([])
        meta = None if parts_held is None else {_PARTS_KEY: str(parts_held).encode()}
        pq.write_table(table.replace_schema_metadata(meta), fh, compression="zstd")
    return write


def resolve_out(out: str, run_id: str) -> Path:
    """--out DIR -> DIR/<run_id>.parquet; --out FILE.parquet -> that file."""
    path = Path(out)
    if path.suffix.lower() == ".parquet":
        return path
    return path / f"{run_id}.parquet"


def check_writable(target: Path) -> None:
    """Fail early, before anything is measured, on a taken name, an unusable folder or a path that
    cannot be looked at (a name too long for the file system: one line, core/inputs.py)."""
    shown = shown_path(target)
    facts = check_path(target, "--out")
    if len(os.fsencode(target.name)) > MAX_NAME_BYTES:
        raise BadInput(f"--out {shown}: a results file's name holds at most {MAX_NAME_BYTES} bytes (its hidden "
                       f"temporaries and {PARTS_SUFFIX} folder beside it need the rest of the 255 a file system "
                       "allows): pass a shorter one")
    if facts.lexists:
        raise BadInput(f"results file {shown} already exists: commbench never overwrites results; "
                       "pass another --out")
    if check_path(parts_dir(target), "--out").lexists:  # a killed run's parts: not ours to mix with
        raise BadInput(f"{shown_path(parts_dir(target))} already exists (the parts of another run): commbench "
                       "never mixes runs; pass another --out or remove it")
    parent = check_path(target.parent, "--out")
    if parent.exists and not parent.is_dir:
        raise BadInput(f"--out {shown_path(target.parent)} is a file, not a folder: pass a folder or a .parquet "
                       "file name")


class ResultWriter:
    """Holds the rows of one run (`rows`, in order) and keeps every finished one on disk: the
    first batch in `path`, each later batch in a part of its own, all in `path` after close()."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = []
        self._parts = 0  # parts written so far (the last one's number)
        self._held = 0  # the last part `path` itself holds (compacted)
        self._merged = 0  # the last part held by a merged part (or by `path`)
        self._unmerged_from = 0  # the index in `rows` of the first row of part self._merged + 1
        self._next_merge = _MERGE_EVERY  # the part after which the next merge is due
        self._remover = _Remover()

    @property
    def parts(self) -> Path:
        return parts_dir(self.path)

    def create(self) -> None:
        check_writable(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"cannot create results folder {self.path.parent}: {exc.strerror}; "
                           "pass a writable --out") from None
        _write_atomically(_whole([], 0), self.path, replace=False)

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """One batch, kept once this returns. An empty batch stores the rows as they are now, whole
        (a caller that changed rows in place: NCCL's transport filled in at the end)."""
        new = list(rows)
        if not new:
            self._compact()
            return
        if not self.rows and self._parts == self._held:  # nothing stored yet: the batch is the file itself
            _write_atomically(_whole(new, self._held), self.path, replace=True)
            self._unmerged_from = len(new)
        else:
            self._write_part(new)
        self.rows.extend(new)  # only rows that are on disk count as kept (a full disk fails the write)
        if self._parts >= self._next_merge:
            self._merge()

    def close(self) -> str | None:
        """The end of the run: compact the parts into `path`. None when done; if the write fails
        (a full disk), the parts stay as they are, every reader still reads them, and the answer is
        one line saying so."""
        try:
            return self._compacted()
        finally:
            _remove_own_temporaries(self.path)

    def _compacted(self) -> str | None:
        if self._parts == self._held:
            return None
        try:
            self._compact()
        except RuntimeFailure as exc:
            reason = str(exc).rsplit(": ", 1)[-1]
            return (f"the rows stay in {self.path} and {self._parts - self._held} parts in {self.parts} "
                    f"(not compacted into one file: {reason[:1].lower() + reason[1:]}); commbench reads "
                    "them as they are")
        return None

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        note = self.close()
        if note:
            print(f"commbench: warning: {note}", file=sys.stderr, flush=True)

    def _write_part(self, rows: list[dict[str, Any]]) -> None:
        number = self._parts + 1
        if self._parts == self._held:
            try:
                os.mkdir(self.parts)
            except FileExistsError:
                if any((m := _PART.fullmatch(name)) and _last(m) > self._held
                       for name in os.listdir(self.parts)):  # leftovers of our own compaction are no harm
                    raise RuntimeFailure(f"cannot write results to {self.path}: {self.parts} holds parts "
                                         "commbench did not expect (another run?)") from None
            except OSError as exc:
                raise RuntimeFailure(f"cannot write results to {self.path}: {exc.strerror or exc}") from None
        table = rows_table(rows)
        _write_atomically(lambda fh: pq.write_table(table, fh, **_PART_OPTIONS),
                          self.parts / f"part-{number:08d}.parquet", replace=False, results=self.path)
        self._parts = number

    def _merge(self) -> None:
        """The parts since the last merge into one file (their rows are in memory), then removed:
        every thousandth append costs tens of milliseconds so that readers and close() stay fast.
        A merge that cannot write loses nothing (the parts are there) and is tried again later."""
        first, end = self._merged + 1, len(self.rows)
        self._next_merge = self._parts + _MERGE_EVERY
        try:
            _write_atomically(_whole(self.rows[self._unmerged_from:end], None),
                              self.parts / f"part-{first:08d}-{self._parts:08d}.parquet", replace=False,
                              results=self.path)
        except RuntimeFailure:
            return
        self._merged, self._unmerged_from = self._parts, end
        # The single parts it holds go in the background: a removal can wait for the file system's
        # journal (a millisecond each on a busy disk), and readers skip them meanwhile.
        self._remover.remove([self.parts / f"part-{n:08d}.parquet" for n in range(first, self._parts + 1)])

    def _compact(self) -> None:
        """Every row into `path` (one atomic replace), then the parts it now holds removed."""
        _write_atomically(_whole(self.rows, self._parts), self.path, replace=True)
        self._remover.wait()
        self._held = self._merged = self._parts
        self._unmerged_from, self._next_merge = len(self.rows), self._parts + _MERGE_EVERY
        _remove_parts(self.parts, self._held)


class _Remover:
    """Removes files on a thread of its own (started when first needed), in the order given."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Path | None] | None = None
        self._thread: threading.Thread | None = None

    def remove(self, paths: list[Path]) -> None:
        if self._thread is None or self._queue is None:  # (both are None, or neither)
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._work, args=(self._queue,), name="parts-remover",
                                            daemon=True)  # one killed with the process leaves covered parts only
            self._thread.start()
        for path in paths:
            self._queue.put(path)

    @staticmethod
    def _work(todo: queue.SimpleQueue[Path | None]) -> None:
        for path in iter(todo.get, None):
            try:
                os.unlink(path)
            except OSError:
                pass

    def wait(self) -> None:
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = self._thread = None


def _remove_parts(folder: Path, held: int) -> None:
    """Remove the parts numbered up to `held`, then the folder if nothing else is in it. A failure
    here loses nothing: the file says which parts it holds, readers skip those."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _PART.fullmatch(name)
        if m and _last(m) <= held:
            try:
                os.unlink(folder / name)
            except OSError:
                pass
    try:
        os.rmdir(folder)
    except OSError:  # not empty (a killed writer's temporary, someone's file): left as it is
        pass


# The schema versions this commbench reads and compares (docs/RESULTS.md).
READABLE_SCHEMA_VERSIONS = range(1, SCHEMA_VERSION + 1)


def check_schema_versions(versions: Iterable[int | None], source: str, comparing: bool = False) -> None:
    """Refuse results of a schema_version this commbench cannot read. Reading (read_results;
    `source` names the file): a version newer than SCHEMA_VERSION. Comparing (compare and gate;
    `source` is e.g. "the before results"): any version outside READABLE_SCHEMA_VERSIONS, a
    missing one included."""
    versions = set(versions)
    if comparing:
        readable = READABLE_SCHEMA_VERSIONS
        unreadable: Sequence[int | None] = [None]  # a missing version first
        if None not in versions:
            unreadable = sorted(v for v in versions if v is not None and v not in readable)
        if unreadable:
            raise BadInput(f"{source} have schema_version {unreadable[0]}, which this commbench cannot "
                           f"compare (it reads {readable.start}..{readable.stop - 1}): "
                           "upgrade commbench or re-run the measurement")
        return
    newest = max((v for v in versions if v is not None), default=None)
    if newest is not None and newest > SCHEMA_VERSION:
        raise BadInput(f"{source} has schema_version {newest}, newer than this commbench reads "
                       f"({SCHEMA_VERSION}): upgrade commbench")


def read_results(paths: Iterable[str | os.PathLike[str]], columns: Iterable[str] | None = None,
                 skip: Iterable[str] = ()) -> pd.DataFrame:
    """Read one or more result files (or folders of them) into one pandas DataFrame. Each must be a
    regular file (a pipe or device is refused before it is opened); a JSON cell of env, net or plan
    nested deeper than MAX_NESTING is read as the JSON string UNREADABLE.

    columns: read only these (those a file holds; the ones every results file must hold are always
    read); skip: read every column but these. An analysis that reads only what it uses keeps a
    million rows (per-iteration and per-rank lists) within memory."""
    import pandas as pd

    wanted = None if columns is None else set(columns) | set(REQUIRED_COLUMNS)
    skipped = set(skip) - set(REQUIRED_COLUMNS)

    frames = []
    for group in _result_groups(paths):
        tables, names = [], None
        for f in group:  # a results file, then its parts: one table, the rows in the order they were written
            table, names = _read_table(f, wanted, skipped, names)
            tables.append(table)
        try:
            table = pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # a column the registry does not know, typed twice
            raise BadInput(f"{filecheck.name(group[0])} and its parts hold a column in different types "
                           f"({str(exc).splitlines()[0][:120]}): {filecheck.FIX}") from None
        del tables
        if len(group) > 1:  # one dictionary a column, not one a part: a string shared by every row stays one
            table = table.unify_dictionaries().combine_chunks()
        shared = [c for c in SHARED_STRINGS
                  if c in table.column_names and pa.types.is_dictionary(table.schema.field(c).type)]
        lists = [c for c in table.column_names if pa.types.is_list(table.schema.field(c).type)
                 and pa.types.is_string(table.schema.field(c).type.value_type)]
        frame = table.drop_columns(shared + lists).to_pandas()
        for name in table.column_names:
            if name in shared or name in lists:
                convert = shared_strings if name in shared else shared_lists
                frame.insert(table.column_names.index(name), name, convert(table.column(name)))
        frames.append(_every_column(frame, wanted, skipped))  # per file: an older one lacks what a newer has
        del table
        pa.default_memory_pool().release_unused()  # decoding buffers back to the system, not kept for later
    return pd.concat(frames, ignore_index=True)


def _every_column(frame: pd.DataFrame, wanted: set[str] | None, skipped: set[str]) -> pd.DataFrame:
    """The registry's columns a file lacks (an older or hand-made file holds any subset beyond the
    required ones) as missing values, so that no reader meets a column that is not there."""
    import numpy as np
    import pandas as pd

    for column in SCHEMA:
        name = column.name
        if name in frame.columns or name in skipped or (wanted is not None and name not in wanted):
            continue
        if pa.types.is_floating(column.type):
            frame[name] = np.full(len(frame), np.nan)
        else:
            frame[name] = pd.Series([None] * len(frame), dtype=object, index=frame.index)
        for workload, value in BY_NAME[name].absent:  # what an older file's rows meant without it
            if "workload" in frame.columns:
                frame.loc[(frame["workload"] == workload).to_numpy(dtype=bool), name] = value
    return frame


def _read_table(f: Path, wanted: set[str] | None, skipped: set[str],
                names: list[str] | None) -> tuple[pa.Table, list[str]]:
    """One parquet file through the door (core/filecheck.py) as Arrow: the columns asked for
    (`names`: those of the results file whose part this is), the JSON columns dictionary-encoded,
    the known columns in the registry's types."""
    try:
        schema = filecheck.check_schema(f, pq.ParquetFile(f))
        part = names is not None
        if names is None:  # a results file: the columns asked for, of those it holds
            names = [c for c in schema.names if (wanted is None or c in wanted) and c not in skipped]
        held = [c for c in names if c in schema.names]
        shared = [c for c in SHARED_STRINGS if c in held and pa.types.is_string(schema.field(c).type)]
        if not part:
            # A buffered stream rather than pre-buffered column chunks: on a local file it reads a
            # million rows in half the time, with less memory at the peak.
            table = pq.read_table(f, columns=held, read_dictionary=shared, pre_buffer=False, buffer_size=1 << 20)
        else:  # one of its parts (a few rows, our own schema): read plainly, 2x faster
            table = pq.ParquetFile(f, read_dictionary=shared).read(columns=held, use_threads=False)
    except (BadInput, RuntimeFailure):
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a foreign or broken file
        raise unreadable(f, exc) from None
    filecheck.check_values(f, table)
    filecheck.check_unread(f, schema, table.column_names)
    return filecheck.conform(table, f).replace_schema_metadata(None), names


def unreadable(f: str | os.PathLike[str], exc: BaseException) -> Exception:
    """What a file pyarrow cannot read is, said once for every reader (core/filecheck.py)."""
    return filecheck.unreadable(f, exc)


NOT_A_FILE = ("results file {name} is {what}, not a regular file: pass a .parquet file written by commbench "
              "(or a folder of them)")


def result_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every parquet file read_results reads, in the order of its rows: each results file (a path
    given, or a folder's *.parquet), each followed by its parts not yet compacted into it. A
    FILE.parts folder given by itself stands for FILE. Each is a checked regular file."""
    return [f for group in _result_groups(paths) for f in group]


def _result_groups(paths: Iterable[str | os.PathLike[str]]) -> list[list[Path]]:
    """result_files, a list a results file. Each file is checked to be a regular file before
    anything opens it (a named pipe would block the open for ever, /dev/zero never ends); there is
    no size bound, a results file may be large. Temporaries (hidden, .tmp) are never listed."""
    files: list[Path] = []
    for p in map(Path, paths):
        facts = check_path(p, "results file")
        if facts.is_dir and p.name.endswith(PARTS_SUFFIX) and path_facts(str(p)[:-len(PARTS_SUFFIX)]).is_file:
            p = Path(str(p)[:-len(PARTS_SUFFIX)])
            facts = path_facts(p)
        if facts.is_dir:
            files.extend(sorted(p.glob("*.parquet")))
        elif facts.exists:
            files.append(p)
        else:
            raise BadInput(f"results file {filecheck.name(p)} does not exist: pass a .parquet file or a folder of them")
    if not files:
        raise BadInput("no .parquet result files found: pass files written by commbench sweep")
    for f in files:
        check_regular(f, NOT_A_FILE)
    return [_snapshot(f) for f in files]


class ResultFile(type(Path())):  # type: ignore[misc]
    """A results file or part opened when it was listed: its name is the path the user knows, and
    every read goes through the open descriptor (os.fspath: /proc/self/fd/N), so that a part a live
    run's compaction removes meanwhile still reads as it was, and a name is never a glob pattern
    to a reader (DuckDB expands `run[1].parquet`). The descriptor closes with the object."""

    fd: int | None = None

    def __fspath__(self) -> str:
        return f"/proc/self/fd/{self.fd}" if self.fd is not None else str(self)


_BY_DESCRIPTOR = os.path.isdir("/proc/self/fd")  # Linux; elsewhere files are read by name


def _opened(path: Path) -> Path:
    """`path` open for reading, as a ResultFile (its own name where there is no /proc/self/fd)."""
    if not _BY_DESCRIPTOR:
        return path
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # non-blocking: a FIFO put in meanwhile
    f = ResultFile(path)
    f.fd = fd
    weakref.finalize(f, os.close, fd)
    check_regular(f, NOT_A_FILE)  # what was opened, not what the name points to now
    return f


def _snapshot(results: Path, tries: int = 5) -> list[Path]:
    """A results file and its live parts, each opened: one consistent state of a running run. A
    part that compaction or a merge removed between the listing and its open means the file (or a
    merged part) now holds its rows: the listing is taken again."""
    for _ in range(tries):
        try:
            f = _opened(results)
            return [f, *(_opened(part) for part in _live_parts(f))]
        except FileNotFoundError:
            continue
    raise RuntimeFailure(f"{filecheck.name(results)} changed {tries} times while it was read (a run compacting "
                         "it?): try again once the run has ended")


def _live_parts(results: Path) -> list[Path]:
    """The parts of `results` that it does not hold yet, by number (a killed run's, or a run's
    still running). Parts numbered up to what the file says it holds are a compaction's leftovers."""
    folder = parts_dir(results)
    if not path_facts(folder).is_dir:  # never raises: FILE.parts may be a name too long for FILE's folder
        return []
    try:
        held = int((pq.read_metadata(results).metadata or {}).get(_PARTS_KEY, b"0"))
    except Exception:  # noqa: BLE001 - not readable parquet: the read of the file itself says why
        held = 0
    found = []  # (first, last, path): a merged part before the single parts it holds
    with os.scandir(folder) as entries:
        for entry in entries:
            m = _PART.fullmatch(entry.name)
            if m:
                first = int(m.group(1))
                found.append((first, _last(m), Path(entry.path)))
    live, covered = [], held
    for first, last, path in sorted(found, key=lambda e: (e[0], -e[1])):
        if first > covered:  # parts a merge or the file already holds are its leftovers, not rows
            live.append(path)
            covered = last
    return live


def make_run_id(now: dt.datetime | None = None) -> str:
    import datetime as dt
    import secrets

    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
