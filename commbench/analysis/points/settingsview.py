"""The settings axis of a results table (`--env NAME=v1|v2`, `--mtu`), as plot, report and compare show it.

A row's `settings` cell is "NAME=value" per axis joined by spaces ("GLOO_SOCKET_IFNAME=eth1",
"NCCL_ALGO=Ring NCCL_PROTO=LL", "MTU=9000"), null when the run had no axis; files older than the
column have none. Both read as "" here, so an old file is one setting, "no setting", and draws and
reports exactly as before. The report's "Settings" section (`settings_tables`) puts the settings of
each collective side by side per size: the best one, the worst one and their ratio.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from commbench.analysis.points import points
from commbench.analysis.points.frames import printable, scalar
from commbench.analysis.points.points import SETTINGS
from commbench.analysis.points.pointtable import Query
from commbench.analysis.points.runs import placement_name
from commbench.core.errors import BadInput
from commbench.core.units import format_size
from commbench.core.vocab import order_key

NO_SETTING = "(no setting)"
HEADERS = ["size", "best setting", "best busbw (GB/s)", "worst setting", "worst busbw (GB/s)", "best/worst"]
NOTE = ("The same collective measured under each setting (--env, --mtu): per size, the setting with the "
        "highest median busbw over every run and repetition, the one with the lowest, and the ratio of the two. "
        "Only sizes measured under at least two settings are listed.")


def setting_name(value: object) -> str:
    """A setting as a legend or table shows it: the text, or NO_SETTING."""
    v = scalar(value)
    return printable(str(v)) if v not in (None, "") else NO_SETTING


def distinct(frame: pd.DataFrame | None) -> list[str]:
    """The settings a frame holds, in the order of their first row; "" for rows without one."""
    if frame is None or len(frame) == 0:
        return []
    if SETTINGS not in frame.columns:
        return [""]
    return list(dict.fromkeys("" if v is None else str(v) for v in map(scalar, frame[SETTINGS].unique())))


def settings_text(values: Iterable[str]) -> str:
    """The settings of a side in one phrase: "GLOO_SOCKET_IFNAME=eth0|eth1" when every setting is one
    value of the same axis, else the settings joined by "; "; "none" when there is no setting."""
    values = list(dict.fromkeys("" if v is None else v for v in values))
    present = [printable(str(v)) for v in values if v not in (None, "")]
    if not present:
        return "none"
    names = {v.split("=", 1)[0] for v in present}
    if len(names) == 1 and all("=" in v and " " not in v for v in present):
        text = f"{names.pop()}=" + "|".join(v.split("=", 1)[1] for v in present)
    else:
        text = "; ".join(present)
    return text + (" and rows without one" if len(present) < len(values) else "")


@dataclass
class SettingsTable:
    """One collective (dtype, placement, ranks) under its settings: a title, the line naming the
    setting best at most sizes, and HEADERS rows (plain text)."""

    title: str
    line: str
    rows: list[list[str]]


def settings_tables(rows: pd.DataFrame | Query | None) -> list[SettingsTable]:
    """The "Settings" section of a report: [] unless the rows drawn hold more than one setting."""
    if rows is None or (isinstance(rows, pd.DataFrame) and (len(rows) == 0 or len(distinct(rows)) < 2)):
        return []
    keys = ["collective", "dtype", "in_place", "world_size"]
    med = points.medians(rows, [*keys, SETTINGS]).rename(columns={"busbw": "busbw_GBps"})
    if med[SETTINGS].nunique() < 2:
        return []
    several_worlds = med["world_size"].nunique() > 1
    out = []
    for key, g in sorted(med.groupby(keys, sort=False), key=lambda kg: (order_key(kg[0][0]), str(kg[0][1]),
                                                                          not kg[0][2], kg[0][3])):
        table = _table(g, several_worlds, key)
        if table is not None:
            out.append(table)
    return out


def _table(g: pd.DataFrame, several_worlds: bool, key: tuple[Any, ...]) -> SettingsTable | None:
    """One group's table, or None when no size of it was measured under two settings."""
    collective, dtype, in_place, world = key
    rows: list[list[str]] = []
    bests: Counter[str] = Counter()
    ratios: list[float] = []
    for size, at in sorted(g.groupby("size_bytes", sort=False), key=lambda sg: sg[0]):
        if len(at) < 2:
            continue
        values = at["busbw_GBps"].to_numpy(dtype=float)
        names = at[SETTINGS].tolist()
        # ties go to the setting seen first (the order given on the command line)
        best, worst = int(np.argmax(values)), int(np.argmin(values))
        ratio = values[best] / values[worst] if values[worst] > 0 else float("inf")
        bests[names[best]] += 1
        ratios.append(ratio)
        rows.append([format_size(int(size)), setting_name(names[best]), _num(values[best]),
                     setting_name(names[worst]), _num(values[worst]), f"{ratio:.3g}×"])
    if not rows:
        return None
    title = f"{collective} {dtype} {placement_name(in_place)}" + (f" on {int(world)} ranks" if several_worlds else "")
    return SettingsTable(title=printable(title), line=_best_line(bests, len(rows), ratios), rows=rows)


def _best_line(bests: Counter, sizes: int, ratios: list[float]) -> str:
    """'GLOO_SOCKET_IFNAME=eth0 is best at 5 of 5 sizes (median best/worst 3.41×)'."""
    top = max(bests.values())
    leaders = [setting_name(s) for s, n in bests.items() if n == top]
    ratio = float(np.median(ratios))
    spread = f"median best/worst {ratio:.3g}×"
    if len(leaders) == 1:
        return f"{leaders[0]} is best at {top} of {sizes} size{'s' if sizes != 1 else ''} ({spread})"
    return f"{' and '.join(leaders)} are each best at {top} of {sizes} sizes ({spread})"


def _num(x: float) -> str:
    return f"{x:.4g}"


def select(frame: pd.DataFrame, wanted: str, side: str, flag: str) -> pd.DataFrame:
    """The rows of one setting (compare --before-setting/--after-setting), their `settings` cleared
    so that they pair with the other side's chosen setting; a setting the side does not hold is
    refused with the ones it does."""
    have = distinct(frame)
    if wanted not in have:
        listed = ", ".join(repr(v) for v in have if v) or "none"
        raise BadInput(f"{flag} {wanted!r}: the {side} results have no rows of that setting (they have "
                       f"{listed}): pass one of them, quoted, e.g. {flag} 'GLOO_SOCKET_IFNAME=eth0'")
    rows = frame[frame[SETTINGS].map(lambda v: ("" if scalar(v) is None else str(scalar(v))) == wanted)].copy()
    rows[SETTINGS] = None
    return rows
