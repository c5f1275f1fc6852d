"""Reference bands per system: judge a run against them (`commbench gate`), or suggest them from a good run.

The file format and the rules are in docs/GATE.md. In short: a versioned YAML file lists entries
(collective, size, ranks, dtype, ... -> expected busbw with a lower and an optional upper
tolerance, or `expect: fail`); each entry's measured value is the median busbw over the rows that
match it; an entry passes inside its band and fails below it, above it (only when `upper` is
set), on wrong results, or when nothing was measured for it (unless it is `optional`). Nothing
fails open: a file that cannot be read exactly as written is bad input, never an empty gate.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from commbench.analysis.compare.compare import BANDWIDTH_BOUND_FRACTION
from commbench.analysis.gate import bandsfile, tolerance
from commbench.analysis.layout.layoutview import GROUP_COLUMNS, group_label
from commbench.analysis.points.frames import check_frame, column, jsonable, printable
from commbench.core import stats
from commbench.core.errors import BadInput
from commbench.core.outtext import terminal
from commbench.core.units import format_size, parse_size

FORMAT_VERSION = bandsfile.FORMAT_VERSION
DEFAULT_LOWER = 0.05
# --suggest: sizes below this are latency-bound on every fabric we know and too noisy to band.
DEFAULT_MIN_SIZE = 1 << 20
# --suggest: how wide each band is comes from analysis/gate/tolerance.py (the variability of the median).
# Workloads whose rows are one collective at one size (nccl-tests' definitions): the only rows a band
# describes. Buckets and ZeRO rows are whole steps, keyed by more than a size.
GATED_WORKLOADS = ("sweep", "nccl-tests")

ENTRY_KEYS = ("collective", "size", "ranks", "dtype", "op", "in_place", "nnodes", "workload", "settings", "group",
              "busbw_GBps", "lower", "upper", "expect", "optional", "note", "basis")
DEFAULT_KEYS = ("lower", "upper")
TOP_KEYS = ("version", "system", "defaults", "entries")
VERDICTS = ("PASS", "FAIL", "SKIP")
_T = TypeVar("_T")  # _within's answer


@dataclass(frozen=True)
class Entry:
    """One reference band, validated: names canonical, sizes in bytes, tolerances as fractions."""

    index: int  # 1-based position in the file, as messages name it
    collective: str
    size_bytes: int
    ranks: int
    dtype: str | None = None  # None: any dtype
    op: str | None = None
    in_place: bool | None = None
    nnodes: int | None = None
    workload: str | None = None  # None: sweep and nccl-tests rows alike
    settings: str | None = None  # the rows' `settings` (--env, --mtu); None: rows of one setting, whichever
    group: str | None = None  # a layout run's group, 'dp1' or 'dp1 solo' (docs/LAYOUTS.md); None: rows of no group
    busbw_GBps: float | None = None  # None only with expect "fail"
    lower: float = DEFAULT_LOWER
    upper: float | None = None
    expect: str = "pass"
    optional: bool = False
    note: str | None = None
    basis: str | None = None  # where a suggested band's width came from (analysis/gate/tolerance.py)

    def describe(self) -> str:
        parts = [self.collective, self.dtype or "any dtype", format_size(self.size_bytes), f"{self.ranks} ranks"]
        if self.nnodes is not None:
            parts[-1] += f" on {self.nnodes} nodes"
        place = None if self.in_place is None else "in-place" if self.in_place else "out-of-place"
        parts += [p for p in (place, self.op, self.workload, self.settings, self.group) if p is not None]
        return " ".join(parts)

    def band(self) -> tuple[float, float | None]:
        assert self.busbw_GBps is not None
        low = self.busbw_GBps * (1 - self.lower)
        high = None if self.upper is None else self.busbw_GBps * (1 + self.upper)
        return low, high


@dataclass(frozen=True)
class Bands:
    version: int
    system: str
    entries: tuple[Entry, ...]
    source: str


@dataclass
class EntryResult:
    entry: Entry
    measured_GBps: float | None  # median over the matching rows; None when nothing matched
    n_rows: int
    wrong_rows: int
    ratio: float | None  # measured / expected
    band: tuple[float, float | None] | None
    verdict: str  # PASS, FAIL, SKIP
    reason: str


@dataclass
class GateReport:
    system: str
    source: str
    results: list[EntryResult]
    allow_empty: bool = False  # `gate --allow-empty`: a gate that judged no entry passes (else it fails)

    @property
    def failed(self) -> list[EntryResult]:
        return [r for r in self.results if r.verdict == "FAIL"]

    @property
    def empty(self) -> bool:  # nothing judged: every entry optional and unmatched (a CI gate that checked nothing)
        return all(r.verdict == "SKIP" for r in self.results) and not self.allow_empty

    def exit_code(self) -> int:
        return 1 if self.failed or self.empty else 0

    def summary(self) -> str:
        n = len(self.results)
        skipped = sum(r.verdict == "SKIP" for r in self.results)
        skip = f", {skipped} optional not measured" if skipped else ""
        system = f" (system {self.system})" if self.system else ""
        if self.empty:
            return (f"gate: FAIL: nothing judged: none of the {n} entries (all optional) matched the results{system}: "
                    "pass the run the bands are for, or --allow-empty when an empty gate may pass")
        if not self.failed:
            return f"gate: PASS: {n - skipped} of {n} entries within their bands{skip}{system}"
        named = "; ".join(f"#{r.entry.index} {r.entry.describe()}: {r.reason}" for r in self.failed)
        return f"gate: FAIL: {len(self.failed)} of {n} entries missed{skip}{system}: {named}"

    def to_dict(self) -> dict:
        out = {"system": self.system, "source": self.source, "exit_code": self.exit_code(),
               "verdict": "FAIL" if self.exit_code() else "PASS", "summary": self.summary(),
               "entries": [dataclasses.asdict(r) for r in self.results]}
        return jsonable(out)


# ---- reading and validating the file ----


def load_bands(path: str | os.PathLike) -> Bands:
    p = Path(path)
    return parse_bands(bandsfile.read_bands_text(p), str(p))


def parse_bands(text: str, source: str = "<bands>") -> Bands:
    doc = bandsfile.load_yaml(text, source)  # no anchors or aliases, bounded nesting and numbers
    if not isinstance(doc, dict):
        raise BadInput(f"{source}: expected a mapping with version, system and entries at the top "
                       "(docs/GATE.md has the format)")
    unknown = [k for k in doc if k not in TOP_KEYS]
    if unknown:
        raise BadInput(f"{source}: unknown top-level key {printable(str(unknown[0]))!r}: use "
                       f"{', '.join(TOP_KEYS)}")
    version = doc.get("version")
    if version is None:
        raise BadInput(f"{source}: no version: add 'version: {FORMAT_VERSION}' at the top")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BadInput(f"{source}: version {printable(repr(version))} is not a format version: "
                       f"write 'version: {FORMAT_VERSION}'")
    if version > FORMAT_VERSION:
        raise BadInput(f"{source}: version {version} is newer than this commbench reads ({FORMAT_VERSION}): "
                       "upgrade commbench")
    system = doc.get("system")
    system = "" if system is None else printable(str(system))
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise BadInput(f"{source}: defaults must be a mapping, e.g. 'defaults: {{lower: 0.05}}'")
    bad = [k for k in defaults if k not in DEFAULT_KEYS]
    if bad:
        raise BadInput(f"{source}: defaults: unknown key {printable(str(bad[0]))!r}: defaults take "
                       f"{', '.join(DEFAULT_KEYS)}")
    d_lower = _lower(defaults.get("lower", DEFAULT_LOWER), f"{source}: defaults")
    d_upper = _upper(defaults.get("upper"), f"{source}: defaults")
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        raise BadInput(f"{source}: no entries: add a list 'entries:' with at least one band "
                       "(commbench gate --suggest RESULTS writes one)")
    parsed: list[Entry] = []
    seen: dict[tuple, int] = {}
    for i, raw in enumerate(entries, start=1):
        entry = _entry(raw, i, source, d_lower, d_upper)
        key = _match_key(entry)
        if key in seen:
            raise BadInput(f"{source}: entry {i} ({entry.describe()}) repeats entry {seen[key]}: "
                           "remove one of them")
        seen[key] = i
        parsed.append(entry)
    return Bands(version=version, system=system, entries=tuple(parsed), source=source)


def _match_key(e: Entry) -> tuple:
    return (e.collective, e.size_bytes, e.ranks, e.dtype, e.op, e.in_place, e.nnodes, e.workload, e.settings, e.group)


def _fraction_value(value: Any, where: str, name: str) -> float:
    """0.05 or '5%' -> 0.05."""
    if isinstance(value, bool):
        raise BadInput(f"{where}: {name} {value} is not a fraction: write e.g. 0.05 or 5%")
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            v = float(value.strip()[:-1]) / 100
        except ValueError:
            raise BadInput(f"{where}: {name} {printable(value)!r} is not a fraction: write e.g. 0.05 or 5%") from None
    else:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise BadInput(f"{where}: {name} {printable(repr(value))} is not a fraction: "
                           "write e.g. 0.05 or 5%") from None
    if not math.isfinite(v):
        raise BadInput(f"{where}: {name} {printable(str(value))} is not a fraction: write e.g. 0.05 or 5%")
    return v


def _lower(value: Any, where: str) -> float:
    v = _fraction_value(value, where, "lower")
    if not 0 <= v < 1:
        raise BadInput(f"{where}: lower {printable(str(value))} must be 0 or more and below 1 "
                       "(a fraction below the expected busbw: 0.05 is 5%)")
    return v


def _upper(value: Any, where: str) -> float | None:
    if value is None:
        return None
    v = _fraction_value(value, where, "upper")
    if v < 0:
        raise BadInput(f"{where}: upper {printable(str(value))} must be 0 or more (a fraction above the "
                       "expected busbw: 0.1 is 10%), or null for no upper bound")
    return v


def _positive_int(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"{where}: {name} {printable(repr(value))} must be a whole number of at least 1")
    return value


def _collective(value: Any, where: str) -> str:
    from commbench.core import vocab as collectives

    names = ", ".join(c.name for c in collectives.COLLECTIVES)
    if not isinstance(value, str) or not value.strip() or "," in value or value.strip().lower() == "all":
        raise BadInput(f"{where}: collective {printable(repr(value))} is not one collective: use one of {names}")
    try:
        return collectives.resolve(value)[0].name
    except BadInput:
        hint = collectives.did_you_mean(value, collectives.collective_spellings())
        raise BadInput(f"{where}: unknown collective {printable(value)!r}{hint}: use one of {names} "
                       "(nccl-tests spellings like allreduce work too)") from None


def _settings(value: Any, where: str) -> str | None:
    """An entry's `settings`, spelled as the results' column spells it (one space between axes)."""
    if value is not None and (not isinstance(value, str) or not value.split()):
        raise BadInput(f"{where}: settings {printable(repr(value))} must be the setting as the results name it, "
                       "e.g. 'GLOO_SOCKET_IFNAME=eth1' or 'NCCL_ALGO=Ring NCCL_PROTO=LL' (or leave it out)")
    return None if value is None else printable(" ".join(value.split()))


def _entry(raw: Any, index: int, source: str, d_lower: float, d_upper: float | None) -> Entry:
    """One entry of the file, validated field group by field group (the first problem is named)."""
    where = f"{source}: entry {index}"
    raw = _entry_mapping(raw, where)
    coll = _collective(raw["collective"], where)
    where = f"{where} ({coll})"
    size_bytes, ranks = _size_and_ranks(raw, where)
    dtype, op = _dtype_and_op(raw, coll, where)
    in_place, nnodes = _placement(raw, ranks, where)
    workload = raw.get("workload")
    if workload is not None and workload not in GATED_WORKLOADS:
        raise BadInput(f"{where}: workload {printable(repr(workload))} cannot be gated: use "
                       f"{' or '.join(GATED_WORKLOADS)} (or leave it out for both)")
    settings = _settings(raw.get("settings"), where)
    expect = raw.get("expect", "pass")
    if expect not in ("pass", "fail"):
        raise BadInput(f"{where}: expect {printable(repr(expect))} must be pass or fail")
    optional = raw.get("optional", False)
    if not isinstance(optional, bool):
        raise BadInput(f"{where}: optional {printable(repr(optional))} must be true or false")
    note, basis, group = (None if raw.get(k) is None else printable(str(raw[k])) for k in ("note", "basis", "group"))
    common = Entry(index=index, collective=coll, size_bytes=size_bytes, ranks=ranks, dtype=dtype, op=op, group=group,
                   in_place=in_place, nnodes=nnodes, workload=workload, settings=settings, note=note, basis=basis)
    if expect == "fail":
        given = [k for k in ("busbw_GBps", "lower", "upper", "optional") if k in raw]
        if given:
            raise BadInput(f"{where}: an expected failure takes no {given[0]} (it passes when the point fails "
                           "or is missing): remove it, or remove 'expect: fail'")
        return replace(common, expect="fail")
    bw = _expected_busbw(raw.get("busbw_GBps"), where)
    lower = _lower(raw["lower"], where) if "lower" in raw else d_lower
    upper = _upper(raw["upper"], where) if "upper" in raw else d_upper
    return replace(common, busbw_GBps=bw, lower=lower, upper=upper, optional=optional)


def _entry_mapping(raw: Any, where: str) -> dict:
    """An entry is a mapping of known keys that names collective, size and ranks."""
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: expected a mapping like {{collective: all_reduce, size: 64M, ranks: 2, "
                       "busbw_GBps: 0.119}}")
    unknown = [k for k in raw if k not in ENTRY_KEYS]
    if unknown:
        raise BadInput(f"{where}: unknown key {printable(str(unknown[0]))!r}: entries take {', '.join(ENTRY_KEYS)}")
    for key in ("collective", "size", "ranks"):
        if raw.get(key) is None:
            raise BadInput(f"{where}: no {key}: every entry names collective, size and ranks")
    return raw


def _within(where: str, fn: Callable[..., _T], *args: Any) -> _T:
    """fn(*args), its BadInput prefixed with the entry it is about."""
    try:
        return fn(*args)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc}") from None


def _size_and_ranks(raw: dict, where: str) -> tuple[int, int]:
    size = raw["size"]
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise BadInput(f"{where}: size {printable(repr(size))} is not a size: write e.g. 64M, 1G or 4096")
    return _within(where, parse_size, str(size), "size"), _positive_int(raw["ranks"], where, "ranks")


def _dtype_and_op(raw: dict, coll: str, where: str) -> tuple[str | None, str | None]:
    """An entry's dtype and reduction, canonical (None: any)."""
    from commbench.core import vocab as collectives
    from commbench.core.vocab import get_dtype, get_op

    dtype = raw.get("dtype")
    if dtype is not None:
        if not isinstance(dtype, str):
            raise BadInput(f"{where}: dtype {printable(repr(dtype))} is not a dtype name: write e.g. float32")
        dtype = _within(where, get_dtype, dtype).name
    op = raw.get("op")
    if op is not None:
        if not collectives.BY_NAME[coll].reduces:
            raise BadInput(f"{where}: {coll} does not reduce, so it takes no op: remove 'op'")
        if not isinstance(op, str):
            raise BadInput(f"{where}: op {printable(repr(op))} is not a reduction: write e.g. sum")
        op = _within(where, get_op, op)
    return dtype, op


