"""nccl-tests text output -> halves -> rows, one line at a time (a log, or a live run's stdout), in
every shape met in the field.

The shapes (tests/data/nccl-tests/README.md, docs/NCCL_TESTS.md): mpirun --tag-output
MPICH's -prepend-rank and srun --label prefixes, -S timestamps, -I per-iteration columns, several
headers, logs pasted without '#' or without a column header, and NCCL's own debug lines
(NCCL_DEBUG=INFO) on the same stdout: the transport (net/ncclinfo.py) and, with TUNING in
NCCL_DEBUG_SUBSYS, the algorithm and protocol per size (net/nccltuning.py) are read from them.

nccl-tests prints a row in three pieces (src/util.cu: the size..root fields, then each half's
results after it ran, then the newline), so NCCL's lines for a size land inside its row:

    [0]       131072         32768     float     sum      -1[0] host:497888:497888 [0] NCCL INFO 131072 Bytes -> ...
    [0] host:497888:497888 [0] NCCL INFO 131072 Bytes -> Algo 0 proto 1 time 51.603912
    [0]     345.6    0.19    0.36      0[0] host:497888:497888 [0] NCCL INFO 131072 Bytes -> ...
    [0]     341.2    0.19    0.36      0

The pieces before a debug line are put back together into the row; a row that cannot be (its
start never seen, or pieces that do not add up) is skipped and counted, never an error."""

from __future__ import annotations

import math
import re

from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.format import (IDENT, INT, INT32_MAX, INT64_MAX, NUMBER, SINGLE_RANK_HINT,
                                                      STAMP, nccl_version_string, version_problem, where)
from commbench.integrations.nccl_tests.arith import half_unit
from commbench.integrations.nccl_tests.model import Half, Layout, RankInfo, Stream
from commbench.integrations.nccl_tests.records import Parsed, RecordBuilder
from commbench.net.ncclinfo import TransportCollector
from commbench.net.nccltuning import TuningCollector

# ---- line shapes ------------------------------------------------------------------------------

_TAG = re.compile(r"^\[([0-9]+),([0-9]+)\]<(stdout|stderr|stddiag)>:[ \t]?", re.ASCII)  # mpirun --tag-output
_SRUN_LABEL = re.compile(r"^[ \t]{0,8}([0-9]{1,7}): ", re.ASCII)  # srun --label
_MPICH_RANK = re.compile(r"^\[([0-9]{1,7})\] ", re.ASCII)  # mpiexec -prepend-rank (MPICH, Hydra)
# NCCL's debug line (src/debug.cc): "host:pid:tid [dev] NCCL INFO ..."; the host may be glued to a row piece.
_NCCL_HEAD = re.compile(r"(\S*):[0-9]+:[0-9]+ \[[0-9]+\] $", re.ASCII)  # searched just before "NCCL INFO"
_GLUED_TAG = re.compile(r"\[[0-9]{1,7}\]\s*$", re.ASCII)  # the launcher's rank tag before a glued debug line
_LEADING_NUMBER = re.compile(r"(?:-?[0-9]+(?:\.[0-9]+)?|N/A)(?=[A-Za-z])", re.ASCII)
_CUT = "cut apart by NCCL debug lines"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_VERSION = re.compile(r"^nccl-tests version\s+(\S+)(?:\s+nccl-headers=([0-9]+))?(?:\s+nccl-library=([0-9]+))?",
                      re.ASCII)
_STARTING = re.compile(r"^Collective test starting:\s*(\S+)", re.ASCII)
_CONCLUDED = re.compile(r"^Collective test concluded:", re.ASCII)
_NTHREAD = re.compile(r"^nThread\s+([0-9]+)\s+nGpus\s+([0-9]+)", re.ASCII)
_ITERS = re.compile(r"warmup iters:\s*([0-9]+)\s+iters:\s*([0-9]+)", re.ASCII)
_AGG = re.compile(r"agg iters:\s*([0-9]+)", re.ASCII)
_VALIDATION = re.compile(r"validation:\s*([0-9]+)", re.ASCII)
_GRAPH = re.compile(r"graph:\s*([0-9]+)", re.ASCII)
_RANK = re.compile(r"^Rank\s+([0-9]+)\s+(?:Group\s+([0-9]+)\s+)?Pid\s+([0-9]+)\s+on\s+(\S+)\s+device\s+([0-9]+)"
                   r"(?:\s+\[([^\]]*)\])?\s*(.*?)\s*$", re.ASCII)
