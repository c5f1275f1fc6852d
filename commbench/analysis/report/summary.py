"""What both formats of `commbench report` show, as plain rows and text: the peak busbw per line,
every point, a run's facts and network, numbers formatted for a table. The HTML page (report.py)
and the Markdown (markdown.py) escape these values; nothing here is markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import pandas as pd

from commbench.analysis.points import points
from commbench.analysis.points.frames import as_list, json_cell
from commbench.analysis.points.points import GROUP, LINE_KEYS, SETTINGS
from commbench.analysis.points.pointtable import Query, Source
from commbench.analysis.points.runs import compact_hosts, missing, placement_name, runs_named
from commbench.analysis.points.settingsview import SettingsTable, distinct, setting_name, settings_tables, settings_text
from commbench.core.linkrate import host_rate
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


def json_value(text: Any) -> Any:
    """A JSON cell (env, net, plan): its values; the raw (escaped) string when it is not JSON;
    frames.UNREADABLE, shown as text, when it nests too deeply to read safely."""
    if missing(text):
        return None
    return json_cell(text)


def _when(value: Any) -> str:
    try:
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    except (AttributeError, ValueError):
        return str(value)


# What a run's facts read of its rows (the rest of a fact comes from its first row).
FACT_COLUMNS = ("collective", "dtype", "size_bytes", "repetition", SETTINGS, "rank_skew_us", "rank_host", "hosts",
                "time_us", "iters", "group_dim")


def run_positions(df: pd.DataFrame) -> dict[Any, np.ndarray]:
    """Per run_id, the positions of its rows in row order: one grouping for every run, not a
    comparison over every row a run (run_facts' `at`)."""
    if len(df) == 0 or "run_id" not in df.columns:
        return {}
    return {k: np.sort(v) for k, v in df.groupby("run_id", sort=False, observed=True).indices.items()}


def _run_part(row: dict[str, Any], df: pd.DataFrame, at: np.ndarray | None) -> pd.DataFrame:
    """The run's rows, of FACT_COLUMNS only: a copy of a few columns, none when every row is the run's."""
    part = df[[c for c in FACT_COLUMNS if c in df.columns]]
    if at is None:
        at = np.flatnonzero((df["run_id"] == row["run_id"]).to_numpy(dtype=bool))
    return part if len(at) == len(df) else part.iloc[at]


def run_facts(row: dict[str, Any], df: pd.DataFrame, at: np.ndarray | None = None,
              late: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(name, value) pairs describing one run; values are plain text, escaped by the caller.
    at: the positions of the run's rows in df (run_positions), found here when not given; late:
    each run's "late arrivals" by run_id where they were judged from the files (a large input's
    frame holds no per-rank columns: late_arrivals_by_run), else judged here from df's rows."""
    mine = _run_part(row, df, at)
    hosts = [str(h) for h in as_list(row.get("hosts"))]
    started = row.get("started_at")
    facts = [
        ("run id", row.get("run_id")),
        ("label", row.get("label") or "(none)"),
        ("started", "" if missing(started) else _when(started)),
        ("workload", row.get("workload")),
        ("launcher", row.get("launcher")),
        ("ranks (world size)", row.get("world_size")),
        ("nodes", row.get("nnodes")),
        ("ranks per node", row.get("ranks_per_node")),
        ("hosts", f"{compact_hosts(hosts)} ({len(hosts)} host{'s' if len(hosts) != 1 else ''})" if hosts else "?"),
        ("backend", row.get("backend")),
        ("device", " ".join(dict.fromkeys(str(v) for v in (row.get("device"), row.get("device_name"))
                                          if not missing(v)))),
        ("interface (rank 0)", row.get("iface")),
        ("MTU", row.get("mtu")),
        ("link layer", row.get("link_layer")),
        ("collectives", ", ".join(sorted(set(mine["collective"].unique()), key=order_key))),
        ("dtypes", ", ".join(sorted({str(v) for v in mine["dtype"].dropna().unique()}))),
        ("sizes", f"{format_size(int(mine['size_bytes'].min()))} .. {format_size(int(mine['size_bytes'].max()))}"
                  f" ({mine['size_bytes'].nunique()} sizes)" if len(mine) else "–"),
        ("repetitions", mine["repetition"].nunique() if "repetition" in mine.columns else "?"),
        ("rows", len(mine)),
        ("commbench", row.get("commbench_version")),
        ("torch", row.get("torch_version")),
        ("NCCL", row.get("nccl_version") if not missing(row.get("nccl_version")) else "– (not an NCCL run)"),
    ]
    held = distinct(mine)
    if any(held):  # only a run with a settings axis: an older file's facts stay as they were
        facts.insert([k for k, _ in facts].index("link layer") + 1, ("settings", settings_text(held)))
    text = late.get(str(row.get("run_id"))) if late is not None else late_arrivals(mine)
    if text is not None:  # a file that records each rank's skew and host (not older ones, nor imports)
        facts.append(("late arrivals", text))
    return [(k, "–" if missing(v) or v == "" else str(v)) for k, v in facts]


def late_arrivals(mine: pd.DataFrame) -> str | None:
    """What the run's straggler warning said (core/stragglers.py), judged again from its rows."""
    if "rank_skew_us" not in mine.columns or "rank_host" not in mine.columns:
        return None
    if "group_dim" in mine.columns and mine["group_dim"].notna().any():  # a layout run: each group's own ranks
        return "judged per group, in the Layout section (docs/LAYOUTS.md)"
    from commbench.core.stragglers import run_findings

    wanted = [c for c in ("rank_skew_us", "rank_host", "hosts", "time_us", "iters") if c in mine.columns]
    # the rows as dicts from each column's values (to_dict("records") boxes cell by cell: 3x slower)
    return late_text(run_findings([dict(zip(wanted, cells)) for cells in zip(*(mine[c].tolist() for c in wanted))]))


def late_text(found: tuple[list[str], int] | None) -> str | None:
    """The "late arrivals" fact of a run's findings (stragglers.run_findings), None without one."""
    if found is None:
        return None
    texts, points = found
    return "; ".join(texts) if texts else f"none: no rank or host stood out ({points} points with per-rank timing)"


def late_arrivals_by_run(source: Source) -> dict[str, str]:
    """late_arrivals of every run of a large input, by run_id, judged from its files' per-rank columns
    (figurequery.rank_skews: one run's skews in memory at a time) rather than from a frame's rows."""
    from commbench.analysis.points.figurequery import rank_skews
    from commbench.core.stragglers import run_findings_matrix

    out = {}
    for run, hosts, skew, time_us in rank_skews(source):
        text = late_text(run_findings_matrix(skew, time_us, hosts))
        if text is not None:
            out[run] = text
    return out


def net_rows(net: Any) -> list[list[str]]:
    if not isinstance(net, dict):
        return []
    rows = []
    for host, facts in net.items():
        if isinstance(facts, dict):
            speed = facts.get("speed_mbps")  # shown as the effective rate: a shaper's where it caps the link
            speed_text = host_rate(facts).text() or ("–" if speed in (None, "") or isinstance(speed, (int, float))
                                                     else str(speed))
            rows.append([host, facts.get("iface"), facts.get("mtu"), facts.get("link_layer"), speed_text,
                         facts.get("operstate")])
        else:
            rows.append([host, facts, "", "", "", ""])
    return [["–" if v is None else str(v) for v in r] for r in rows]


def ratio_text(value: Any) -> str:
    return "–" if missing(value) else f"{float(value):.3f}×"


def report_title(df: pd.DataFrame) -> str:
    names = list(runs_named(df).values())
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"commbench report — {shown}"


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
