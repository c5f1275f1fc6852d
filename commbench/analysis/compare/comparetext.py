"""compare's answer written out: the table for terminals and CI logs, and Markdown for a ticket.

The comparison itself (the verdict per point and overall) is analysis/compare/compare.py; here
only its rendering: every cell from the files escaped and bounded (core/outtext.py), the default
table within TABLE_WIDTH columns, one-sided points folded into runs of sizes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from commbench.analysis.compare.compare import (
    REGRESSIONS, VERDICTS, WITHIN_RUN_ALPHA_DIVISOR, Comparison, PointComparison, overall_verdict, p_text, pct_text)
from commbench.analysis.catalog import sections
from commbench.analysis.points.frames import printable
from commbench.analysis.points.section import CompareKit
from commbench.core.grouplabel import group_label
from commbench.core.outtext import LINE_LIMIT, markdown, terminal



def _size(n: Any) -> str:
    from commbench.core.units import format_size

    return format_size(n) if n is not None else "-"


def _bw(x: float) -> str:
    return f"{x:.4g}"


def _extra_columns(keys: Iterable[dict]) -> list[str]:
    keys = list(keys)
    extra = []
    if any(k.get("workload") not in (None, "sweep") for k in keys):
        extra.append("workload")
    if any(group_label(k.get("group_dim"), None) for k in keys):
        extra.append("group")  # a layout run's rows: 'dp1', 'dp1 solo' (docs/LAYOUTS.md)
    for name in ("bucket_bytes", "zero_stage", "grad_accum", "trace_step", "trace_op", "rail", "settings"):
        plain = (None, "", 1) if name == "grad_accum" else (None, "")  # an accumulation of 1 goes without saying
        if any(k.get(name) not in plain for k in keys):
            extra.append(name)
    return extra


_PLACE: dict[object, str] = {True: "in", False: "out"}  # in_place's cell


def _key_cells(key: dict, extra: list[str]) -> list[str]:
    cells = [str(key.get("collective")), str(key.get("dtype")), str(key.get("op") or "-"), _size(key.get("size_bytes")),
             _PLACE.get(key.get("in_place"), "-"),
             f"{key.get('world_size')} ({key.get('nnodes')}x{key.get('ranks_per_node')})"]
    for name in extra:
        v = key.get(name)
        if name == "group":
            cells.append(group_label(key.get("group_dim"), key.get("group_index"), key.get("concurrent"))
                         or "-")
            continue
        cells.append(_size(v) if name == "bucket_bytes" and v is not None else ("-" if v is None else str(v)))
    return [terminal(c) for c in cells]  # one escaped, bounded line each (core/outtext.py)


_KEY_HEADERS = ["collective", "dtype", "op", "size", "place", "ranks (nodes x per node)"]


def _side_cell(busbw: float | None, spread: tuple[float, float] | None) -> str:
    """'0.118 (0.117..0.119)', or 'failed' when no repetition of the side was measured."""
    if busbw is None or spread is None:
        return "failed"
    return f"{_bw(busbw)} ({_bw(spread[0])}..{_bw(spread[1])})"


def _rows(c: Comparison) -> tuple[list[str], list[list[str]]]:
    extra = _extra_columns(p.key for p in c.points)
    headers = _KEY_HEADERS + extra + ["bound", "before GB/s (min..max)", "after GB/s (min..max)", "change",
                                      "n", "test", "p Holm", "q BH", "verdict", "note"]
    rows = []
    for p in c.points:
        rows.append(_key_cells(p.key, extra) + [
            "-" if p.ratio is None else "bw" if p.bandwidth_bound else "lat",
            _side_cell(p.before_busbw, p.before_spread), _side_cell(p.after_busbw, p.after_spread),
            "-" if p.ratio is None else pct_text(p.ratio), f"{p.n_before}/{p.n_after}", p.test,
            "-" if p.p_holm is None else p_text(p.p_holm), "-" if p.q_bh is None else p_text(p.q_bh),
            p.verdict.upper() if p.verdict in REGRESSIONS else p.verdict, note_text(p)])
    return headers, rows


def note_text(p: PointComparison) -> str:
    """A point's note with its likely cause after it: 'likely cause: cbnode2 tcp RetransSegs +2,736 (...)'."""
    if not p.likely_cause:
        return p.note
    return "; ".join(x for x in (p.note, f"likely cause: {p.likely_cause}") if x)