_OOB = re.compile(r"^Out of bounds values\s*:\s*([0-9]+)\s*(OK|FAILED)?", re.ASCII)
_JSON_OUT = re.compile(r"^Writing JSON output to (.+?)\s*$")
_ROWLIKE = re.compile(r"^\s*[0-9]+\s+[0-9]+\s+[A-Za-z_][A-Za-z0-9_]*(\s|$)", re.ASCII)
_UINT = re.compile(r"[0-9]+", re.ASCII)
# A row whose size or count has a sign or is hexadecimal: nccl-tests prints both with %li, decimal
# digits only (util.cu writeBenchmarkLinePreamble), so this is no row of its own.
_NUM = r"[-+]?(?:0[xX][0-9a-fA-F]+|[0-9]+)"
_SIGNED_ROW = re.compile(rf"^\s*({_NUM})\s+({_NUM})\s+[A-Za-z_][A-Za-z0-9_]*(\s|$)", re.ASCII)
# Characters that show nothing (a byte order mark, zero-width spaces, bidi marks): a row with one
# in it is not read as a row, so one there is named rather than the row passed over.
_INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")
# _ROWLIKE with any script's digits (Unicode \d: '１０２４', '१०२४'): a line nccl-tests did not print as it is.
_ROWLIKE_ANY = re.compile(r"^\s*\d+\s+\d+\s+[^\W\d]\w*(\s|$)")

_CHECK_NAMES = {"#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error"}
_TIME_NAMES = {"time", "cputime"}
_PER_ITER = ["i_min", "i_max", "i_p99", "i_cv%"]
# What nccl-tests prints in the redop column (mulsum: ncclRedOpCreatePreMulSum; none: no reduction).
_PRINTED_OPS = {"sum", "prod", "max", "min", "avg", "mulsum", "none"}


# ---- parsing rows -----------------------------------------------------------------------------


def _number(tok: str, what: str, source: str, line: int) -> float | None:
    """A printed time, bandwidth or check value: a number of 0 or more, or nan (None)."""
    if not NUMBER.fullmatch(tok) or (tok.startswith("-") and tok.lower() != "-nan"):  # glibc prints 0/0 as -nan
        raise BadInput(f"{where(source, line)}: {what} {tok[:40]!r} is not a number of 0 or more: not a "
                       "result row commbench can read")
    v = float(tok)
    return None if math.isnan(v) else v


def _uint(tok: str, what: str, source: str, line: int) -> int:
    if not _UINT.fullmatch(tok) or len(tok) > 19 or int(tok) > INT64_MAX:
        raise BadInput(f"{where(source, line)}: {what} {tok[:40]!r} is not a whole number of bytes/elements")
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
        raise BadInput(f"{where(source, line)}: an nccl-tests column header commbench does not know "
                       f"({' '.join(tokens)[:120]!r}): send the log to the commbench maintainers")
    return Layout(redop=redop, root=root, check=groups[0][1], per_iter=groups[0][2], groups=len(groups),
                  time_name=groups[0][0], line=line)


def _infer_layout(tokens: list[str]) -> Layout | None:
    """A row without a column header before it (pasted or cut logs): the shape from the fields."""
    rest = tokens[3:]
    redop = bool(rest) and rest[0].lower() in _PRINTED_OPS
    if redop:
        rest = rest[1:]
    root = len(rest) % 4 == 1 and bool(INT.fullmatch(rest[0]))
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
    text = STAMP.sub(" ", text)
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
        raise BadInput(f"{where(source, line)}: a result row with {len(tokens)} fields {against}{cut}")
    size = _uint(tokens[0], "size", source, line)
    count = _uint(tokens[1], "count", source, line)
    dtype = tokens[2]
    if not IDENT.fullmatch(dtype):
        raise BadInput(f"{where(source, line)}: type {dtype[:40]!r} is not a data type name")
    op = tokens[3] if layout.redop else None
    if op is not None and not IDENT.fullmatch(op):
        raise BadInput(f"{where(source, line)}: redop {op[:40]!r} is not a reduction name")
    root = None
    if layout.root:
        tok = tokens[3 + layout.redop]
        if not INT.fullmatch(tok) or len(tok) > 11 or not -1 <= int(tok) <= INT32_MAX:
            raise BadInput(f"{where(source, line)}: root {tok[:40]!r} is not a rank number")
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
                if not 0 <= value <= INT64_MAX // 2:
                    raise BadInput(f"{where(source, line)}: #wrong {check[:40]!r} is out of range")
                wrong = int(value)
        h = Half(size, count, dtype, op, root, in_place, t, alg, bus, wrong, error, line=line,
                 alg_unit=half_unit(grp[1]), bus_unit=half_unit(grp[2]), time_unit=half_unit(grp[0]),
                 cputime=layout.time_name == "cputime")
        if layout.per_iter:
            h.tmin = _number(grp[4], "i_min", source, line)
            h.tmax = _number(grp[5], "i_max", source, line)
            h.tp99 = _number(grp[6], "i_p99", source, line)
            _number(grp[7], "i_cv%", source, line)
        halves.append(h)
    return halves


