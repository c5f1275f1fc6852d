"""The curves' tables, as plain rows and text: the peak busbw per line, every point, the
reduce-scatter gap sentences and the Settings tables, and the number formats every table of the
report uses (fnum, fp, sizes, a figure with its CI). The HTML page and the Markdown escape these
values; nothing here is markup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from commbench.analysis.points import points
from commbench.analysis.points.points import GROUP, LINE_KEYS
from commbench.analysis.points.pointtable import Query
from commbench.analysis.points.runs import missing, placement_name, runs_named
from commbench.analysis.points.settingsview import SettingsTable, setting_name, settings_tables
from commbench.core.runsummary import halfwidth_text
from commbench.core.units import format_size
from commbench.core.vocab import order_key


def fnum(value: Any, digits: int = 3) -> str:
    """A number for a table: 3 significant digits, '–' when missing."""
    if missing(value):
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}" if abs(v) >= 0.001 else f"{v:.2e}"


def fp(value: Any) -> str:
    """A p-value: '<0.0001' below, 3 significant digits otherwise."""
    if missing(value):
        return "–"
    v = float(value)
    return "<0.0001" if v < 1e-4 else f"{v:.3g}"


def size_text(value: Any) -> str:
    return "–" if missing(value) else format_size(int(value))


def peak_rows(rows: pd.DataFrame | Query) -> list[dict[str, Any]]:
    """Per collective / dtype / placement / run / setting: the size with the highest median busbw,
    the algbw and time there, the repetitions, and the #wrong summed over every row of the line."""
    med = points.medians(rows)
    names = _names(med)
    out = []
    for key, g in med.groupby(list(LINE_KEYS), sort=False):
        best = g.loc[g["busbw"].idxmax()]
        k = dict(zip(LINE_KEYS, key))
        checked = [w for w in g["wrong"] if w is not None]
        out.append({
            "collective": k["collective"], "dtype": k["dtype"], "placement": _place(k["in_place"], k.get(GROUP)),
            "run": names.get(str(k["run_id"]), str(k["run_id"])), "run_id": k["run_id"], "settings": k["settings"],
            "setting": setting_name(k["settings"]),
            "peak_busbw": float(best["busbw"]), "size_bytes": int(best["size_bytes"]),
            "algbw": float(best["algbw"]), "time_us": float(best["time"]), "ci": _value(best.get("ci")),
            "reps": int(g["reps"].max()), "sizes": len(g),
            "wrong": int(sum(checked)) if checked else None, "unchecked": int(g["unchecked"].sum()),
        })
    out.sort(key=lambda r: (order_key(r["collective"]), r["dtype"], not r["placement"].startswith("in-place"),
                            r["run"], r["settings"], r["placement"]))
    return out


def _place(in_place: Any, group: Any) -> str:
    """A row's placement, with a layout run's group after it: 'in-place dp0 [0,2] solo'."""
    return placement_name(in_place) + (f" {group}" if isinstance(group, str) and group else "")


def point_rows(rows: pd.DataFrame | Query) -> list[dict[str, Any]]:
    """Every point: medians over repetitions."""
    med = points.medians(rows)
    names = _names(med)
    out = [{"collective": r.collective, "dtype": r.dtype, "placement": _place(r.in_place, getattr(r, GROUP, "")),
            "run": names.get(str(r.run_id), str(r.run_id)), "settings": r.settings,
            "setting": setting_name(r.settings), "size_bytes": int(r.size_bytes), "time_us": _value(r.time),
            "algbw": _value(r.algbw), "busbw": float(r.busbw), "reps": int(r.reps), "wrong": r.wrong,
            "ci": _value(getattr(r, "ci", None))}
           for r in med.itertuples()]
    out.sort(key=lambda r: (order_key(r["collective"]), r["dtype"], r["placement"] != "in-place", r["run"],
                            r["settings"], r["size_bytes"]))
    return out


def _value(x: Any) -> float | None:
    return None if missing(x) else float(x)