def _placement(raw: dict, ranks: int, where: str) -> tuple[bool | None, int | None]:
    """An entry's in_place (true, false, in, out) and nnodes (at most its ranks); None: any."""
    in_place = raw.get("in_place")
    if isinstance(in_place, str) and in_place.strip().lower() in ("in", "out"):
        in_place = in_place.strip().lower() == "in"
    if in_place is not None and not isinstance(in_place, bool):
        raise BadInput(f"{where}: in_place {printable(repr(in_place))} must be true or false (or in / out)")
    nnodes = raw.get("nnodes")
    if nnodes is not None:
        nnodes = _positive_int(nnodes, where, "nnodes")
        if nnodes > ranks:
            raise BadInput(f"{where}: nnodes {nnodes} is more than ranks {ranks}: a node holds at least one rank")
    return in_place, nnodes


def _expected_busbw(bw: Any, where: str) -> float:
    if bw is None:
        raise BadInput(f"{where}: no busbw_GBps: give the expected busbw in GB/s, or 'expect: fail'")
    if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not (math.isfinite(bw) and bw > 0):
        raise BadInput(f"{where}: busbw_GBps {printable(repr(bw))} must be a number of GB/s above 0")
    return float(bw)


# ---- the rows of a run ----


@dataclass
class _Rows:
    """The gated rows of a run as plain columns (one entry per row)."""

    collective: list
    size_bytes: list
    world_size: list
    dtype: list
    op: list
    in_place: list
    nnodes: list
    workload: list
    value: np.ndarray  # busbw, or algbw on one rank (busbw is 0 there by definition)
    wrong: list
    time_us: list
    samples: list
    run_id: list
    settings: list  # None where a row has no setting
    group: list  # a layout run's group label (layoutview.group_label), None off one
    ignored: dict  # workload -> rows left out
    # Rows grouped (analysis/points/pointtable.py: large inputs): entry i stands for counts[i] rows whose values
    # are value[starts[i]:starts[i] + counts[i]], and wrong[i] counts its wrong ones. None: a row an entry.
    starts: np.ndarray | None = None
    counts: np.ndarray | None = None
    index: dict | None = None  # (collective, size_bytes, world_size) -> its entries, built once


