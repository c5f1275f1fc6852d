"""What both formats of `commbench report` show of its runs, as plain rows and text: a run's facts,
its network and late arrivals, the report's title. The HTML page (report.py) and the Markdown
(markdown.py) escape these values; nothing here is markup. The curves' tables and the number formats
are curves/curvetables.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import pandas as pd

from commbench.analysis.points.frames import as_list, json_cell
from commbench.analysis.points.points import SETTINGS
from commbench.analysis.points.pointtable import Source
from commbench.analysis.points.runs import compact_hosts, missing, runs_named
from commbench.analysis.points.settingsview import distinct, settings_text
from commbench.core.linkrate import host_rate
from commbench.core.units import format_size
from commbench.core.vocab import order_key


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


def report_title(df: pd.DataFrame) -> str:
    names = list(runs_named(df).values())
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"commbench report — {shown}"


