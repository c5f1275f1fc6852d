"""nccl-tests: read its output into commbench result rows, and run its binaries.

Reading (`commbench nccl-tests import`): text logs in every shape met in the field (see
tests/data/nccl-tests/README.md and docs/NCCL_TESTS.md) and `-J` JSON documents. The numbers are
nccl-tests' own: size, count, time, algbw, busbw and #wrong are stored as the binary printed them
(its definitions are commbench's, DESIGN.md), with two documented exceptions: a bandwidth printed
as 0.00 (below the print precision) is recomputed from size and time, and rows of size 0 are
dropped (commbench drops sizes of zero elements too).

Running (`commbench nccl-tests run`): argv lists only, output streamed live and parsed as it
comes (rows are written after every line that completes one, so a failing or hung binary keeps
what it printed), `-J` JSON asked for when the binary knows it and preferred when it arrives, a
timeout that kills the whole process group.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import commbench
from commbench.core import vocab
from commbench.core.inputs import InputMessages, read_bytes
from commbench.core.errors import (EXIT_BAD_RESULT, EXIT_OK, EXIT_RUNTIME, EXIT_SIGINT, EXIT_SIGTERM, BadInput,
                              RuntimeFailure)
from commbench.net.ncclinfo import TransportCollector

WORKLOAD = "nccl-tests"
LAUNCHER = "nccl-tests"
SINGLE_RANK_HINT = "each process ran as its own single rank: nccl-tests built without MPI=1 under mpirun?"

_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1

# ---- line shapes ------------------------------------------------------------------------------

_TAG = re.compile(r"^\[([0-9]+),([0-9]+)\]<(stdout|stderr|stddiag)>:[ \t]?", re.ASCII)  # mpirun --tag-output
_SRUN_LABEL = re.compile(r"^[ \t]{0,8}([0-9]{1,7}): ", re.ASCII)  # srun --label
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_STAMP = re.compile(r"(?<!\S)([0-9]{4}-[0-9]{2}-[0-9]{2})[ \t]+([0-9]{2}:[0-9]{2}:[0-9]{2})(?!\S)", re.ASCII)
_VERSION = re.compile(r"^nccl-tests version\s+(\S+)(?:\s+nccl-headers=([0-9]+))?(?:\s+nccl-library=([0-9]+))?",
                      re.ASCII)
_STARTING = re.compile(r"^Collective test starting:\s*(\S+)", re.ASCII)
_CONCLUDED = re.compile(r"^Collective test concluded:", re.ASCII)
_NTHREAD = re.compile(r"^nThread\s+([0-9]+)\s+nGpus\s+([0-9]+)", re.ASCII)
_ITERS = re.compile(r"warmup iters:\s*([0-9]+)\s+iters:\s*([0-9]+)", re.ASCII)
_AGG = re.compile(r"agg iters:\s*([0-9]+)", re.ASCII)
_VALIDATION = re.compile(r"validation:\s*([0-9]+)", re.ASCII)
_RANK = re.compile(r"^Rank\s+([0-9]+)\s+(?:Group\s+([0-9]+)\s+)?Pid\s+([0-9]+)\s+on\s+(\S+)\s+device\s+([0-9]+)"
                   r"(?:\s+\[([^\]]*)\])?\s*(.*?)\s*$", re.ASCII)
_OOB = re.compile(r"^Out of bounds values\s*:\s*([0-9]+)\s*(OK|FAILED)?", re.ASCII)
_JSON_OUT = re.compile(r"^Writing JSON output to (.+?)\s*$")
_ROWLIKE = re.compile(r"^\s*[0-9]+\s+[0-9]+\s+[A-Za-z_][A-Za-z0-9_]*(\s|$)", re.ASCII)
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)", re.ASCII | re.I)
_UINT = re.compile(r"[0-9]+", re.ASCII)
_INT = re.compile(r"-?[0-9]+", re.ASCII)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)

_CHECK_NAMES = {"#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error"}
_TIME_NAMES = {"time", "cputime"}
_PER_ITER = ["i_min", "i_max", "i_p99", "i_cv%"]
# What nccl-tests prints in the redop column (mulsum: ncclRedOpCreatePreMulSum; none: no reduction).
_PRINTED_OPS = {"sum", "prod", "max", "min", "avg", "mulsum", "none"}


def nccl_version_string(code: int | str | None) -> str | None:
    """21903 -> '2.19.3' (NCCL >= 2.9 codes are major*10000 + minor*100 + patch); 2708 -> '2.7.8'."""
    if code is None:
        return None
    try:
        n = int(code)
    except (TypeError, ValueError):
        return None
    if n <= 0:
        return None
    if n >= 10000:
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"


def _norm_name(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def collective_from_program(program: str | None) -> str | None:
    """'all_gather_perf_mpi', './build/all_reduce_perf' -> canonical commbench names."""
    if not program:
        return None
    base = os.path.basename(str(program).strip())
    m = re.match(r"^(.*?)_perf(?:_mpi)?(?:\.\w+)?$", base)
    if not m:
        return None
    return _canonical(m.group(1))


def _canonical(name: str) -> str | None:
    key = _norm_name(name)
    if not key:
        return None
    for c in vocab.COLLECTIVES + vocab.NCCL_TESTS_ONLY:
        if key in {_norm_name(c.name), *(_norm_name(a) for a in c.aliases)}:
            return c.name
    return None


def collective_from_filename(path: str | os.PathLike) -> str | None:
    """The longest collective name inside a file name: all_reduce_legacy_8xA100.txt -> all_reduce."""
    stem = Path(path).name.lower()
    flat = re.sub(r"[^a-z0-9]", "", stem)
    names = [(_norm_name(n), c.name) for c in vocab.COLLECTIVES + vocab.NCCL_TESTS_ONLY for n in (c.name, *c.aliases)]
    best = None
    for key, canon in names:
        if key and key in flat and (best is None or len(key) > len(best[0])):
            best = (key, canon)
    return best[1] if best else None


def bus_factor(collective: str, world: int | None) -> float | None:
    if not world or world < 1:
        return None
    spec = vocab.known(collective)
    return float(spec.busbw_factor(world)) if spec else None


def _rooted(collective: str) -> bool:
    spec = vocab.known(collective)
    return bool(spec and spec.rooted)


def _dtype_name(raw: str) -> str:
    try:
        return vocab.get_dtype(raw).name
    except BadInput:
        return raw  # a type commbench does not measure (uint32, f8e4m3): kept as nccl-tests names it


def _op_name(raw: str | None) -> str | None:
    if raw is None or raw.lower() == "none":
        return None
    try:
        return vocab.get_op(raw)
    except BadInput:
        return raw.lower()


# ---- what the output says ---------------------------------------------------------------------


@dataclass
class RankInfo:
    rank: int
    host: str
    pid: int | None = None
    device: int | None = None
    device_name: str = ""


@dataclass
class Half:
    """One placement of one printed row."""

    size: int
    count: int
    dtype: str
    op: str | None
    root: int | None
    in_place: bool
    time: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None = None
    error: float | None = None
    tmin: float | None = None
    tmax: float | None = None
    tp99: float | None = None
    samples: list[float] | None = None
    iters: int | None = None
    line: int = 0


@dataclass(frozen=True)
class Layout:
    redop: bool
    root: bool
    check: str | None  # "wrong", "error"; None: infer from the value
    per_iter: bool
    groups: int
    time_name: str = "time"
    line: int | None = None  # where the column header was; None: inferred from a row

    @property
    def prefix(self) -> int:
        return 3 + self.redop + self.root

    @property
    def group(self) -> int:
        return 8 if self.per_iter else 4


class Stream:
    """The state of one output stream (one mpirun tag, or the whole untagged output)."""

    def __init__(self) -> None:
        self.tests_version: str | None = None
        self.nccl_version: str | None = None
        self.program: str | None = None
        self.nthread: int | None = None
        self.ngpus: int | None = None
        self.warmup: int | None = None
        self.iters: int | None = None
        self.agg_iters: int | None = None
        self.validation: int | None = None
        self.ranks: dict[int, RankInfo] = {}
        self.layout: Layout | None = None
        self.rows = 0
        self.headers = 0  # nThread lines in this section: more than one = several processes printed it
        self.dup_rank = False
        self.seen: set[str] = set()

    def new_section(self) -> None:
        keep = self.nccl_version
        self.__init__()
        self.nccl_version = keep

    @property
    def several_processes(self) -> bool:
        return self.headers > 1 or self.dup_rank

    def world(self) -> int | None:
        if self.several_processes and self.nthread and self.ngpus:
            return self.nthread * self.ngpus
        if self.ranks:
            return len(self.ranks)
        return None

    def topology(self) -> tuple[list[str], int | None, int | None, str | None]:
        infos = [self.ranks[r] for r in sorted(self.ranks)]
        hosts = list(dict.fromkeys(i.host for i in infos))
        names = list(dict.fromkeys(i.device_name for i in infos if i.device_name))
        device_name = ", ".join(names) if names else None
        if not infos:
            return [], None, None, device_name
        if self.several_processes:
            world = self.world() or 1
            return hosts, 1, world, device_name
        per_host = collections.Counter(i.host for i in infos)
        return hosts, len(hosts), max(per_host.values()), device_name


# ---- parsing rows -----------------------------------------------------------------------------


def _where(source: str, line: int) -> str:
    return f"{source} line {line}"


def _number(tok: str, what: str, source: str, line: int) -> float | None:
    """A printed time, bandwidth or check value: a number of 0 or more, or nan (None)."""
    if not _NUMBER.fullmatch(tok) or tok.startswith("-"):
        raise BadInput(f"{_where(source, line)}: {what} {tok[:40]!r} is not a number of 0 or more: not a "
                       "result row commbench can read")
    v = float(tok)
    return None if math.isnan(v) else v


def _uint(tok: str, what: str, source: str, line: int) -> int:
    if not _UINT.fullmatch(tok) or len(tok) > 19 or int(tok) > _INT64_MAX:
        raise BadInput(f"{_where(source, line)}: {what} {tok[:40]!r} is not a whole number of bytes/elements")
    return int(tok)


def header_layout(tokens: list[str], source: str, line: int) -> Layout | None:
    """The column header line (without '#'), or None if `tokens` is not one."""
    low = [t.lower() for t in tokens]
    if len(low) < 3 or low[0] not in ("size", "bytes") or low[1] not in ("count", "n") or low[2] != "type":
        return None
    rest = low[3:]
    redop = bool(rest) and rest[0] in ("redop", "op")
    rest = rest[1:] if redop else rest
    root = bool(rest) and rest[0] == "root"
    rest = rest[1:] if root else rest
    if rest and rest[-1] == "timestamp":
        rest = rest[:-1]
    groups: list[tuple[str, str, bool]] = []
    while rest:
        if len(rest) >= 4 and rest[0] in _TIME_NAMES and rest[1] == "algbw" and rest[2] == "busbw" \
                and rest[3] in _CHECK_NAMES:
            head, rest = rest[:4], rest[4:]
            per = rest[:4] == _PER_ITER
            if per:
                rest = rest[4:]
            groups.append((head[0], _CHECK_NAMES[head[3]], per))
        else:
            groups = []
            break
    if not groups or len(groups) > 2 or len({g[1:] for g in groups}) != 1:
        raise BadInput(f"{_where(source, line)}: an nccl-tests column header commbench does not know "
                       f"({' '.join(tokens)[:120]!r}): send the log to the commbench maintainers")
    return Layout(redop=redop, root=root, check=groups[0][1], per_iter=groups[0][2], groups=len(groups),
                  time_name=groups[0][0], line=line)


def _infer_layout(tokens: list[str]) -> Layout | None:
    """A row without a column header before it (pasted or cut logs): the shape from the fields."""
    rest = tokens[3:]
    redop = bool(rest) and rest[0].lower() in _PRINTED_OPS
    if redop:
        rest = rest[1:]
    root = len(rest) % 4 == 1 and bool(_INT.fullmatch(rest[0]))
    if root:
        rest = rest[1:]
    if len(rest) == 8:
        return Layout(redop, root, None, False, 2)
    if len(rest) == 4:
        return Layout(redop, root, None, False, 1)
    if len(rest) == 16:
        return Layout(redop, root, None, True, 2)
    return None


def parse_row(text: str, layout: Layout | None, source: str, line: int, final: bool = False) -> list[Half]:
    """The halves (out-of-place, in-place) of a printed result row (no '#', no prefix)."""
    text = _STAMP.sub(" ", text)
    tokens = text.split()
    inferred = layout is None
    if layout is None:
        layout = _infer_layout(tokens)
    g = layout.group if layout else 4
    body = tokens[layout.prefix:] if layout else []
    if layout is None or len(body) not in (g, 2 * g) or (len(body) == 2 * g and layout.groups == 1):
        cut = " (the file ends in the middle of this row: truncated?)" if final else ""
        against = (f"does not match the column header at line {layout.line} "
                   f"({layout.prefix + layout.groups * g} fields)" if layout is not None and not inferred
                   else "is not a row layout nccl-tests prints")
        raise BadInput(f"{_where(source, line)}: a result row with {len(tokens)} fields {against}{cut}")
    size = _uint(tokens[0], "size", source, line)
    count = _uint(tokens[1], "count", source, line)
    dtype = tokens[2]
    if not _IDENT.fullmatch(dtype):
        raise BadInput(f"{_where(source, line)}: type {dtype[:40]!r} is not a data type name")
    op = tokens[3] if layout.redop else None
    if op is not None and not _IDENT.fullmatch(op):
        raise BadInput(f"{_where(source, line)}: redop {op[:40]!r} is not a reduction name")
    root = None
    if layout.root:
        tok = tokens[3 + layout.redop]
        if not _INT.fullmatch(tok) or len(tok) > 11 or not -1 <= int(tok) <= _INT32_MAX:
            raise BadInput(f"{_where(source, line)}: root {tok[:40]!r} is not a rank number")
        root = int(tok)
    halves = []
    groups = [body[i:i + g] for i in range(0, len(body), g)]
    placements = [True] if len(groups) == 1 else [False, True]  # a lone group is in-place (nccl-tests' null body)
    for in_place, grp in zip(placements, groups):
        t = _number(grp[0], "time", source, line)
        alg = _number(grp[1], "algbw", source, line)
        bus = _number(grp[2], "busbw", source, line)
        check = grp[3]
        wrong = error = None
        if check.upper() != "N/A":
            value = _number(check, "#wrong", source, line)
            kind = layout.check or ("error" if re.search(r"[.eE]", check) else "wrong")
            if kind == "error":
                error = value
            elif value is not None:
                if not 0 <= value <= _INT64_MAX // 2:
                    raise BadInput(f"{_where(source, line)}: #wrong {check[:40]!r} is out of range")
                wrong = int(value)
        h = Half(size, count, dtype, op, root, in_place, t, alg, bus, wrong, error, line=line)
        if layout.per_iter:
            h.tmin = _number(grp[4], "i_min", source, line)
            h.tmax = _number(grp[5], "i_max", source, line)
            h.tp99 = _number(grp[6], "i_p99", source, line)
            _number(grp[7], "i_cv%", source, line)
        halves.append(h)
    return halves


# ---- rows -> records --------------------------------------------------------------------------


@dataclass
class Parsed:
    records: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failed: bool = False  # a data check failed (#wrong > 0, or "Out of bounds values : N FAILED")
    lines: int = 0
    skipped: dict = field(default_factory=dict)  # reason -> halves not kept
    fmt: str = "text"
    json_path: str | None = None  # "Writing JSON output to ..." seen
    transport: str | None = None


class RecordBuilder:
    """Turns halves into commbench rows: the run's columns, the stream's topology, repetitions."""

    def __init__(self, run: dict, collective: str | None, hint: str | None, source: str):
        self.run = run
        if collective is not None:
            collective = _canonical(collective) or _fail_collective(collective)
        self.collective = collective  # --collective: wins over everything
        self.hint = hint  # from the file or binary name: used when the output does not say
        self.source = source
        self.reps: collections.Counter = collections.Counter()
        self.skipped: collections.Counter = collections.Counter()  # reason -> halves not kept
        self.transport: str | None = None

    def collective_for(self, stream: Stream, line: int) -> str:
        name = self.collective or collective_from_program(stream.program) or self.hint
        if name is None:
            raise BadInput(f"{_where(self.source, line)}: cannot tell which collective this output measured "
                           "(no 'Collective test starting' line, no collective in the file name): pass "
                           "--collective, e.g. --collective all_reduce")
        return name

    def record(self, h: Half, stream: Stream) -> dict | None:
        """The row of one half, or None for halves commbench does not keep (counted in `skipped`)."""
        if h.size == 0:
            self.skipped["of size 0"] += 1
            return None
        if h.time is None or not math.isfinite(h.time) or h.time <= 0:
            self.skipped["without a time"] += 1
            return None
        coll = self.collective_for(stream, h.line)
        world = stream.world()
        hosts, nnodes, per_node, device_name = stream.topology()
        dtype, op = _dtype_name(h.dtype), _op_name(h.op)
        root = h.root if h.root is not None else (None if _rooted(coll) else -1)
        key = (coll, dtype, op, root, h.size, h.in_place)
        rep = self.reps[key]
        self.reps[key] += 1
        t = h.time
        alg, bus = h.algbw, h.busbw
        if not alg:
            alg = h.size / t / 1e3  # printed 0.00 (below the print precision) or nan: S/t
        factor = bus_factor(coll, world)
        if not bus and factor is not None:
            bus = alg * factor
        return {
            **self.run,
            "collective": coll, "dtype": dtype, "op": op, "root": root,
            "size_bytes": h.size, "count": h.count, "in_place": h.in_place,
            "world_size": world, "nnodes": nnodes, "ranks_per_node": per_node,
            "device_name": device_name,
            "iters": h.iters if h.iters is not None else stream.iters,
            "warmup": stream.warmup, "repetition": rep,
            "time_us": t,
            "time_us_min": h.tmin if h.tmin is not None else t,
            "time_us_max": h.tmax if h.tmax is not None else t,
            "time_us_p99": h.tp99 if h.tp99 is not None else t,
            "algbw_GBps": alg, "busbw_GBps": bus, "wrong": h.wrong, "check_error": h.error,
            "samples_us": h.samples if h.samples else [t],
            "hosts": hosts, "nccl_version": stream.nccl_version or self.run.get("nccl_version"),
            "transport": self.transport,
            "plan": json.dumps({**json.loads(self.run.get("plan") or "{}"),
                                "program": stream.program, "nccl_tests_version": stream.tests_version,
                                "time_column": stream.layout.time_name if stream.layout else "time",
                                "agg_iters": stream.agg_iters, "nthread": stream.nthread, "ngpus": stream.ngpus,
                                "validation": stream.validation, "line": h.line}, sort_keys=True),
        }


class TextParser:
    """nccl-tests text output, one line at a time (for logs and for a live run)."""

    def __init__(self, source: str, builder: RecordBuilder):
        self.source = source
        self.builder = builder
        self.streams: dict[object, Stream] = {}
        self.info = TransportCollector()
        self.parsed = Parsed()
        self.busbw_printed_nonzero = False
        self.algbw_printed_nonzero = False
        self.rows_without_ranks = False
        self.last_line = 0

    def _stream(self, key: object) -> Stream:
        if key not in self.streams:
            self.streams[key] = Stream()
        return self.streams[key]

    def feed(self, raw: str, lineno: int, final: bool = False) -> list[dict]:
        """One line of output -> the records it completes (none for most lines)."""
        self.last_line = lineno
        self.parsed.lines = lineno
        line = _ANSI.sub("", raw.rstrip("\r\n")).replace("\r", "")
        key: object = None
        if m := _TAG.match(line):
            key, line = (m.group(1), m.group(2)), line[m.end():]
        elif m := _SRUN_LABEL.match(line):
            key, line = m.group(1), line[m.end():]
        if not line.strip():
            return []
        if "NCCL INFO" in line or "NCCL WARN" in line or "NCCL TRACE" in line or "NCCL version" in line:
            self.info.feed(line)
            return []
        s = self._stream(key)
        stripped = line.strip()
        hashed = stripped.startswith("#")
        content = stripped.lstrip("#").strip()
        if not content:
            return []

        if m := _VERSION.match(content):
            self._section_line(s, "version")
            s.tests_version = m.group(1)
            s.nccl_version = nccl_version_string(m.group(3) or m.group(2)) or s.nccl_version
            return []
        if m := _STARTING.match(content):
            self._section_line(s, "starting")
            s.program = m.group(1)
            return []
        if m := _NTHREAD.match(content):
            self._section_line(s, "nthread")
            s.headers += 1
            s.nthread, s.ngpus = int(m.group(1)), int(m.group(2))
            if it := _ITERS.search(content):
                s.warmup, s.iters = int(it.group(1)), int(it.group(2))
            if agg := _AGG.search(content):
                s.agg_iters = int(agg.group(1))
            if val := _VALIDATION.search(content):
                s.validation = int(val.group(1))
            return []
        if m := _RANK.match(content):
            if s.rows:
                s.new_section()
            r = int(m.group(1))
            if r in s.ranks:
                s.dup_rank = True
            else:
                s.ranks[r] = RankInfo(r, m.group(4), int(m.group(3)), int(m.group(5)), m.group(7) or "")
            return []
        if m := _OOB.match(content):
            if (m.group(2) == "FAILED") or int(m.group(1)) > 0:
                self.parsed.failed = True
            return []
        if m := _JSON_OUT.match(content):
            self.parsed.json_path = m.group(1)
            return []
        if _CONCLUDED.match(content):
            return []
        layout = header_layout(content.split(), self.source, lineno)
        if layout is not None:
            s.layout = layout
            return []
        if hashed or not _ROWLIKE.match(content):
            return []  # banners, units, warnings, anything else: not ours
        halves = parse_row(content, s.layout, self.source, lineno, final=final)
        s.rows += 1
        out = []
        for h in halves:
            if h.busbw:
                self.busbw_printed_nonzero = True
            if h.algbw:
                self.algbw_printed_nonzero = True
            if h.wrong:
                self.parsed.failed = True
            if not s.ranks:
                self.rows_without_ranks = True
            rec = self.builder.record(h, s)
            if rec is not None:
                out.append(rec)
        self.parsed.records.extend(out)
        return out

    def _section_line(self, s: Stream, kind: str) -> None:
        if s.rows:
            s.new_section()
        elif kind in s.seen and kind != "nthread":
            s.headers = max(s.headers, 2)
        s.seen.add(kind)

    def single_rank_symptom(self) -> bool:
        several = any(s.several_processes for s in self.streams.values())
        headed = [s for s in self.streams.values() if s.headers]
        if len(headed) > 1 and all(s.world() == 1 or s.several_processes for s in headed):
            several = True  # mpirun --tag-output: each tagged process printed its own header
        zero_busbw = bool(self.parsed.records) and not self.busbw_printed_nonzero and self.algbw_printed_nonzero
        return several or (zero_busbw and self.rows_without_ranks)

    def close(self, strict: bool = True) -> Parsed:
        p = self.parsed
        p.transport = self.info.transport
        p.skipped = dict(self.builder.skipped)
        for rec in p.records:
            if rec.get("nccl_version") is None:
                rec["nccl_version"] = self.info.nccl_version
            rec["transport"] = p.transport
        symptom = self.single_rank_symptom()
        if not p.records and strict:
            extra = ""
            if p.skipped:
                extra = f" (only rows {', '.join(p.skipped)}, which commbench does not keep)"
            elif symptom:
                extra = f"; {SINGLE_RANK_HINT}"
            elif any(s.headers for s in self.streams.values()):
                extra = " after the header: the run stopped before its first size"
            raise BadInput(f"{_where(self.source, self.last_line)}: no nccl-tests result rows in the file "
                           f"(it ends here){extra}")
        _finalize(p.records)
        if symptom:
            p.warnings.append(SINGLE_RANK_HINT)
        if p.failed:
            p.warnings.append("the data check failed (#wrong > 0 or 'Out of bounds values ... FAILED'): "
                              "these results are wrong")
        return p


def _finalize(records: list[dict]) -> None:
    """World size where the output did not say (no Rank lines): from busbw/algbw, then the
    bandwidths printed as 0.00 recomputed with it."""
    by_coll: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        if r["world_size"] is None:
            by_coll[r["collective"]].append(r)
    for coll, rows in by_coll.items():
        n = _infer_world(coll, rows)
        if n is None:
            continue
        for r in rows:
            r["world_size"] = n
            if n == 1:
                r["nnodes"], r["ranks_per_node"] = 1, 1
            factor = bus_factor(coll, n)
            if factor and r["busbw_GBps"] == 0.0 and r["algbw_GBps"]:
                r["busbw_GBps"] = r["algbw_GBps"] * factor


def _infer_world(coll: str, rows: list[dict]) -> int | None:
    """busbw/algbw is the bus factor of n ranks: 0 for one rank, 2(n-1)/n for all_reduce, (n-1)/n
    for the gather/scatter family. Every row with a printed algbw of 1 GB/s or more must agree,
    within the print precision (2 decimals), on exactly one n; otherwise the answer is unknown."""
    if bus_factor(coll, 2) is None or bus_factor(coll, 2) == bus_factor(coll, 3):
        return None  # a constant factor (broadcast, reduce, sendrecv) says nothing about n
    factors = {n: bus_factor(coll, n) for n in range(1, 4097)}
    candidates: set[int] | None = None
    for r in rows:
        alg, bus = r["algbw_GBps"], r["busbw_GBps"]
        if alg is None or bus is None or not alg >= 1.0:
            continue
        ratio = bus / alg
        tol = 0.006 * (1 + ratio) / alg  # both printed to +-0.005
        fits = {n for n, f in factors.items() if abs(f - ratio) <= tol}
        candidates = fits if candidates is None else candidates & fits
    if candidates is not None and len(candidates) == 1:
        return candidates.pop()
    return None


# ---- JSON (-J) --------------------------------------------------------------------------------


def _jnum(value, what: str, source: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadInput(f"{source}: JSON {what} is {value!r}, not a number")
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        v = float(value.strip())  # nccl-tests writes NaN as "nan"
    else:
        raise BadInput(f"{source}: JSON {what} is {str(value)[:40]!r}, not a number")
    return None if math.isnan(v) else v


def _jint(value, what: str, source: str, lo: int = 0, hi: int = _INT64_MAX) -> int:
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        value = int(value.strip())  # root is written as a padded string, e.g. "    -1"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadInput(f"{source}: JSON {what} is {str(value)[:40]!r}, not a whole number in {lo}..{hi}")
    return value


def _jbool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _local_time(text) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S").astimezone(dt.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


def parse_json_document(text: str, source: str, builder: RecordBuilder) -> Parsed:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{_where(source, exc.lineno)}: not valid JSON ({exc.msg}): a -J file cut short "
                       "(the run died before nccl-tests closed it)?") from None
    except RecursionError:
        raise BadInput(f"{source}: JSON nested too deeply: not an nccl-tests -J file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise BadInput(f"{_where(source, 1)}: a JSON document without a 'results' list: not an nccl-tests -J file")
    s = Stream()
    s.nccl_version = nccl_version_string(doc.get("nccl_version"))
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        s.program = os.path.basename(args[0])
    cfg = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    for attr, name in (("nthread", "nthreads"), ("ngpus", "ngpus"), ("warmup", "warmup_iters"),
                       ("iters", "iterations"), ("agg_iters", "aggregated_iterations"), ("validation", "validation")):
        if cfg.get(name) is not None:
            setattr(s, attr, _jint(cfg[name], f"config.{name}", source, 0, _INT32_MAX))
    devices = cfg.get("devices") or []
    if not isinstance(devices, list):
        raise BadInput(f"{source}: JSON config.devices is not a list")
    for i, d in enumerate(devices):
        if not isinstance(d, dict):
            raise BadInput(f"{source}: JSON config.devices[{i}] is not an object")
        r = _jint(d.get("rank"), f"config.devices[{i}].rank", source, 0, _INT32_MAX)
        if r in s.ranks:
            s.dup_rank = True
        s.ranks[r] = RankInfo(r, str(d.get("hostname") or "?"), None, None, str(d.get("device_info") or ""))
    parsed = Parsed(fmt="json")
    failed = False
    for i, row in enumerate(doc["results"]):
        where = f"results[{i}]"
        if not isinstance(row, dict):
            raise BadInput(f"{source}: JSON {where} is not an object")
        size = _jint(row.get("size"), f"{where}.size", source)
        count = _jint(row.get("count"), f"{where}.count", source)
        dtype = row.get("type")
        if not isinstance(dtype, str) or not _IDENT.fullmatch(dtype.strip()):
            raise BadInput(f"{source}: JSON {where}.type is {str(dtype)[:40]!r}, not a data type name")
        op = row.get("redop")
        if op is not None and (not isinstance(op, str) or not _IDENT.fullmatch(op.strip())):
            raise BadInput(f"{source}: JSON {where}.redop is {str(op)[:40]!r}, not a reduction name")
        root = _jint(row["root"], f"{where}.root", source, -1, _INT32_MAX) if row.get("root") is not None else None
        iters = row.get("actual_iterations")
        iters = _jint(iters, f"{where}.actual_iterations", source, 0, _INT32_MAX) if iters is not None else None
        for in_place, name in ((False, "out_of_place"), (True, "in_place")):
            body = row.get(name)
            if body is None:
                continue
            if not isinstance(body, dict):
                raise BadInput(f"{source}: JSON {where}.{name} is not an object")
            t = _jnum(body.get("time", body.get("cpu_time")), f"{where}.{name}.time", source)
            nwrong = _jnum(body.get("nwrong"), f"{where}.{name}.nwrong", source)
            if nwrong is not None and not 0 <= nwrong <= _INT64_MAX // 2:
                raise BadInput(f"{source}: JSON {where}.{name}.nwrong {nwrong} is out of range")
            h = Half(size, count, dtype.strip(), op.strip() if isinstance(op, str) else None, root, in_place, t,
                     _jnum(body.get("alg_bw"), f"{where}.{name}.alg_bw", source),
                     _jnum(body.get("bus_bw"), f"{where}.{name}.bus_bw", source),
                     int(nwrong) if nwrong is not None else None, iters=iters, line=i)
            per = row.get(f"{name}_per_iter")
            if isinstance(per, dict):
                h.tmin = _jnum(per.get("min_us"), f"{where}.{name}_per_iter.min_us", source)
                h.tmax = _jnum(per.get("max_us"), f"{where}.{name}_per_iter.max_us", source)
                h.tp99 = _jnum(per.get("p99_us"), f"{where}.{name}_per_iter.p99_us", source)
                times = per.get("times_us")
                if isinstance(times, list):
                    vals = [_jnum(v, f"{where}.{name}_per_iter.times_us", source) for v in times]
                    h.samples = [v for v in vals if v is not None] or None
            if h.wrong:
                failed = True
            rec = builder.record(h, s)
            if rec is not None:
                parsed.records.append(rec)
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and (_jbool(oob.get("okay")) is False or (isinstance(oob.get("count"), int)
                                                                       and oob["count"] > 0)):
        failed = True
    parsed.failed = failed
    parsed.skipped = dict(builder.skipped)
    if not parsed.records:
        raise BadInput(f"{_where(source, 1)}: the JSON document holds no result rows"
                       + (f" (only rows {', '.join(parsed.skipped)})" if parsed.skipped else ""))
    _finalize(parsed.records)
    if s.several_processes:
        parsed.warnings.append(SINGLE_RANK_HINT)
    if failed:
        parsed.warnings.append("the data check failed (nwrong > 0 or out_of_bounds not okay): these results "
                               "are wrong")
    return parsed


def json_started_at(text: str) -> dt.datetime | None:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return _local_time(doc.get("start_time")) if isinstance(doc, dict) else None


def json_env(text: str) -> dict[str, str]:
    from commbench.net.envinfo import env_snapshot

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    env = doc.get("env") if isinstance(doc, dict) else None
    pairs = {}
    for item in env if isinstance(env, list) else []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            pairs[k] = v
    return env_snapshot(pairs)


# ---- importing files --------------------------------------------------------------------------


def _decode(data: bytes, source: str) -> str:
    """Text, or BadInput naming the first line that is binary junk."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise BadInput(f"{_where(source, line)}: binary data (NUL byte): not an nccl-tests log")
    text = data.decode("utf-8", errors="replace")
    bad = [i for i, ch in enumerate(text) if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\f\x1b")]
    if bad and len(bad) > max(8, len(text) // 100):
        line = text.count("\n", 0, bad[0]) + 1
        raise BadInput(f"{_where(source, line)}: binary data "
                       f"({len(bad)} bytes that are not text): not an nccl-tests log")
    return text


def base_columns(run_id: str, label: str, started_at: dt.datetime, env: dict, plan: dict) -> dict:
    from commbench.core.results import SCHEMA_VERSION

    return {
        "run_id": run_id, "label": label, "started_at": started_at,
        "backend": "nccl", "device": "cuda", "launcher": LAUNCHER, "workload": WORKLOAD,
        "bucket_bytes": None, "zero_stage": None, "mtu": None, "iface": None, "link_layer": None,
        "commbench_version": commbench.__version__, "torch_version": None, "nccl_version": None,
        "env": json.dumps(env, sort_keys=True), "net": "{}", "plan": json.dumps(plan, sort_keys=True),
        "schema_version": SCHEMA_VERSION,
    }


def parse_text(text: str, source: str, builder: RecordBuilder, strict: bool = True) -> Parsed:
    parser = TextParser(source, builder)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    for i, raw in enumerate(lines, 1):
        parser.feed(raw, i, final=(i == len(lines) and not text.endswith("\n")))
    return parser.close(strict=strict)


_LOG_FILE = InputMessages(missing="{name} does not exist: pass an nccl-tests log file",
                          folder="{name} is a folder: pass nccl-tests log files", unreadable="cannot read {name}: {error}")


def parse_file(path: str | os.PathLike, run_id: str, label: str = "", collective: str | None = None) -> Parsed:
    """One nccl-tests log (text or -J JSON) -> commbench rows; BadInput naming the file and line."""
    p = Path(path)
    source = str(path)
    text = _decode(read_bytes(p, _LOG_FILE), source)
    is_json = text.lstrip().startswith("{")
    try:
        mtime = dt.datetime.fromtimestamp(p.stat().st_mtime, dt.timezone.utc)
    except (OSError, OverflowError, ValueError):
        mtime = dt.datetime.now(dt.timezone.utc)
    if is_json:
        started = json_started_at(text) or mtime
        env = json_env(text)
    else:
        stamp = _STAMP.search(text)
        started = (_local_time(f"{stamp.group(1)} {stamp.group(2)}") if stamp else None) or mtime
        env = {}
    plan = {"source": "import", "file": p.name, "format": "json" if is_json else "text"}
    builder = RecordBuilder(base_columns(run_id, label, started, env, plan), collective,
                            collective_from_filename(p.name), source)
    if is_json:
        return parse_json_document(text, source, builder)
    return parse_text(text, source, builder)


def _fail_collective(name: str) -> str:
    raise BadInput(f"unknown --collective {name!r}: use a commbench or nccl-tests name, e.g. all_reduce, "
                   "all_gather, alltoall, broadcast")


def describe(p: Parsed) -> str:
    from commbench.core.units import format_size

    recs = p.records
    colls = sorted({f"{r['collective']} {r['dtype']}" for r in recs})
    worlds = sorted({r["world_size"] for r in recs if r["world_size"] is not None})
    hosts = {h for r in recs for h in (r["hosts"] or [])}
    sizes = [r["size_bytes"] for r in recs]
    parts = [", ".join(colls),
             f"{format_size(min(sizes))}..{format_size(max(sizes))}" if sizes else "",
             (f"{'/'.join(map(str, worlds))} ranks" if worlds else "ranks unknown")
             + (f" on {len(hosts)} host(s)" if hosts else ""),
             f"NCCL {recs[0]['nccl_version']}" if recs and recs[0]["nccl_version"] else "",
             f"transport {p.transport}" if p.transport else ""]
    for reason, n in p.skipped.items():
        parts.append(f"{n} half-rows {reason} skipped")
    return "; ".join(x for x in parts if x)


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
    return EXIT_BAD_RESULT if any(p.failed for _, p in parsed) else EXIT_OK


# ---- running a binary -------------------------------------------------------------------------


def supports_json(binary: str, timeout: float = 15.0) -> bool:
    """nccl-tests >= 2.17.3 lists -J (--output_file) in its usage text."""
    try:
        proc = subprocess.Popen([binary, "-h"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc, 0.5)
        return False
    finally:
        _kill_group(proc, 0)
    text = out.decode("utf-8", errors="replace")
    return bool(re.search(r"-J,\s*--output_file|--output_file\s*<file>.*json", text))


def _user_json_path(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a in ("-J", "--output_file") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--output_file="):
            return a.split("=", 1)[1]
        if a.startswith("-J") and len(a) > 2:
            return a[2:]
    return None


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds; nothing left behind."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid  # the leader is gone (reaped); its group may still have members
    for sig in ((signal.SIGTERM, signal.SIGKILL) if grace > 0 else (signal.SIGKILL,)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        if sig == signal.SIGTERM:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class _Terminated(BaseException):
    pass


def _raise_terminated(signum, frame):
    raise _Terminated()


def _reader(stream, sink: "queue.Queue[bytes | None]") -> None:
    try:
        for chunk in iter(stream.readline, b""):
            sink.put(chunk)
    except (OSError, ValueError):
        pass
    finally:
        sink.put(None)


def build_argv(binary: str, args: list[str], launcher: str, np_: int | None, launcher_args: list[str]) -> list[str]:
    if launcher == "none":
        if np_ not in (None, 1):
            raise BadInput("--np starts several processes and needs --launcher mpirun or srun; with "
                           "--launcher none use nccl-tests' own -g/-t for several GPUs")
        return [binary, *args]
    exe = shutil.which(launcher)
    if exe is None:
        raise BadInput(f"--launcher {launcher}: {launcher} is not on PATH here")
    if launcher == "mpirun":
        return [exe, *(["-np", str(np_)] if np_ else []), *launcher_args, binary, *args]
    return [exe, *(["--ntasks", str(np_)] if np_ else []), *launcher_args, binary, *args]


def run_binary(binary: str, args: list[str], *, launcher: str = "none", np_: int | None = None,
               launcher_args: list[str] | None = None, timeout: float | None = None, out: str = "results",
               label: str = "", collective: str | None = None, use_json: bool = True,
               echo: Callable[[str], None] | None = None, say: Callable[[str], None] | None = None) -> int:
    """Run an nccl-tests binary; stream and parse its output into a results file. Exit code."""
    from commbench.net.envinfo import env_snapshot
    from commbench.core.results import ResultWriter, make_run_id, resolve_out

    echo = echo or (lambda line: (sys.stdout.write(line), sys.stdout.flush()))
    say = say or (lambda m: print(f"commbench: {m}", file=sys.stderr, flush=True))
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise BadInput(f"--timeout {timeout} must be more than 0 seconds")
    if np_ is not None and np_ < 1:
        raise BadInput(f"--np {np_} must be at least 1")
    path = binary if os.sep in binary else (shutil.which(binary) or binary)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BadInput(f"{binary} is not an executable file: pass the path of an nccl-tests binary, "
                       "e.g. ./build/all_reduce_perf")
    if collective is not None:
        collective = _canonical(collective) or _fail_collective(collective)  # before anything starts
    hint = collective_from_program(path) or collective_from_filename(path)
    if collective is None and hint is None:
        raise BadInput(f"cannot tell which collective {os.path.basename(path)} measures: pass --collective")
    args = list(args)
    build_argv(path, args, launcher, np_, list(launcher_args or []))  # usage errors before anything starts
    json_path = _user_json_path(args)
    ask_json = json_path is None and use_json and supports_json(path)

    run_id = make_run_id()
    target = resolve_out(out, run_id)
    writer = ResultWriter(target)
    writer.create()
    if ask_json:  # beside the results: kept as evidence, and on the shared folder rank 0 can reach
        json_path = str(target.with_suffix(".json"))
        args += ["-J", json_path]
    argv = build_argv(path, args, launcher, np_, list(launcher_args or []))
    stdbuf = shutil.which("stdbuf")
    if stdbuf:  # glibc stdio buffers a pipe in blocks: ask for lines so rows arrive as they are printed
        argv = [stdbuf, "-oL", "-eL", *argv]
    started = dt.datetime.now(dt.timezone.utc)
    plan = {"source": "run", "argv": argv, "launcher": launcher, "np": np_, "timeout": timeout}
    builder = RecordBuilder(base_columns(run_id, label, started, env_snapshot(), plan), collective, hint, binary)
    parser = TextParser(binary, builder)
    log_path = target.with_suffix(".log")
    try:
        log = open(log_path, "x", encoding="utf-8")
    except OSError:
        log = None

    say(f"running {' '.join(argv)} -> {target}")
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError as exc:
        raise RuntimeFailure(f"cannot start {argv[0]}: {exc.strerror or exc}") from None

    lines: "queue.Queue[bytes | None]" = queue.Queue()
    tail: collections.deque[str] = collections.deque(maxlen=20)
    err_done = threading.Event()
    log_lock = threading.Lock()

    def to_log(text: str) -> None:
        with log_lock:
            if log is not None and not log.closed:
                log.write(text)

    def pump_stderr() -> None:
        try:
            for chunk in iter(proc.stderr.readline, b""):
                text = chunk.decode("utf-8", errors="replace")
                tail.append(text.rstrip("\n"))
                sys.stderr.write(text)
                sys.stderr.flush()
                to_log(text)
        except (OSError, ValueError):
            pass
        finally:
            err_done.set()

    threads = [threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True),
               threading.Thread(target=pump_stderr, daemon=True)]
    for t in threads:
        t.start()

    deadline = time.monotonic() + timeout if timeout else None
    timed_out = False
    interrupted: int | None = None
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main_thread else None
    lineno = 0
    pending: str | None = None
    try:
        while True:
            wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
            try:
                chunk = lines.get(timeout=wait)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    break
                continue
            if chunk is None:
                break
            text = chunk.decode("utf-8", errors="replace")
            echo(text)
            to_log(text)
            if not text.endswith("\n"):
                pending = text  # a last line without its newline: parsed after the end
                continue
            lineno += 1
            try:
                new = parser.feed(text, lineno)
            except BadInput as exc:
                say(f"warning: {exc} (line skipped)")
                continue
            if new:
                writer.append(new)
    except KeyboardInterrupt:
        interrupted = EXIT_SIGINT
    except _Terminated:
        interrupted = EXIT_SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if not timed_out and interrupted is None:
            try:  # stdout is closed; the process should end now (or by the deadline)
                proc.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
            except KeyboardInterrupt:
                interrupted = EXIT_SIGINT
        if timed_out or interrupted is not None:
            _kill_group(proc, 5.0)
        _kill_group(proc, 0)  # anything the binary left behind in its group
        err_done.wait(timeout=5)
        # whatever was printed before the end
        while True:
            try:
                chunk = lines.get(timeout=0.5)
            except queue.Empty:
                break
            if chunk is None:
                break
            text = chunk.decode("utf-8", errors="replace")
            echo(text)
            to_log(text)
            lineno += 1
            try:
                new = parser.feed(text, lineno)
            except BadInput:
                new = []
            if new:
                writer.append(new)
        if log is not None:
            with log_lock:
                log.close()

    if pending is not None:
        lineno += 1
        try:
            new = parser.feed(pending, lineno)
            if new:
                writer.append(new)
        except BadInput:
            say(f"warning: the last line ({pending.strip()[:60]!r}) was cut short and is not kept")

    parsed = parser.close(strict=False)
    source_note = "text output"
    jp = parsed.json_path or json_path  # nccl-tests says where it wrote (it never overwrites: X.0, X.1, ...)
    ended_well = not timed_out and interrupted is None and proc.returncode == 0
    if ended_well and jp and os.path.isfile(jp):
        try:
            if _use_json(jp, parsed, builder, collective, hint):
                source_note = "-J JSON"
            else:
                say(f"warning: the -J JSON {jp} holds fewer rows than the text output: keeping the text rows")
        except BadInput as exc:
            say(f"warning: the -J JSON could not be used ({exc}); keeping the rows parsed from the text output")
    elif ended_well and json_path:
        say(f"warning: no -J JSON file at {json_path} (did rank 0 run on another node?): rows from the text output")
    writer.rows = list(parsed.records)
    writer.append([])
    for w in parsed.warnings:
        say(f"warning: {w}")

    rc = proc.returncode
    kept = f"{len(writer.rows)} rows kept in {target}"
    if interrupted is not None:
        say(f"interrupted: {binary} stopped; {kept}")
        return interrupted
    if timed_out:
        _show_tail(say, tail)
        say(f"{os.path.basename(binary)} timed out after {timeout:g} s: its process group was killed; {kept}")
        return EXIT_RUNTIME
    if rc != 0:
        _show_tail(say, tail)
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else f"exit code {rc}"
        if parsed.failed:
            say(f"{os.path.basename(binary)} ended with {how}: its data check failed (wrong results); {kept}")
            return EXIT_BAD_RESULT
        say(f"{os.path.basename(binary)} ended with {how}; {kept}")
        return EXIT_RUNTIME
    if not writer.rows:
        _show_tail(say, tail)
        say(f"{os.path.basename(binary)} printed no result rows commbench could read; the output is in {log_path}")
        return EXIT_RUNTIME
    if parsed.failed:
        say(f"the data check failed (wrong results); {kept}")
        return EXIT_BAD_RESULT
    print(f"nccl-tests: {len(writer.rows)} rows from the {source_note} ({describe(parsed)}) -> {target}")
    return EXIT_OK


def _use_json(path: str, parsed: Parsed, builder: RecordBuilder, collective: str | None, hint: str | None) -> bool:
    """Replace the text rows with the -J JSON's (more digits, per-iteration times) if it holds them all."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    jb = RecordBuilder(builder.run, collective, hint, path)
    jparsed = parse_json_document(text, path, jb)
    text0 = parsed.records[0] if parsed.records else {}
    for rec in jparsed.records:
        if not rec["hosts"] and text0.get("hosts"):  # a JSON without config.devices: the Rank lines
            for col in ("world_size", "nnodes", "ranks_per_node", "hosts", "device_name"):
                rec[col] = text0[col]
        rec["transport"] = parsed.transport
        rec["nccl_version"] = rec["nccl_version"] or text0.get("nccl_version")
    if len(jparsed.records) < len(parsed.records):
        return False
    parsed.records[:] = jparsed.records
    parsed.failed = parsed.failed or jparsed.failed
    return True


def _show_tail(say: Callable[[str], None], tail: Iterable[str]) -> None:
    lines = [t for t in tail if t.strip()]
    if not lines:
        say("(nothing on stderr)")
        return
    say("last lines on stderr:")
    for t in lines:
        print(f"  | {t}", file=sys.stderr)