def _rows(frame: pd.DataFrame) -> _Rows:
    check_frame(frame, "gated")
    if len(frame) == 0:
        raise BadInput("the results hold no rows: pass a run that measured something")
    workloads = [w if w is not None else "sweep" for w in column(frame, "workload")]
    keep = [w in GATED_WORKLOADS for w in workloads]
    ignored: dict = {}
    for w, k in zip(workloads, keep):
        if not k:
            ignored[w] = ignored.get(w, 0) + 1

    def col(name: str) -> list:
        return [v for v, k in zip(column(frame, name), keep) if k]

    world = col("world_size")
    busbw = np.asarray(col("busbw_GBps"), dtype=float)
    if any(w == 1 for w in world):
        alg = np.asarray(col("algbw_GBps"), dtype=float)
        busbw = np.where(np.asarray([w == 1 for w in world], dtype=bool), alg, busbw)
    samples = col("samples_us") if "samples_us" in frame.columns else [None] * len(world)
    return _Rows(collective=col("collective"), size_bytes=[None if v is None else int(v) for v in col("size_bytes")],
                 world_size=world, dtype=col("dtype"), op=col("op"),
                 in_place=[None if v is None else bool(v) for v in col("in_place")], nnodes=col("nnodes"),
                 workload=[w if w is not None else "sweep" for w in col("workload")], value=busbw,
                 wrong=col("wrong"), time_us=col("time_us"), samples=samples,
                 run_id=col("run_id") if "run_id" in frame.columns else [None] * len(world),
                 settings=[v or None for v in col("settings")], ignored=ignored,
                 group=[group_label(*g) or None for g in zip(*(col(c) if c in frame.columns else [None] * len(world)
                                                               for c in GROUP_COLUMNS))])


