"""A run judged against its reference bands (`commbench gate`): each entry PASS, FAIL or SKIP, and the report.

The file format and the rules are in docs/GATE.md. In short: a versioned YAML file lists entries
(collective, size, ranks, dtype, ... -> expected busbw with a lower and an optional upper
tolerance, or `expect: fail`); each entry's measured value is the median busbw over the rows that
match it; an entry passes inside its band and fails below it, above it (only when `upper` is
set), on wrong results, or when nothing was measured for it (unless it is `optional`). Nothing
fails open: a file that cannot be read exactly as written is bad input, never an empty gate.
Reading the file is analysis/gate/bands.py; suggesting bands, analysis/gate/bandsuggest.py.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pandas as pd

from commbench.analysis.gate.bands import GATED_WORKLOADS, Bands, Entry
from commbench.analysis.gate.gaterows import Rows, row_values
from commbench.analysis.points.frames import check_frame, jsonable, printable
from commbench.core import stats

VERDICTS = ("PASS", "FAIL", "SKIP")


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


def _matching(rows: Rows, e: Entry) -> list[int]:
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


def judge(bands: Bands, frame: pd.DataFrame | dict) -> GateReport:
    """Judge a run against the bands: its rows grouped by what an entry matches on, by the one
    aggregation (pointtable.gate_groups, over files, or over a frame in memory: read_results output);
    see docs/GATE.md for the rules."""
    if not isinstance(frame, dict):
        from commbench.analysis.points import pointtable

        check_frame(frame, "gated")
        frame = pointtable.gate_groups((), GATED_WORKLOADS, pointtable.frame_source(frame, "gated"))
    rows = Rows(**frame)
    return GateReport(system=bands.system, source=bands.source, results=[_judge(e, rows) for e in bands.entries])


def _count(rows: Rows, idx: list[int]) -> int:
    return len(idx) if rows.counts is None else int(sum(rows.counts[i] for i in idx))


def _judge(e: Entry, rows: Rows) -> EntryResult:
    idx = _matching(rows, e)
    held = list(dict.fromkeys(printable(rows.settings[i] or "(none)") for i in idx))
    if len(held) > 1:  # one median over several settings would hide the slow one
        return EntryResult(entry=e, measured_GBps=None, n_rows=_count(rows, idx), wrong_rows=0, ratio=None, band=None,
                           verdict="FAIL", reason=f"rows of {len(held)} settings match ({'; '.join(held)}): name "
                                                  "one with 'settings:' in the entry (gate --suggest writes it)")
    wrong = int(sum(rows.wrong[i] for i in idx))  # rows grouped: wrong[i] counts the group's wrong rows
    n = _count(rows, idx)
    measured = stats.median(row_values(rows, idx, e.describe())) if idx else None
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


def gate_paths(bands: Bands, paths: Sequence[str | os.PathLike]) -> GateReport:
    """The report of the files, grouped where they lie (whatever their size: judge takes the
    same aggregation over rows already in memory)."""
    from commbench.analysis.points import pointtable

    return judge(bands, pointtable.gate_groups(paths, GATED_WORKLOADS))