def _names(med: pd.DataFrame) -> dict[str, str]:
    """runs_named over a points table: each run by its label where that label is its own, else by its id."""
    return runs_named(med[["run_id", "label"]].drop_duplicates(subset=["run_id"]))


@dataclass
class CurveTables:
    """What the report shows of curves besides the figure: the peak and point tables, the
    reduce-scatter gap sentences and the Settings tables, all from points.medians."""

    peaks: list[dict[str, Any]]
    points: list[dict[str, Any]]
    gaps: list[str]
    settings: list[SettingsTable]
    ratios: pd.DataFrame | None = None  # the Wire section's per-point wire/payload medians, where read here


def curve_tables(rows: pd.DataFrame | Query, with_ratios: bool = False) -> CurveTables:
    """The report's tables of curves, from rows in memory or the files of a large input; with
    `with_ratios`, the Wire section's per-point ratios too (a large input: its frame then need not
    hold every row's ratio)."""
    ratios = points.ratio_medians(rows) if with_ratios and "wire_per_payload" in _columns(rows) else None
    return CurveTables(peak_rows(rows), point_rows(rows), collective_gaps(rows), settings_tables(rows), ratios)


def _columns(rows: pd.DataFrame | Query) -> list[str]:
    return list(rows.columns) if isinstance(rows, pd.DataFrame) else list(rows.source.columns)


def wrong_cell(wrong: Any, unchecked: int = 0) -> tuple[str, bool]:
    if missing(wrong):
        return "not checked", False
    text = str(int(wrong))
    if unchecked:
        text += f" ({unchecked} rows unchecked)"
    return text, int(wrong) > 0


def ratio_text(value: Any) -> str:
    return "–" if missing(value) else f"{float(value):.3f}×"


def collective_gaps(rows: pd.DataFrame | Query) -> list[str]:
    """reduce_scatter's busbw next to all_reduce's (core/runsummary.py Gap), one sentence per run,
    setting and dtype where that run measured both; [] otherwise. The sweep ends with the same."""
    from commbench.core.runsummary import reduce_scatter_gap

    if isinstance(rows, pd.DataFrame) and (len(rows) == 0 or "collective" not in rows.columns):
        return []
    keys = ["run_id", "label", "settings", "dtype", "world_size"]
    med = points.medians(rows, [*keys, "backend", "collective", "in_place"])
    med = med[med["collective"].isin(["all_reduce", "reduce_scatter"])]  # buckets rows are drawn apart
    if med.empty:
        return []
    names = _names(med)
    several = {k: med[k].nunique(dropna=False) > 1 for k in keys}
    out = []
    for key, g in med.groupby(keys, sort=False, dropna=False):
        key = dict(zip(keys, key))
        backend = str(g["backend"].iloc[0])
        pts = [{"collective": r.collective, "size_bytes": int(r.size_bytes), "busbw": float(r.busbw),
                "backend": backend} for r in g.itertuples()]
        label = ", ".join(part for part in (
            f"run {names.get(str(key['run_id']), key['run_id'])}" if several.get("run_id") else "",
            setting_name(key.get("settings")) if key.get("settings") else "",
            str(key["dtype"]) if several.get("dtype") else "",
            f"{key['world_size']} ranks" if several.get("world_size") else "") if part)
        gap = reduce_scatter_gap(pts, label)
        if gap is not None:
            out.append(gap.sentence())
    return out


def with_ci(number: str, ci: float | None) -> str:
    """A table's figure with how precisely it is known: '1.51 ±12%' (the point's median time's 95% CI
    half-width, the time_ci column, as the sweep's table marks it; busbw and algbw are known to the
    same fraction), '>±100%' past it; the figure alone where rows do not say (older files)."""
    return number if ci is None or not math.isfinite(ci) or number == "–" else f"{number} {halfwidth_text(ci)}"


def ci_cell(row: dict, name: str) -> str:
    """with_ci of a table row's figure `name`, by its row's ci."""
    return with_ci(fnum(row[name]), row.get("ci"))