def _matching(rows: _Rows, e: Entry) -> list[int]:
    if rows.index is None:  # one look-up an entry, not a pass over every row (a million rows)
        rows.index = {}
        for i, k in enumerate(zip(rows.collective, rows.size_bytes, rows.world_size)):
            rows.index.setdefault(k, []).append(i)
    out = []
    for i in rows.index.get((e.collective, e.size_bytes, e.ranks), ()):
        if e.dtype is not None and rows.dtype[i] != e.dtype:
            continue
        if e.op is not None and rows.op[i] != e.op:
            continue
        if e.in_place is not None and rows.in_place[i] != e.in_place:
            continue
        if e.nnodes is not None and rows.nnodes[i] != e.nnodes:
            continue
        if e.workload is not None and rows.workload[i] != e.workload:
            continue
        if e.settings is not None and rows.settings[i] != e.settings:
            continue
        if rows.group[i] != e.group:  # a layout run's rows: one group's, all at once or alone, never mixed
            continue
        out.append(i)
    return out


def _values(rows: _Rows, idx: list[int], what: str) -> np.ndarray:
    if rows.counts is None:
        v = rows.value[idx]
    else:
        starts, counts = rows.starts, rows.counts
        assert starts is not None  # grouped rows have both
        v = np.concatenate([rows.value[starts[i]:starts[i] + counts[i]] for i in idx] or [np.zeros(0)])
    if not np.all(np.isfinite(v) & (v > 0)):
        raise BadInput(f"the results hold busbw_GBps {v[~(np.isfinite(v) & (v > 0))][0]} for {what}: a damaged "
                       "or hand-edited file; re-run the measurement")
    return v


