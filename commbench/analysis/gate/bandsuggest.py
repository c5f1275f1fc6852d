"""Bands suggested from good runs (`commbench gate --suggest`): one entry per bandwidth-bound point.

Each band is as wide as its median varies (analysis/gate/tolerance.py), never below the floor;
a point wider than --max-band is left out with a warning that names it and the fix. The YAML
text is written by analysis/gate/bandsfile.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from commbench.analysis.compare.compare import BANDWIDTH_BOUND_FRACTION
from commbench.analysis.gate import bandsfile, tolerance
from commbench.analysis.gate.bands import GATED_WORKLOADS
from commbench.analysis.gate.gaterows import Rows, read_rows, row_values
from commbench.analysis.points.frames import column
from commbench.core import stats
from commbench.core.errors import BadInput
from commbench.core.outtext import terminal
from commbench.core.units import format_size, parse_size

# --suggest: sizes below this are latency-bound on every fabric we know and too noisy to band.
DEFAULT_MIN_SIZE = 1 << 20


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
    rows = read_rows(frame)
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


def _suggested_entries(rows: Rows, widths: Widths, min_size: int, notes: list[str]) -> list[dict]:
    """One entry per point that a band can describe, in a stable order; what is left out and why
    goes to `notes`."""
    groups: dict[tuple, list[int]] = {}
    for i in range(len(rows.collective)):
        key = (rows.collective[i], rows.dtype[i], rows.world_size[i], rows.nnodes[i], rows.op[i], rows.in_place[i],
               rows.size_bytes[i], rows.settings[i], rows.group[i])
        groups.setdefault(key, []).append(i)
    if not groups:
        raise BadInput("the results hold no sweep or nccl-tests rows: suggest bands from a `commbench sweep` run")
    medians = {k: stats.median(row_values(rows, idx, _point_name(k))) for k, idx in groups.items()}
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


def _band(rows: Rows, idx: list[int], k: tuple, widths: Widths) -> tuple[float, str] | None:
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
