"""A results table as every analysis command reads it (compare, gate, plot, report).

Cell values as plain Python (every kind of missing is None), JSON cells read without recursing
into a hostile nesting (`json_cell`), the checks a table passes before it is compared or gated,
the rows a curve is drawn from (`prepare`), and text from a file kept on one printable line
(core/safetext.py), or inert in Markdown.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from commbench.core.columns import LINE_KEY
from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_NESTING, UNREADABLE, nests_deeper
from commbench.core.results import check_schema_versions
from commbench.core.safetext import printable  # text from the files on one line: compare, gate, sides use it from here

# The columns compare and gate cannot do without (read_results refuses files without them too).
REQUIRED_COLUMNS = ("collective", "size_bytes", "busbw_GBps", "schema_version")

# Line identity of a curve: everything that makes two rows different lines.
GROUP_KEYS = LINE_KEY  # core/columns.py
# A buckets row is drawn as its collective with this suffix, at its bucket size.
BUCKETS_SUFFIX = " in buckets"


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


def prepare(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows a curve of `column` is drawn from: every GROUP_KEYS column present, buckets rows
    at their bucket size, rows without a finite value (or a positive time) left out. A frame of
    its own: changing it leaves the caller's alone."""
    if df is None or len(df) == 0:
        raise BadInput("the results hold no points (an empty or interrupted run): nothing to plot")
    missing = [c for c in ("collective", "size_bytes", column) if c not in df.columns]
    if missing:
        raise BadInput(f"the results have no column {missing[0]}: pass files written by commbench")
    # Changing d must not change the caller's frame. pandas >= 3 copies on write, so a shallow copy
    # is enough there; a deep one of a million rows was most of the time a figure took.
    d = df.copy(deep=int(pd.__version__.split(".")[0]) < 3)
    for k in GROUP_KEYS:
        if k not in d.columns:
            d[k] = ""
    d["label"] = d["label"].fillna("")
    d["dtype"] = d["dtype"].fillna("?")
    d["in_place"] = d["in_place"].fillna(False).astype(bool)
    d["run_id"] = d["run_id"].fillna("?")
    if "wrong" not in d.columns:
        d["wrong"] = pd.NA
    if "bucket_bytes" in d.columns and "workload" in d.columns:
        # A buckets row measures one step reduced in buckets: its message size is the bucket.
        buckets = d["workload"].eq("buckets") & d["bucket_bytes"].notna()
        d.loc[buckets, "collective"] = d.loc[buckets, "collective"].astype(str) + BUCKETS_SUFFIX
        # bucket_bytes is an object column in frames built from dicts with None: numbers first
        d.loc[buckets, "size_bytes"] = pd.to_numeric(d.loc[buckets, "bucket_bytes"]).astype("int64")
    values = pd.to_numeric(d[column], errors="coerce")
    keep = np.isfinite(values.to_numpy(dtype=float)) & (pd.to_numeric(d["size_bytes"], errors="coerce") > 0)
    if column == "time_us":
        keep &= values.to_numpy(dtype=float) > 0
    if not keep.all():  # filtering copies every column again: only when a row goes
        d = d[keep]
    if len(d) == 0:
        raise BadInput(f"the results hold no finite {column} values: nothing to plot")
    return d


# ---- text from the files ----


def md_cell(text: str) -> str:
    """Text from the files must not become Markdown or HTML structure in a ticket."""
    return (printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|"))


def short(text: str, limit: int) -> str:
    """At most `limit` characters, an ellipsis where cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