def _summary_lines(c: Comparison) -> list[str]:
    counts = {v: sum(p.verdict == v for p in c.points) for v in VERDICTS}
    lines = [f"verdict: {c.verdict} (exit {c.exit_code()})",
             f"points: {len(c.points)} compared ("
             + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + f"), {len(c.only_before)} before only, "
             f"{len(c.only_after)} after only"]
    kit = CompareKit(overall_verdict, pct_text)
    lines += [line for s in sections.SECTIONS if s.compare and s.compare.summary for line in s.compare.summary(c, kit)]
    if c.geomean_ratio is not None:
        lines.append(f"geometric mean busbw ratio over bandwidth-bound points: {c.geomean_ratio:.4f} "
                     f"({pct_text(c.geomean_ratio)})")
    lines.append(f"rules: one-sided Mann-Whitney over repetitions, Holm alpha {c.alpha:g}; minimum effect "
                 f"{c.threshold * 100:g}% (bandwidth-bound), {c.latency_threshold * 100:g}% (others)"
                 + ("; within-run samples decide where repetitions cannot (alpha "
                    f"{c.alpha / WITHIN_RUN_ALPHA_DIVISOR:g})" if c.allow_within_run else ""))
    if c.repetitions_needed is not None and any(p.verdict == "inconclusive" and p.test != "repetitions"
                                                for p in c.points):
        lines.append(f"too few repetitions: measure both sides with -R {c.repetitions_needed} or more")
    return lines


_SIZE_CELL = _KEY_HEADERS.index("size")


def _one_sided_lines(c: Comparison) -> list[str]:
    """One line per point key but its size: 'before only: all_reduce float32 sum 8 B..512 KiB
    (17 sizes), 32 MiB in 2 (1x2)'. A run of sizes is one with none of the group's other sizes (either
    side's) between them, so a range never hides a size that was compared."""
    grids: dict[tuple, set] = {}
    for k in [p.key for p in c.points] + c.only_before + c.only_after:
        grids.setdefault(_without_size(k), set()).add(k.get("size_bytes"))
    out = []
    for title, keys in (("before only", c.only_before), ("after only", c.only_after)):
        groups: dict[tuple, list[dict]] = {}
        for k in keys:
            groups.setdefault(_without_size(k), []).append(k)
        for group, members in groups.items():
            cells = _key_cells(members[0], _extra_columns([members[0]]))
            sizes = [k.get("size_bytes") for k in members]
            cells[_SIZE_CELL] = _size_runs(sizes, grids[group]) if len(sizes) > 1 else cells[_SIZE_CELL]
            out.append(f"{title}: " + " ".join(cells))
    return out


def _without_size(key: dict) -> tuple:
    return tuple((name, printable(str(v))) for name, v in key.items() if name != "size_bytes")


def _size_runs(sizes: list, grid: set) -> str:
    """'8 B..512 KiB (17 sizes), 32 MiB, 64 MiB': runs of 3 or more neighbours in the grid as a range."""
    position = {x: i for i, x in enumerate(sorted(x for x in grid if x is not None))}
    ranked = sorted((position[x], x) for x in sizes if x is not None)
    runs: list[list] = []
    for i, x in ranked:
        if runs and i == runs[-1][-1][0] + 1:
            runs[-1].append((i, x))
        else:
            runs.append([(i, x)])
    parts = []
    for run in runs:
        if len(run) >= 3:
            parts.append(f"{_size(run[0][1])}..{_size(run[-1][1])} ({len(run)} sizes)")
        else:
            parts += [_size(x) for _, x in run]
    return printable(", ".join(parts + ["-"] * sum(x is None for x in sizes)))


TABLE_WIDTH = 120  # compare's default table and lines fit a terminal this wide; --wide shows the statistics
_LIFTED = ("dtype", "op", "place", "ranks (nodes x per node)")  # said once above the table when every point shares it
_STATISTICS = ("bound", "n", "test", "p Holm", "q BH")