# ---- judging ----


def judge(bands: Bands, frame: pd.DataFrame | dict) -> GateReport:
    """Judge a run against the bands: its rows grouped by what an entry matches on, by the one
    aggregation (pointtable.gate_groups, over files, or over a frame in memory: read_results output);
    see docs/GATE.md for the rules."""
    if not isinstance(frame, dict):
        from commbench.analysis.points import pointtable

        check_frame(frame, "gated")
        frame = pointtable.gate_groups((), GATED_WORKLOADS, pointtable.frame_source(frame, "gated"))
    rows = _Rows(**frame)
    return GateReport(system=bands.system, source=bands.source, results=[_judge(e, rows) for e in bands.entries])


def _count(rows: _Rows, idx: list[int]) -> int:
    return len(idx) if rows.counts is None else int(sum(rows.counts[i] for i in idx))


def _judge(e: Entry, rows: _Rows) -> EntryResult:
    idx = _matching(rows, e)
    held = list(dict.fromkeys(printable(rows.settings[i] or "(none)") for i in idx))
    if len(held) > 1:  # one median over several settings would hide the slow one
        return EntryResult(entry=e, measured_GBps=None, n_rows=_count(rows, idx), wrong_rows=0, ratio=None, band=None,
                           verdict="FAIL", reason=f"rows of {len(held)} settings match ({'; '.join(held)}): name "
                                                  "one with 'settings:' in the entry (gate --suggest writes it)")
    wrong = int(sum(rows.wrong[i] for i in idx))  # rows grouped: wrong[i] counts the group's wrong rows
    n = _count(rows, idx)
    measured = stats.median(_values(rows, idx, e.describe())) if idx else None
    base = EntryResult(entry=e, measured_GBps=measured, n_rows=n, wrong_rows=wrong, ratio=None, band=None,
                       verdict="", reason="")
    if e.expect == "fail":
        if not idx:
            return replace(base, verdict="PASS", reason="expected failure: not measured")
        if wrong:
            return replace(base, verdict="PASS", reason=f"expected failure: {wrong} of {n} rows wrong")
        return replace(base, verdict="FAIL", reason=f"expected to fail, but {n} rows measured with correct "
                                                    "results: the known failure is gone; update the bands")
    if not idx:
        if e.optional:
            return replace(base, verdict="SKIP", reason="optional, not measured")
        return replace(base, verdict="FAIL", reason="not measured (no row matches)")
    assert e.busbw_GBps is not None and measured is not None
    low, high = e.band()
    base = replace(base, ratio=measured / e.busbw_GBps, band=(low, high))
    if wrong:
        return replace(base, verdict="FAIL", reason=f"wrong results in {wrong} of {n} rows")
    change = f"{(measured / e.busbw_GBps - 1) * 100:+.1f}%"
    if measured < low:
        return replace(base, verdict="FAIL", reason=f"below band ({change}, tolerance -{e.lower * 100:g}%)")
    if high is not None and measured > high:
        assert e.upper is not None  # a band has a top only with `upper`
        return replace(base, verdict="FAIL", reason=f"above band ({change}, tolerance +{e.upper * 100:g}%): "
                                                    "suspiciously fast (caching? a wrong size?)")
    return replace(base, verdict="PASS", reason=change)


