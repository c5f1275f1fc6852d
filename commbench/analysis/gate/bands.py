"""A bands file read and validated into Entry and Bands: names canonical, sizes in bytes, tolerances as fractions.

The file format and the rules are in docs/GATE.md; the YAML under it is read by
analysis/gate/bandsfile.py. Nothing fails open: a file that cannot be read exactly as written is
one BadInput line naming the entry and the fix, never an empty gate.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from commbench.core import workloadspec
from commbench.analysis.gate import bandsfile
from commbench.analysis.points.frames import printable
from commbench.core.errors import BadInput
from commbench.core.units import format_size, parse_size

FORMAT_VERSION = bandsfile.FORMAT_VERSION
DEFAULT_LOWER = 0.05
# Workloads whose rows are one collective at one size (nccl-tests' definitions): the only rows a band
# describes. Buckets and ZeRO rows are whole steps, keyed by more than a size.
GATED_WORKLOADS = workloadspec.names(drawn_as=workloadspec.CURVE)  # a band is on a curve

ENTRY_KEYS = ("collective", "size", "ranks", "dtype", "op", "in_place", "nnodes", "workload", "settings", "group",
              "busbw_GBps", "lower", "upper", "expect", "optional", "note", "basis")
DEFAULT_KEYS = ("lower", "upper")
TOP_KEYS = ("version", "system", "defaults", "entries")
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
