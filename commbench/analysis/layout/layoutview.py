"""Layout runs' views (issue #38, docs/LAYOUTS.md "Views"): compare's verdict per
group dimension, and the report's Layout section (the groups of each dimension, the slowest group
per size, each group's contention factor with --solo, late ranks per group).

Only runs with group rows get a section; the section's work is grouped, never a loop per row."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from commbench.analysis.points.section import CompareHooks, CompareKit, Section
from commbench.core.columns import LAYOUT_POINT
from commbench.core.grouplabel import group_label
from commbench.core.outtext import terminal


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA


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


# ---- the report's Layout section ----

LAYOUT_NOTE = ("Each group's rows (docs/LAYOUTS.md): 'all at once' every group of the dimension ran together, "
               "'alone' (--solo) the group ran with the others idle. The slowest group is the one of lowest busbw "
               "(median over repetitions) while all ran at once; the contention factor is concurrent busbw over "
               "solo busbw (below 1: the groups slowed each other), its interval and verdict from the iterations "
               "of both kinds of pass (core/contention.py).")
_POINT = list(LAYOUT_POINT)


def _groups(g: pd.DataFrame) -> pd.DataFrame:
    first = g.drop_duplicates(["group_dim", "group_index"]).sort_values(["group_dim", "group_index"])
    colls = g.groupby(["group_dim", "group_index"])["collective"].unique()
    first = first.set_index(["group_dim", "group_index"])
    first["collectives"] = colls.map(lambda c: ", ".join(sorted(map(str, c))))
    return first.reset_index()


def groups_rows(g: pd.DataFrame) -> list[list[str]]:
    """dimension, group, ranks, hosts, collectives: one row a group."""
    first = _groups(g)
    hosts = first["group_hosts"] if "group_hosts" in first.columns else pd.Series("", index=first.index)
    return [[str(d), group_label(d, i), f"[{r}]", str(h or "–"), c] for d, i, r, h, c in
            zip(first["group_dim"], first["group_index"], first["group_ranks"], hosts, first["collectives"])]


def _place(v: Any) -> str:
    return "in" if v is True or v == 1 else "out" if v is False or v == 0 else "–"


def slowest_rows(g: pd.DataFrame) -> list[list[str]]:
    """Per dimension, collective, placement and size, while all ran at once: the slowest group, its
    busbw, the median and highest of the groups' (median over repetitions each)."""
    from commbench.core.units import format_size

    conc = g[g["concurrent"].astype("boolean").fillna(True)]
    if conc.empty:
        return []
    med = conc.groupby([*_POINT, "group_index", "group_ranks"], dropna=False)["busbw_GBps"].median().reset_index()
    by = med.groupby(_POINT, dropna=False)["busbw_GBps"]
    low = med.loc[by.idxmin()].reset_index(drop=True)
    stats = by.agg(["median", "max", "size"]).reset_index()
    return [[str(d), str(c), _place(p), format_size(int(s)), group_label(d, i, True, r), f"{b:.4g}", f"{m:.4g}",
             f"{x:.4g}", str(n)]
            for d, c, p, s, i, r, b, m, x, n in zip(low["group_dim"], low["collective"], low["in_place"],
                                                      low["size_bytes"], low["group_index"], low["group_ranks"],
                                                      low["busbw_GBps"], stats["median"], stats["max"], stats["size"])]


def contention_rows(g: pd.DataFrame) -> list[list[str]]:
    """Per group and point, with --solo: the contention factor (median over repetitions of the rows'
    `contention`), and where the rows hold their iterations, its interval and verdict from them."""
    from commbench.core.contention import contention
    from commbench.core.units import format_size

    if "contention" not in g.columns or not g["contention"].notna().any():
        return []
    key = [*_POINT, "group_index"]
    factor = g.groupby(key, dropna=False)["contention"].median().dropna()
    samples = "samples_us" in g.columns
    if samples:
        kind = g["concurrent"].astype("boolean").fillna(True).rename("conc")
        pooled = g.groupby([*key, kind], dropna=False)["samples_us"].agg(_pooled)
    out = []
    for k, f in factor.items():
        ci, verdict = "–", "–"
        conc, solo = (pooled.get((*k, True)), pooled.get((*k, False))) if samples else (None, None)
        if conc is not None and solo is not None and len(conc) and len(solo):
            c = contention(conc * 1e-6, solo * 1e-6)
            ci = f"[{c.low:.2f}, {c.high:.2f}]" if c.low is not None and c.high is not None else "–"
            verdict = f"{c.verdict} (p={c.p_value:.2g}, {c.concurrent}/{c.solo} iterations)"
        d, coll, p, s, i = k
        out.append([str(d), str(coll), _place(p), format_size(int(s)), group_label(d, i), f"{f:.2f}", ci, verdict])
    return out


def _pooled(samples: pd.Series) -> np.ndarray:
    """The iterations of several rows (repetitions) as one array."""
    return np.concatenate([np.asarray(x, float) for x in samples if x is not None] or [np.zeros(0)])