# ---- suggesting ----


@dataclass
class Suggestion:
    text: str  # the YAML file
    entries: int
    notes: list[str]  # what was left out and why (printed on stderr)
    warnings: list[str] = field(default_factory=list)  # points left out as too wide, and the fix (stderr)


def _size_text(n: int) -> str | int:
    text = tolerance.size_arg(n)
    return n if text.isdigit() else text


def suggest(frame: pd.DataFrame, sources: Iterable[str] = (), lower: float = tolerance.DEFAULT_FLOOR,
            upper: float | None = None, min_size: int = DEFAULT_MIN_SIZE, system: str | None = None,
            max_band: float = tolerance.DEFAULT_MAX_BAND, allow_wide: bool = False) -> Suggestion:
    """Bands from good runs: one entry per bandwidth-bound point of at least min_size, each as wide
    as its median varies (analysis/gate/tolerance.py); `lower` is the floor (docs/GATE.md). A point whose
    band would be wider than max_band is left out with a warning that names it, its width and the fix
    (unless allow_wide); BadInput only when no band could be written."""
    if not 0 <= lower < 1:
        raise BadInput(f"--lower {lower} must be 0 or more and below 1 (a fraction: 0.05 is 5%)")
    if upper is not None and not (math.isfinite(upper) and upper >= 0):
        raise BadInput(f"--upper {upper} must be 0 or more (a fraction: 0.1 is 10%)")
    rows = _rows(frame)
    notes = [f"left out {n} rows of workload {w}: bands describe one collective at one size "
             f"({', '.join(GATED_WORKLOADS)})" for w, n in sorted(rows.ignored.items())]
    wide: list[tolerance.WidePoint] = []
    limit = tolerance.MAX_ALLOWED_BAND if allow_wide else max_band
    entries = _suggested_entries(rows, Widths(lower, max_band, limit, wide, allow_wide), min_size, notes)
    if wide and allow_wide:
        notes += [f"{w.text()}: wider than --max-band {max_band:.0%}, written as asked (--allow-wide; at most "
                  f"{tolerance.MAX_ALLOWED_BAND:.0%})" for w in wide]
    if any("basis" in e and " of one run" in e["basis"] for e in entries) or any(
            "basis" in e and "one repetition" in e["basis"] for e in entries):
        notes.append("bands from one run see no run-to-run drift: suggest from several runs "
                     "(gate --suggest RUN1 RUN2 RUN3) for bands that hold from one run to the next")
    written = {e["size"] if isinstance(e["size"], int) else parse_size(e["size"], "size") for e in entries}
    warnings = [] if allow_wide or not wide else [tolerance.wide_warning(wide, written, lower, max_band)]
    if not entries:
        raise BadInput(f"no band written: {warnings[0]}")
    if system is None:
        hosts = sorted({h for hs in column(frame, "hosts") if hs is not None for h in hs})
        system = ",".join(hosts) if hosts else "unnamed"
    return Suggestion(text=bandsfile.bands_text(entries, system, sources, lower, upper, min_size), entries=len(entries),
                      notes=notes, warnings=warnings)


