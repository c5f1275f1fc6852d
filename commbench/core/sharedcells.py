"""Shared cells: a results column that repeats one value on every row of a run (the JSON columns
env, net and plan; the hosts list), read as one Python object per distinct value that all its rows
point at, not a copy per row (core/results.py read_results reads them so)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from commbench.core.inputs import MAX_NESTING, UNREADABLE, nests_deeper

if TYPE_CHECKING:
    import pandas as pd

# JSON columns repeat one long string on every row of a run (net holds every host's facts: kilobytes
# a host). Read dictionary-encoded, as parquet stores them, and share one Python string per distinct
# value: decoded per row, a million rows of a 32-node run would take tens of gigabytes.
SHARED_STRINGS = ("env", "net", "plan")


def _within_nesting(text: str | None) -> str | None:
    """A JSON cell nested deeper than MAX_NESTING (a damaged or hostile file: json.loads would end in
    a RecursionError in every reader) read as the JSON string UNREADABLE: shown as such by report,
    refused as not an object by compare. Checked once per distinct value, not per row."""
    if isinstance(text, str) and nests_deeper(text, MAX_NESTING):
        return json.dumps(UNREADABLE)
    return text


def shared_strings(column: pa.ChunkedArray) -> pd.Series:
    """An object column (NaN where missing, as pandas shows a missing string) whose rows point at
    one str per distinct value of the dictionary-encoded column. Object dtype on purpose: pandas
    would turn an array of str into its own string dtype, a copy per row again."""
    import numpy as np
    import pandas as pd

    values = np.empty(len(column), dtype=object)
    at = 0
    for chunk in column.chunks:
        distinct = np.empty(len(chunk.dictionary) + 1, dtype=object)
        distinct[:-1] = [_within_nesting(v) for v in chunk.dictionary.to_pylist()]
        distinct[-1] = np.nan
        index = chunk.indices.fill_null(len(chunk.dictionary)).to_numpy(zero_copy_only=False)
        values[at:at + len(chunk)] = distinct[index]
        at += len(chunk)
    return pd.Series(values, dtype=object, copy=False)


def shared_lists(column: pa.ChunkedArray) -> pd.Series:
    """A list-of-strings column (hosts: one list on every row of a run) as an object column whose
    rows share one array per distinct list, the array to_pandas makes for that list (a million
    rows of a 32-host list would otherwise be a million arrays)."""
    import numpy as np
    import pandas as pd

    values = np.empty(len(column), dtype=object)
    at = 0
    for chunk in column.chunks:
        n = len(chunk)
        if n == 0:
            continue
        # One text per list that no other list shares: every item as <length>:<item>, joined.
        items = chunk.values
        tagged = pc.binary_join_element_wise(pc.cast(pc.utf8_length(items), pa.string()), items, ":")
        text = pc.binary_join(pa.ListArray.from_arrays(chunk.offsets, tagged), "")
        codes = pc.dictionary_encode(text).indices.fill_null(-1).to_numpy(zero_copy_only=False)
        plain = (codes >= 0) & ~chunk.is_null().to_numpy(zero_copy_only=False)
        part = np.empty(n, dtype=object)
        rows = np.flatnonzero(plain)
        if rows.size:
            distinct, first = np.unique(codes[rows], return_index=True)
            lookup = np.empty(int(distinct.max()) + 1, dtype=object)
            lookup[distinct] = chunk.take(pa.array(rows[first])).to_pandas().to_numpy(dtype=object)
            part[rows] = lookup[codes[rows]]
        others = np.flatnonzero(~plain)  # null lists, lists holding a null: as to_pandas makes them
        if others.size:
            part[others] = chunk.take(pa.array(others)).to_pandas().to_numpy(dtype=object)
        values[at:at + n] = part
        at += n
    return pd.Series(values, dtype=object, copy=False)
