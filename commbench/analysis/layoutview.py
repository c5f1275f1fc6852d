"""Layout runs' views (issue #38, docs/LAYOUTS.md "Views"): a group's label, compare's verdict per
group dimension, and the report's Layout section (the groups of each dimension, the slowest group
per size, each group's contention factor with --solo, late ranks per group).

Only runs with group rows get a section; the section's work is grouped, never a loop per row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from commbench.core.outtext import terminal

GROUP_COLUMNS = ("group_dim", "group_index", "concurrent")  # part of a point (core/columns.py POINT_KEY)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA


def group_label(dim: Any, index: Any, concurrent: Any = True, ranks: Any = None) -> str:
    """'dp1', 'dp1 solo', 'dp0 [0,2]'; '' for a row of no group. Unsanitised: callers pass it through
    core/outtext.py's sanitiser for where it goes (terminal, markdown, figure)."""
    if _missing(dim):
        return ""
    text = f"{dim}{'' if _missing(index) else int(index)}"
    if not _missing(ranks) and str(ranks):
        text += f" [{ranks}]"
    return text + (" solo" if concurrent is False or concurrent == 0 else "")


def has_groups(frame: pd.DataFrame) -> bool:
    return "group_dim" in frame.columns and bool(frame["group_dim"].notna().any())


def group_verdict_lines(points: list[Any], overall: Any, pct: Any) -> list[str]:
    """compare's verdict per group dimension and kind of pass: 'dp groups, all at once: 2 of 2 slower
    (median -48.0%): dp0 regression -47.0%, dp1 regression -49.0%'. `points` are compare's
    PointComparison; `overall` folds a set of verdicts into one, `pct` writes a ratio."""
    by: dict[tuple, dict[Any, list]] = {}
    for p in points:
        dim = p.key.get("group_dim")
        if _missing(dim):
            continue
        solo = p.key.get("concurrent") is False
        by.setdefault((str(dim), solo), {}).setdefault(p.key.get("group_index"), []).append(p)
    lines = []
    for (dim, solo), groups in sorted(by.items()):
        verdicts, ratios, parts = [], [], []
        for index, members in sorted(groups.items(), key=lambda kv: (_missing(kv[0]), kv[0])):
            verdict = overall({m.verdict for m in members})
            r = [m.ratio for m in members if m.ratio is not None]
            verdicts.append(verdict)
            ratios += r
            med = f" {pct(float(np.median(r)))}" if r else ""
            parts.append(f"{group_label(dim, index)} {verdict}{med}")
        n = len(groups)
        counts = ", ".join(f"{verdicts.count(v)} of {n} {_WORD[v]}" for v in _WORD if v in verdicts)
        med = f" (median {pct(float(np.median(ratios)))})" if ratios else ""
        kind = "each alone" if solo else "all at once"
        lines.append(terminal(f"{dim} groups, {kind}: {counts}{med}: " + ", ".join(parts), 1000))
    return lines


_WORD = {"regression": "slower", "improvement": "faster", "unchanged": "unchanged", "inconclusive": "inconclusive",
         "nothing comparable": "not comparable"}