def straggler_lines(g: pd.DataFrame) -> list[str]:
    """Per group, over its rows of all at once: its late ranks and hosts (core/stragglers.py), named
    by their global ranks; a group with per-rank timing and none late says so."""
    from commbench.core import stragglers

    need = ("rank_skew_us", "rank_host", "hosts", "group_ranks")
    if any(c not in g.columns for c in need):
        return []
    conc = g[g["concurrent"].astype("boolean").fillna(True)]
    wanted = [c for c in ("rank_skew_us", "rank_host", "hosts", "time_us", "iters") if c in conc.columns]
    out = []
    for (dim, index, text), mine in conc.groupby(["group_dim", "group_index", "group_ranks"], dropna=False):
        rows = [dict(zip(wanted, cells)) for cells in zip(*(mine[c].tolist() for c in wanted))]
        hosts = next((h for h in map(stragglers.rank_hosts, rows) if h is not None), None)
        if hosts is None:
            continue
        ranks = [int(r) for r in str(text).split(",")]
        label = f"{group_label(dim, index, True, text)}: "
        found = stragglers.findings(rows, hosts)
        if not found:
            out.append(label + f"no rank or host stood out ({len(rows)} rows with per-rank timing)")
        for f in found:
            f = (dataclasses.replace(f, rank=ranks[f.rank]) if isinstance(f, stragglers.Straggler)
                 else dataclasses.replace(f, ranks=tuple(ranks[r] for r in f.ranks)))
            out.append(label + f.text())
    return out


def section_parts(df: pd.DataFrame) -> list[tuple[str, list[str], list[list[str]], tuple[int, ...]]]:
    """The Layout section's tables, (title, headers, rows, numeric columns) each, the late ranks as a
    table of one column; [] for a run with no group rows."""
    if not has_groups(df):
        return []
    g = df[df["group_dim"].notna()]
    runs = list(dict.fromkeys(g["run_id"])) if "run_id" in g.columns else []
    if len(runs) < 2:
        return _run_parts(g, "")
    # each run's groups apart: two layouts (one rail, then two) pooled would give one meaningless factor
    return [p for run in runs for p in _run_parts(g[g["run_id"] == run], f" — run {run}")]  # escaped where written


def _run_parts(g: pd.DataFrame, whose: str) -> list[tuple[str, list[str], list[list[str]], tuple[int, ...]]]:
    """The Layout tables of one run's group rows (or of all, with one run), `whose` after each title."""
    parts: list[tuple[str, list[str], list[list[str]], tuple[int, ...]]] = [
        ("Groups", ["dimension", "group", "ranks", "hosts", "collectives"], groups_rows(g), ())]
    parts.append(("Slowest group per size (all at once)", ["dimension", "collective", "place", "size", "slowest group",
                  "its busbw GB/s", "median of groups", "highest", "groups"], slowest_rows(g), (5, 6, 7, 8)))
    parts.append(("Contention factor per group (--solo)", ["dimension", "collective", "place", "size", "group",
                  "factor", "95% interval", "verdict"], contention_rows(g), (5,)))
    parts.append(("Late ranks per group", ["group: late ranks and hosts"], [[x] for x in straggler_lines(g)], ()))
    return [(title + whose, headers, rows, num) for title, headers, rows, num in parts if rows]


def section_html(df: pd.DataFrame, table: Callable[..., str], esc: Callable[[Any], str]) -> str:
    """The report's "Layout" section ('' for a run with no group rows); table and esc: report's."""
    parts = section_parts(df)
    if not parts:
        return ""
    out = ['<section id="layout"><h2>Layout</h2>', f'<p class="muted">{esc(LAYOUT_NOTE)}</p>']
    for title, headers, rows, num in parts:
        out += [f"<h3>{esc(title)}</h3>", table(headers, rows, num=num)]
    return "\n".join([*out, "</section>"])


def section_markdown(df: pd.DataFrame, table: Callable[..., str], md: Callable[[Any], str]) -> list[str]:
    """The Markdown report's "Layout" section ([] for a run with no group rows); table and md: markdown.py's."""
    parts = section_parts(df)
    if not parts:
        return []
    out = ["## Layout", "", md(LAYOUT_NOTE), ""]
    for title, headers, rows, num in parts:
        out += [f"### {md(title)}", "", table(headers, rows, right=num), ""]
    return out


def grouped(paths: Any) -> bool:
    """Whether any of these results files holds group rows (its group_dim column alone is read):
    the report then keeps the iterations, from which the contention factors' intervals come."""
    import pyarrow.parquet as pq

    for path in paths:
        try:
            column = pq.read_table(path, columns=["group_dim"]).column("group_dim")
        except (OSError, KeyError, ValueError, TypeError):  # not parquet, or a file without the column
            continue
        if column.null_count < len(column):
            return True
    return False


def _group_lines(c: Any, kit: CompareKit) -> list[str]:
    return group_verdict_lines(c.points, kit.overall, kit.pct)


SECTION = Section("layout", "Layout", "zero", lambda inp, kit: section_html(inp.df, kit.table, kit.esc),
                  lambda inp, kit: section_markdown(inp.df, kit.table, kit.md), reads_samples=grouped,
                  compare=CompareHooks(summary=lambda c, kit: _group_lines(c, kit)))
