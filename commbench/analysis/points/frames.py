"""A results table as every analysis command reads it (compare, gate, plot, report).

Cell values as plain Python (every kind of missing is None), JSON cells read without recursing
into a hostile nesting (`json_cell`), the checks a table passes before it is compared or gated,
and text from a file kept on one printable line
(core/safetext.py), or inert in Markdown.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_NESTING, UNREADABLE, nests_deeper
from commbench.core.results import check_schema_versions
from commbench.core.safetext import printable  # text from the files on one line: compare, gate, sides use it from here

# The columns compare and gate cannot do without (read_results refuses files without them too).
REQUIRED_COLUMNS = ("collective", "size_bytes", "busbw_GBps", "schema_version")


# ---- cell values ----


def scalar(value: Any) -> Any:
    """numpy / pandas scalars -> Python; every kind of missing -> None."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def column(frame: pd.DataFrame, name: str) -> list:
    """A column as Python values (None where missing, and for every row when there is no such column)."""
    if name not in frame.columns:
        return [None] * len(frame)
    return [scalar(v) for v in frame[name].to_numpy(dtype=object)]


def as_list(value: Any) -> list[Any]:
    """A list cell (hosts) as a list: [] when missing, one item for a plain value."""
    if value is None:
        return []
    if isinstance(value, float) and math.isnan(value):
        return []
    if isinstance(value, str):
        return [value]
    try:
        return list(value)
    except TypeError:
        return [value]


def is_true(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Per row: the column holds true (a flag such as `confirm`); False where it is missing, and for
    every row when there is no such column."""
    if name not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    return frame[name].eq(True).fillna(False).to_numpy(dtype=bool)


def present(value: Any) -> bool:
    """A cell that holds something: not None, NaN or ""."""
    if value is None:
        return False
    try:
        return not (isinstance(value, float) and math.isnan(value)) and value == value and str(value) != ""
    except (TypeError, ValueError):
        return True


def jsonable(value: Any) -> Any:
    """A dataclass dict for json.dumps: tuples as lists, NaN and infinities as None."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_cell(text: Any) -> Any:
    """A JSON column's cell (env, net, plan) as Python values: None when missing or empty, the text
    itself when it is not JSON, UNREADABLE when it nests deeper than MAX_NESTING levels (checked by
    a scan before json.loads, so a hostile cell costs a pass over its text and no recursion: json
    would end in a RecursionError, and every later json.dumps of it). read_results already puts
    UNREADABLE, as a JSON string, in place of such a cell; this guards frames made otherwise."""
    value = text if isinstance(text, str) else scalar(text)
    if value is None or (isinstance(value, str) and value == ""):
        return None
    if not isinstance(value, str):
        return value
    if nests_deeper(value, MAX_NESTING):
        return UNREADABLE
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


# ---- checks ----


def check_frame(frame: pd.DataFrame, side: str) -> None:
    """A table compare or gate can judge: a DataFrame with the required columns, of a schema
    version this commbench compares. `side` names it in messages ("before", "gated")."""
    if not isinstance(frame, pd.DataFrame):
        raise BadInput(f"the {side} side is not a table of results")
    if len(frame) == 0:
        return
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise BadInput(f"the {side} results have no column {missing[0]}: pass files written by commbench")
    check_schema_versions({scalar(v) for v in frame["schema_version"].unique()}, f"the {side} results",
                          comparing=True)


# ---- text from the files ----


def md_cell(text: str) -> str:
    """Text from the files must not become Markdown or HTML structure in a ticket."""
    return (printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|"))


def short(text: str, limit: int) -> str:
    """At most `limit` characters, an ellipsis where cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