@dataclass
class Widths:
    """What bounds a suggested band: the floor, --max-band, the widest written; the points wider
    than --max-band."""

    floor: float
    max_band: float
    limit: float
    wide: list[tolerance.WidePoint]
    allow_wide: bool = False


def _suggested_entries(rows: _Rows, widths: Widths, min_size: int, notes: list[str]) -> list[dict]:
    """One entry per point that a band can describe, in a stable order; what is left out and why
    goes to `notes`."""
    groups: dict[tuple, list[int]] = {}
    for i in range(len(rows.collective)):
        key = (rows.collective[i], rows.dtype[i], rows.world_size[i], rows.nnodes[i], rows.op[i], rows.in_place[i],
               rows.size_bytes[i], rows.settings[i], rows.group[i])
        groups.setdefault(key, []).append(i)
    if not groups:
        raise BadInput("the results hold no sweep or nccl-tests rows: suggest bands from a `commbench sweep` run")
    medians = {k: stats.median(_values(rows, idx, _point_name(k))) for k, idx in groups.items()}
    peaks: dict[tuple, float] = {}
    for k, m in medians.items():
        peaks[_peak(k)] = max(peaks.get(_peak(k), 0.0), m)
    # Name placements and ops only where the run holds more than one of them for the collective.
    variants: dict[str, dict[str, set]] = {}
    for k in groups:
        v = variants.setdefault(k[0], {"in_place": set(), "op": set()})
        v["in_place"].add(k[5])
        v["op"].add(k[4])
    entries = []
    left_small = left_latency = 0
    for k in sorted(groups, key=lambda k: (k[0], str(k[7] or ""), str(k[1]), k[2], k[3] or 0, str(k[8] or ""), k[6],
                                           str(k[4]), str(k[5]))):
        idx, med = groups[k], medians[k]
        wrong = sum(1 for i in idx if (rows.wrong[i] or 0) > 0)
        if wrong:
            notes.append(f"left out {_point_name(k)}: {wrong} of {len(idx)} rows have wrong results (add it "
                         "with 'expect: fail' if that is a known failure)")
        elif k[6] < min_size:
            left_small += 1
        elif med < BANDWIDTH_BOUND_FRACTION * peaks[_peak(k)]:
            left_latency += 1
        elif (band := _band(rows, idx, k, widths)) is not None:  # None: wider than --max-band, left out
            entries.append(_entry_for(k, med, band, variants[k[0]]))
    if left_small:
        notes.append(f"left out {left_small} points below {format_size(min_size)} (--min-size)")
    if left_latency:
        notes.append(f"left out {left_latency} points below {BANDWIDTH_BOUND_FRACTION * 100:g}% of their "
                     "collective's peak busbw (latency-bound)")
    if not entries and not widths.wide:
        raise BadInput(f"no point of the results is bandwidth-bound and at least {format_size(min_size)}: "
                       "pass --min-size smaller, or a sweep with larger sizes")
    return entries