def render_table(c: Comparison, wide: bool = False) -> str:
    """Plain text for terminals and CI logs: within TABLE_WIDTH columns (a cell shared by every
    point said once above the table, the statistics left out, long notes and lines wrapped), or
    every column on one line a point with `wide`."""
    lines = []
    if c.points:
        headers, rows = _rows(c)
        shared = ""
        if not wide:
            headers, rows, shared = _narrow(headers, rows)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        note_at = sum(widths[:-1]) + 2 * (len(widths) - 1)  # where the note column starts
        if not wide:  # the note's rule as wide as the note's room
            widths[-1] = max(len(headers[-1]), min(widths[-1], TABLE_WIDTH - note_at))
        fmt = lambda cells: "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()  # noqa: E731
        lines += [fmt(headers), fmt(["-" * w for w in widths])]
        for r in rows:
            lines += [fmt(r)] if wide else _wrapped_row(fmt(r[:-1] + [""]), r[-1], note_at)
        lines += (_wrapped(f"every point: {shared}") if shared else []) + [""]
    text = _one_sided_lines(c) + [f"warning: {terminal(w, LINE_LIMIT)}" for w in c.warnings]
    text += [f"differs: {terminal(d, LINE_LIMIT)}" for d in c.differences]
    text += [line for s in sections.SECTIONS if s.compare and s.compare.text for line in s.compare.text(c)]
    text += _summary_lines(c)
    lines += text if wide else [part for line in text for part in _wrapped(line)]
    return "\n".join(lines) + "\n"


def _narrow(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]], str]:
    """The table without the statistics columns and the spreads, and without the key columns whose
    cell every point shares (returned as one phrase, 'float32, op sum, in-place, ranks 16 (2x8)')."""
    shared = [h for h in _LIFTED if h in headers and len({r[headers.index(h)] for r in rows}) == 1]
    phrase = ", ".join(_shared_text(h, rows[0][headers.index(h)]) for h in shared)
    keep = [i for i, h in enumerate(headers) if h not in shared and h not in _STATISTICS]
    names = {"before GB/s (min..max)": "before GB/s", "after GB/s (min..max)": "after GB/s",
             "ranks (nodes x per node)": "ranks"}
    spread = {i for i, h in enumerate(headers) if h in ("before GB/s (min..max)", "after GB/s (min..max)")}
    return ([names.get(headers[i], headers[i]) for i in keep],
            [[r[i].split(" (")[0] if i in spread else r[i] for i in keep] for r in rows], phrase)


def _shared_text(header: str, cell: str) -> str:
    if header == "place":
        return {"in": "in-place", "out": "out-of-place"}.get(cell, cell)
    return {"op": f"op {cell}", "ranks (nodes x per node)": f"ranks {cell}"}.get(header, cell)


def _wrapped(line: str, indent: str = "    ") -> list[str]:
    import textwrap

    if len(line) <= TABLE_WIDTH:
        return [line]
    return textwrap.wrap(line, TABLE_WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def _wrapped_row(cells: str, note: str, note_at: int) -> list[str]:
    """A table row with its note: on the row while it fits, else clause by clause on the lines below
    it, under the note column (or indented, where that column leaves too little room)."""
    if not note or note_at + len(note) <= TABLE_WIDTH:
        return [(cells.ljust(note_at) + note).rstrip()]
    at = note_at if TABLE_WIDTH - note_at >= 40 else 4
    parts = _clauses(note, TABLE_WIDTH - at)
    if at == note_at:
        return [cells.ljust(note_at) + parts[0]] + [" " * at + p for p in parts[1:]]
    return [cells] + [" " * at + p for p in parts]


def _clauses(note: str, width: int) -> list[str]:
    """A note's '; '-separated clauses packed into lines of `width`; a clause longer than that wrapped."""
    import textwrap

    out: list[str] = []
    for clause in note.split("; "):
        if out and len(out[-1]) + 2 + len(clause) <= width:
            out[-1] += "; " + clause
            continue
        if out:
            out[-1] += ";"
        out += textwrap.wrap(clause, width, break_on_hyphens=False) or [""]
    return out


def render_markdown(c: Comparison) -> str:
    """Markdown for pasting into a ticket."""
    md = lambda text: markdown(text, LINE_LIMIT)  # noqa: E731 - every line from the files, inert
    lines = [f"### commbench compare: **{c.verdict}**", ""]
    lines += [f"- {s}" for s in _summary_lines(c)[1:]]
    lines += [line for s in sections.SECTIONS if s.compare and s.compare.markdown for line in s.compare.markdown(c)]
    if c.warnings:
        lines += ["", "**Warnings** (these should not differ):", ""] + [f"- {md(w)}" for w in c.warnings]
    if c.differences:
        lines += ["", "**What differs:**", ""] + [f"- {md(d)}" for d in c.differences]
    if c.points:
        headers, rows = _rows(c)
        lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(md(x) for x in r) + " |" for r in rows]
    one_sided = _one_sided_lines(c)
    if one_sided:
        lines += ["", "**On one side only:**", ""] + [f"- {md(x)}" for x in one_sided]
    return "\n".join(lines) + "\n"