def _unprefixed(raw: str) -> tuple[object, str]:
    """A line without colour codes and carriage returns, and the stream it belongs to: an mpirun
    --tag-output or srun --label prefix is taken off and names it (None: untagged output)."""
    line = _ANSI.sub("", raw.rstrip("\r\n")).replace("\r", "")
    key: object = None
    if m := _TAG.match(line):
        key, line = (m.group(1), m.group(2)), line[m.end():]
    elif m := _SRUN_LABEL.match(line):
        key, line = m.group(1), line[m.end():]
    elif m := _MPICH_RANK.match(line):
        key, line = ("mpich", m.group(1)), line[m.end():]
    return key, line


def _is_debug(line: str) -> bool:
    return "NCCL INFO" in line or "NCCL WARN" in line or "NCCL TRACE" in line or "NCCL version" in line


def _is_tail(content: str) -> bool:
    """The results of a row's half (time, algbw, busbw, #wrong; -I's columns): numbers and N/A only."""
    tokens = content.split()
    return bool(tokens) and all(NUMBER.fullmatch(t) or t.upper() == "N/A" for t in tokens)


def _unglue(token: str, hosts: set[str]) -> int:
    """Where the host name starts in the token before ':pid:tid [dev] NCCL': a row piece printed
    without a newline runs into it ("-1h100clust-worker-1"). A host a Rank line named is
    matched whole; otherwise the host is taken to start at the first letter after a number."""
    for h in sorted(hosts, key=len, reverse=True):
        if h and token.endswith(h):
            return len(token) - len(h)
    m = _LEADING_NUMBER.match(token)
    return m.end() if m else 0