def _peak(k: tuple) -> tuple:
    """The points a point's peak is taken over: its collective, dtype and topology, under its setting."""
    return k[:4] + k[7:]


def _point_name(k: tuple) -> str:
    coll, dtype, world, _, _, in_place, size, settings, group = k
    where = "" if in_place is None else (" in place" if in_place else " out of place")
    return (f"{terminal(coll)} {terminal(dtype)} {format_size(size)}{where} on {world} ranks"
            + "".join(f" {terminal(x)}" for x in (settings, group) if x))


def _band(rows: _Rows, idx: list[int], k: tuple, widths: Widths) -> tuple[float, str] | None:
    """A point's lower tolerance and its basis; a point wider than --max-band is noted in widths.wide
    (and has no band, unless --allow-wide)."""
    b = tolerance.basis([rows.run_id[i] for i in idx], rows.value[idx], [rows.samples[i] for i in idx],
                        [rows.time_us[i] for i in idx])
    tol = tolerance.tolerance(b, widths.floor)
    if tol > widths.max_band:
        widths.wide.append(tolerance.WidePoint(_point_name(k), int(k[6]), tol, b))
        if not widths.allow_wide:
            return None
    tol = min(tol, widths.limit)
    return tol, b.text(tol)


def _entry_for(k: tuple, med: float, band: tuple[float, str], variants: dict[str, set]) -> dict[str, Any]:
    coll, dtype, world, nnodes, op, in_place, size, settings, group = k
    entry: dict[str, Any] = {"collective": coll, "size": _size_text(size), "ranks": world}
    named = {"dtype": dtype, "nnodes": nnodes, "in_place": in_place if len(variants["in_place"]) > 1 else None,
             "op": op if len(variants["op"]) > 1 else None, "settings": settings, "group": group}  # in file order
    entry.update((name, v) for name, v in named.items() if v is not None)
    entry["busbw_GBps"] = float(f"{med:.5g}")
    entry["lower"], entry["basis"] = round(band[0], 4), band[1]
    return entry


def gate_paths(bands: Bands, paths: Sequence[str | os.PathLike]) -> GateReport:
    """The report of the files, grouped where they lie (whatever their size: judge takes the
    same aggregation over rows already in memory)."""
    from commbench.analysis.points import pointtable

    return judge(bands, pointtable.gate_groups(paths, GATED_WORKLOADS))
