"""`commbench nccl-tests import`: nccl-tests logs -> result files.

Text logs in every shape met in the field (see tests/data/nccl-tests/README.md and
docs/NCCL_TESTS.md) and `-J` JSON documents. The numbers are nccl-tests' own: size, count, time,
algbw, busbw and #wrong are stored as the binary printed them (its definitions are commbench's,
docs/RESULTS.md), with two documented exceptions: a bandwidth printed as 0.00 (below the print
precision) is recomputed from size and time, and rows of size 0 are dropped (commbench drops
sizes of zero elements too). Every file is parsed before anything is written, so a bad one
leaves no partial results behind.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import re
import sys
from pathlib import Path
from collections.abc import Callable, Iterable

from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, BadInput
from commbench.core.inputs import (MAX_NCCL_TESTS_JSON_VALUES, MAX_NCCL_TESTS_LOG_BYTES, MAX_NCCL_TESTS_LOG_ROWS,
                                   InputMessages, read_bytes)
from commbench.integrations.nccl_tests.format import STAMP, collective_from_filename, local_time, where
from commbench.integrations.nccl_tests.json_doc import json_env, json_started_at, parse_json_document
from commbench.integrations.nccl_tests.records import Parsed, RecordBuilder, base_columns, describe
from commbench.integrations.nccl_tests.text import parse_text


def _decode(data: bytes, source: str) -> str:
    """Text, or BadInput naming the first line that is binary junk."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise BadInput(f"{where(source, line)}: binary data (NUL byte): not an nccl-tests log")
    # An editor's byte order mark before the first line is no part of the log; one further on is
    # (text.py names it).
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace")
    # Counted per character kind (str.count, no list of positions: 64 MiB of junk is 30 M of them).
    bad = sum(text.count(ch) for ch in _NOT_TEXT_CHARS)
    if bad and bad > max(8, len(text) // 100):
        first = _NOT_TEXT.search(text)
        line = text.count("\n", 0, first.start() if first else 0) + 1
        raise BadInput(f"{where(source, line)}: binary data "
                       f"({bad} bytes that are not text): not an nccl-tests log")
    return text


# Decoding errors and control characters other than tab, newline, carriage return, form feed and escape.
_NOT_TEXT_CHARS = "\ufffd" + "".join(chr(c) for c in range(32) if chr(c) not in "\t\n\r\f\x1b")
_NOT_TEXT = re.compile("[" + re.escape(_NOT_TEXT_CHARS) + "]")


# A line that could be a result row (size, count, type first; after any mpirun/srun prefix), or a
# result of a -J document: counted before parsing, so that a log cannot become millions of rows.
# Possessive: each run of digits is scanned once (a line of a million digits must not backtrack).
_ROW_LIKE = re.compile(r"(?:^|(?<=[\s:>]))[0-9]++[ \t]++[0-9]++[ \t]++[A-Za-z_]", re.MULTILINE | re.ASCII)
_JSON_RESULT = re.compile(r'"size"\s*+:', re.ASCII)


def _check_rows(text: str, source: str, is_json: bool) -> None:
    """What the log would become, bounded before it is parsed: its result rows and, for a -J
    document, the values json.loads would build (core/inputs.py holds the limits)."""
    if is_json and sum(text.count(ch) for ch in ",{[") > MAX_NCCL_TESTS_JSON_VALUES:
        raise BadInput(f"{source}: more than {MAX_NCCL_TESTS_JSON_VALUES} JSON values, the most commbench reads "
                       "from one nccl-tests -J document: import one document per nccl-tests run")
    found = (_JSON_RESULT if is_json else _ROW_LIKE).finditer(text)
    rows = sum(1 for _ in itertools.islice(found, MAX_NCCL_TESTS_LOG_ROWS + 1))
    if rows > MAX_NCCL_TESTS_LOG_ROWS:
        raise BadInput(f"{source}: more than {MAX_NCCL_TESTS_LOG_ROWS} result rows, the most commbench imports "
                       "from one nccl-tests log: import one log per nccl-tests run")


_LOG_FILE = InputMessages(missing="{name} does not exist: pass an nccl-tests log file",
                          folder="{name} is a folder: pass nccl-tests log files",
                          unreadable="cannot read {name}: {error}",
                          kind="an nccl-tests log", limit=MAX_NCCL_TESTS_LOG_BYTES,
                          not_regular="{name} is {what}, not a regular file: save the nccl-tests output to a file "
                                      "first (e.g. all_reduce_perf ... > all_reduce.log) and import that",
                          too_big="{name} is larger than {limit}, the most commbench reads as {kind}: "
                                  "import one log per nccl-tests run")


def parse_file(path: str | os.PathLike, run_id: str, label: str = "", collective: str | None = None) -> Parsed:
    """One nccl-tests log (text or -J JSON) -> commbench rows; BadInput naming the file and line."""
    p = Path(path)
    source = str(path)
    text = _decode(read_bytes(p, _LOG_FILE), source)
    is_json = text.lstrip().startswith("{")
    _check_rows(text, source, is_json)
    try:
        mtime = dt.datetime.fromtimestamp(p.stat().st_mtime, dt.timezone.utc)
    except (OSError, OverflowError, ValueError):
        mtime = dt.datetime.now(dt.timezone.utc)
    if is_json:
        started = json_started_at(text) or mtime
        env = json_env(text)
    else:
        stamp = STAMP.search(text)
        started = (local_time(f"{stamp.group(1)} {stamp.group(2)}") if stamp else None) or mtime
        env = {}
    plan = {"source": "import", "file": p.name, "format": "json" if is_json else "text"}
    builder = RecordBuilder(base_columns(run_id, label, started, env, plan), collective,
                            collective_from_filename(p.name), source)
    if is_json:
        return parse_json_document(text, source, builder)
    return parse_text(text, source, builder)


def import_files(paths: Iterable[str], out: str, label: str = "", collective: str | None = None,
                 echo: Callable[[str], None] = print,
                 warn: Callable[[str], None] = lambda m: print(f"commbench: warning: {m}", file=sys.stderr)) -> int:
    """Parse every file first (nothing is written if one is bad), then write: --out FILE.parquet
    holds them all, --out DIR one <run_id>.parquet per file. Exit 0, or 1 if a data check failed."""
    from commbench.core.results import ResultWriter, check_writable, make_run_id, resolve_out

    paths = list(paths)
    if not paths:
        raise BadInput("no files given: pass nccl-tests logs, e.g. commbench nccl-tests import all_reduce.log")
    parsed = [(path, parse_file(path, make_run_id(), label, collective)) for path in paths]
    single = Path(out).suffix.lower() == ".parquet"
    targets = [resolve_out(out, p.records[0]["run_id"]) for _, p in parsed]
    if single:
        targets = [Path(out)] * len(parsed)
    for t in dict.fromkeys(targets):
        check_writable(t)
    writers: dict[Path, ResultWriter] = {}
    for (path, p), target in zip(parsed, targets):
        if target not in writers:
            writers[target] = ResultWriter(target)
            writers[target].create()
        writers[target].append(p.records)
        for w in p.warnings:
            warn(f"{path}: {w}")
        echo(f"imported {path}: {len(p.records)} rows ({describe(p)}) -> {target}")
    for writer in writers.values():  # several logs into one file: their parts become one file
        note = writer.close()
        if note:
            warn(note)
    return EXIT_BAD_RESULT if any(p.failed for _, p in parsed) else EXIT_OK