class TextParser:
    """nccl-tests text output, one line at a time (for logs and for a live run)."""

    def __init__(self, source: str, builder: RecordBuilder):
        self.source = source
        self.builder = builder
        self.streams: dict[object, Stream] = {}
        self.info = TransportCollector()
        self.tuning = TuningCollector()
        self.pending: dict[object, str] = {}  # stream -> the pieces of a row cut by NCCL debug lines
        self.parsed = Parsed()
        self.busbw_printed_nonzero = False
        self.algbw_printed_nonzero = False
        self.rows_without_ranks = False
        self.last_line = 0
        self.unreadable: list[int] = []  # lines shaped like a row that nccl-tests cannot have printed

    def _stream(self, key: object) -> Stream:
        if key not in self.streams:
            self.streams[key] = Stream()
        return self.streams[key]

    def feed(self, raw: str, lineno: int, final: bool = False) -> list[dict]:
        """One line of output -> the records it completes (none for most lines)."""
        self.last_line = lineno
        self.parsed.lines = lineno
        key, line = _unprefixed(raw)
        if not line.strip():
            return []
        self._invisible(line, lineno)
        if _is_debug(line):
            self._debug_line(key, line)
            return []
        if key in self.pending:
            joined = self._joined(key, line, lineno, final)
            if joined is not None:
                return joined
        s = self._stream(key)
        stripped = line.strip()
        hashed = stripped.startswith("#")
        content = stripped.lstrip("#").strip()
        if not content or self._section_header(s, content) or self._note(content):
            return []
        layout = header_layout(content.split(), self.source, lineno)
        if layout is not None:
            s.layout = layout
            return []
        if hashed or not _ROWLIKE.match(content):
            if not hashed and _ROWLIKE_ANY.match(content):  # a row's shape in digits nccl-tests never prints
                self.unreadable.append(lineno)
            if not hashed and (m := _SIGNED_ROW.match(content)):
                field, tok = ("size", m.group(1)) if not _UINT.fullmatch(m.group(1)) else ("count", m.group(2))
                raise BadInput(f"{where(self.source, lineno)}: {field} {tok[:40]!r}: a whole number in decimal digits, "
                               "without a sign, was expected (nccl-tests prints it with %li)")
            return []  # banners, units, warnings, anything else: not ours
        return self._row(s, content, lineno, final)

    def _invisible(self, line: str, lineno: int) -> None:
        """BadInput for a character that shows nothing (U+FEFF, a zero-width space, a bidi mark)
        in a line nccl-tests printed (a row, a header line): it prints none, and the line would
        otherwise be passed over without a word. One before the first character of the file (an
        editor's byte order mark) was taken off when it was read."""
        found = _INVISIBLE.search(line)
        if found is None:
            return
        bare = _INVISIBLE.sub("", line).strip()
        content = bare.lstrip("#").strip()
        if _ROWLIKE.match(bare) or _SIGNED_ROW.match(bare) or any(
                r.match(content) for r in (_VERSION, _STARTING, _NTHREAD, _RANK, _OOB)):
            raise BadInput(f"{where(self.source, lineno)}: an invisible character U+{ord(found.group(0)):04X} in a "
                           "line nccl-tests printed: it prints none (two logs joined, one saved by an editor with a "
                           "byte order mark?): import each log as its own file, without it")

    def _debug_line(self, key: object, line: str) -> None:
        """NCCL's part of the line to the collectors; a row piece before it kept for the row."""
        level = min((i for i in (line.find(w) for w in ("NCCL INFO", "NCCL WARN", "NCCL TRACE")) if i >= 0),
                    default=0)
        # A window before the level word: a host name is at most 255 bytes, and a long line
        # without spaces must not make the search quadratic.
        head = _NCCL_HEAD.search(line, max(0, level - 300), level) if level > 0 else None
        start = 0
        if head is not None:
            start = head.start()
            if line[:start].strip():
                hosts = {r.host for r in self._stream(key).ranks.values()}
                start += _unglue(head.group(1), hosts)
        self.info.feed(line[start:])
        self.tuning.feed(line[start:])
        piece = _GLUED_TAG.sub("", line[:start]).strip()
        if not piece:
            return
        if _ROWLIKE.match(piece):
            if key in self.pending:
                self._cut(key)
            self.pending[key] = piece
        elif key in self.pending and _is_tail(piece):
            self.pending[key] += " " + piece

    def _joined(self, key: object, line: str, lineno: int, final: bool) -> list[dict] | None:
        """A plain line after row pieces: the row's last piece (its records), or None when it is not
        one (the pieces are dropped and the line read as usual)."""
        content = line.strip()
        if not _is_tail(content):
            self._cut(key)
            return None
        text = self.pending.pop(key) + " " + content
        try:
            return self._row(self._stream(key), text, lineno, final)
        except BadInput:
            self._count_cut(key)
            return []

    def _cut(self, key: object) -> None:
        self.pending.pop(key, None)
        self._count_cut(key)

    def _count_cut(self, key: object) -> None:
        layout = self._stream(key).layout
        self.builder.skipped[_CUT] += layout.groups if layout else 1

    def _count(self, tok: str, what: str) -> int:
        """A count of the header (nThread, nGpus, iterations): nccl-tests reads each into a C int."""
        if len(tok) > 10 or int(tok) > INT32_MAX:
            raise BadInput(f"{where(self.source, self.last_line)}: {what} {tok[:40]!r} is more than nccl-tests "
                           "can run (a C int): not a log nccl-tests wrote")
        return int(tok)

    def _section_header(self, s: Stream, content: str) -> bool:
        """A line of the header nccl-tests prints before its table (version, test name, nThread,
        Rank): what it says is kept in the stream, and a header after rows starts a new section."""
        if m := _VERSION.match(content):
            self._section_line(s, "version")
            bad = version_problem(m.group(1), {"nccl-headers": m.group(2), "nccl-library": m.group(3)})
            if bad is not None:
                raise BadInput(f"{where(self.source, self.last_line)}: {bad}: not a header nccl-tests printed")
            s.tests_version = m.group(1)
            s.nccl_version = nccl_version_string(m.group(3) or m.group(2)) or s.nccl_version
            return True
        if m := _STARTING.match(content):
            self._section_line(s, "starting")
            s.program = m.group(1)
            return True
        if m := _NTHREAD.match(content):
            self._section_line(s, "nthread")
            nthread, ngpus = self._count(m.group(1), "nThread"), self._count(m.group(2), "nGpus")
            if s.headers and (s.nthread, s.ngpus) != (nthread, ngpus):  # several processes print the same one
                raise BadInput(f"{where(self.source, self.last_line)}: nThread {nthread} nGpus {ngpus}, where the "
                               f"header at line {s.header_line} said nThread {s.nthread} nGpus {s.ngpus}: one run's "
                               "processes print the same header, so these are two runs' lines in one file: import "
                               "each run's log as its own file")
            s.headers += 1
            s.header_line = s.header_line or self.last_line
            s.nthread, s.ngpus = nthread, ngpus
            if it := _ITERS.search(content):
                s.warmup, s.iters = self._count(it.group(1), "warmup iters"), self._count(it.group(2), "iters")
            if agg := _AGG.search(content):
                s.agg_iters = self._count(agg.group(1), "agg iters")
            if val := _VALIDATION.search(content):
                s.validation = int(val.group(1))
            if graph := _GRAPH.search(content):
                s.graph = int(graph.group(1))
            return True
        if m := _RANK.match(content):
            if s.rows:
                s.new_section()
            r = int(m.group(1))
            if r in s.ranks:
                s.dup_rank = True
            else:
                g = m.group(2)  # a C int (the color); anything larger is no Group nccl-tests printed
                group = int(g) if g is not None and len(g) <= 10 and int(g) <= INT32_MAX else None
                s.ranks[r] = RankInfo(r, m.group(4), int(m.group(3)), int(m.group(5)), m.group(7) or "", group)
            return True
        return False

    def _note(self, content: str) -> bool:
        """A line after the table that matters to the whole output (the out-of-bounds check, where
        -J JSON went, the end of a test)."""
        if m := _OOB.match(content):
            if (m.group(2) == "FAILED") or int(m.group(1)) > 0:
                self.parsed.failed = True
            return True
        if m := _JSON_OUT.match(content):
            self.parsed.json_path = m.group(1)
            return True
        return bool(_CONCLUDED.match(content))

    def _row(self, s: Stream, content: str, lineno: int, final: bool) -> list[dict]:
        """A result row -> its records; what it shows of the run (bandwidths printed as other than
        0, a failed check, rows before any Rank line) is noted for close()."""
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

    def _finish(self, strict: bool) -> list[str]:
        """The builder's lines to say: how the world size of rows whose log did not print it was
        found, the rows left out. A live run (not `strict`) says a refusal too: its rows are written."""
        try:
            return self.builder.finish()
        except BadInput as exc:
            if strict:
                raise
            return [str(exc)]

    def close(self, strict: bool = True) -> Parsed:
        p = self.parsed
        for key in list(self.pending):
            self._cut(key)  # a row whose last piece never came (the output was cut)
        if self.unreadable:
            n, lines = len(self.unreadable), ", ".join(map(str, self.unreadable[:8]))
            p.warnings.append(f"{n} line{'s' if n > 1 else ''} shaped like a result row but not in ASCII digits "
                              f"(lines {lines}{' ...' if n > 8 else ''}) not imported: nccl-tests prints ASCII "
                              "digits only; check those lines of the log")
        notes = self._finish(strict)
        if strict:
            self.builder.refusals.raise_any(self.source)
        elif (refused := self.builder.refusals.message(self.source)) is not None:
            p.warnings.append(refused)  # a live run's rows are written as they come: said, not undone
        p.transport = self.info.transport
        p.skipped = dict(self.builder.skipped)
        for rec in p.records:
            if rec.get("nccl_version") is None:
                rec["nccl_version"] = self.info.nccl_version
            rec["transport"] = p.transport
        symptom = self.single_rank_symptom()
        if not p.records and strict:
            extra = ""
            if self.unreadable:
                extra = (f" (line {self.unreadable[0]} and {len(self.unreadable) - 1} more are shaped like rows but "
                         "not in ASCII digits, which nccl-tests prints)")
            elif p.skipped:
                extra = f" (only rows {', '.join(p.skipped)}, which commbench does not keep)"
            elif symptom:
                extra = f"; {SINGLE_RANK_HINT}"
            elif any(s.headers for s in self.streams.values()):
                extra = " after the header: the run stopped before its first size"
            raise BadInput(f"{where(self.source, self.last_line)}: no nccl-tests result rows in the file "
                           f"(it ends here){extra}")
        p.warnings.extend(notes)
        self.tuning.fill(p.records)  # after finish: all_gather's per-rank bytes need the world size
        if symptom:
            p.warnings.append(SINGLE_RANK_HINT)
        if p.failed:
            p.warnings.append("the data check failed (#wrong > 0 or 'Out of bounds values ... FAILED'): "
                              "these results are wrong")
        return p


def parse_text(text: str, source: str, builder: RecordBuilder, strict: bool = True) -> Parsed:
    parser = TextParser(source, builder)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    for i, raw in enumerate(lines, 1):
        parser.feed(raw, i, final=(i == len(lines) and not text.endswith("\n")))
    return parser.close(strict=strict)
