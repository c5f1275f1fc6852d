"""What differs between two sides' runs: what should be the same (a warning), what is expected to differ.

Both are read from the distinct values of the columns that describe a run (core/columns.py's
`warn` and `differs` roles), the environment snapshots (NCCL_*, GLOO_*) and each host's network
facts, said with the hosts and rails where they differ (analysis/points/hostfacts.py). A run compared with
itself is said first.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from commbench.analysis.points import hostfacts
from commbench.analysis.points.frames import column, printable, scalar
from commbench.core import columns
from commbench.core.errors import BadInput

# Should be the same on both sides (a difference makes the comparison suspect), and expected to
# differ (usually the point of the comparison: shown, not warned about): core/columns.py's roles.
WARN_COLUMNS, DIFFERENCE_COLUMNS = columns.WARN_COLUMNS, columns.DIFFERENCE_COLUMNS
ENV_PREFIXES = ("NCCL_", "GLOO_")


def _hashable(v: Any) -> Any:
    v = scalar(v) if not isinstance(v, (list, tuple, np.ndarray)) else v
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(scalar(x) for x in v)
    return v


def run_values(frame: pd.DataFrame, name: str) -> set:
    if name not in frame.columns:
        return set()
    values = frame[name]
    try:
        distinct = values.unique()
    except TypeError:  # list columns (hosts) hold arrays, which do not hash: each distinct list once
        rows = {id(v): v for v in values.to_numpy(dtype=object)}.values()  # rows may share one array
        distinct = {tuple(v.tolist()) if isinstance(v, np.ndarray) else tuple(v) if isinstance(v, list) else v
                    for v in rows}
    return {_hashable(v) for v in distinct}


def _show(values: set) -> str:
    def one(v: Any) -> str:
        if v is None:
            return "(none)"
        if isinstance(v, tuple):
            return printable(",".join(map(str, v))) or "(none)"
        return printable(str(v)) if v != "" else '""'

    shown = sorted(one(v) for v in values)
    return shown[0] if len(shown) == 1 else "{" + "; ".join(shown) + "}"


SAME_RUN = "before and after are the same"  # how the warning that a run is compared with itself starts


def same_run_warning(before_ids: set, after_ids: set, same_file: str | None = None) -> str | None:
    """The warning that both sides hold the same run (or the same file): a run compared with itself
    can only look unchanged. None when the sides share no run and are not one file."""
    before_ids, after_ids = {str(v) for v in before_ids if v is not None}, {str(v) for v in after_ids if v is not None}
    shared = sorted(before_ids & after_ids)
    if same_file is not None and (not shared or before_ids != after_ids):
        return f"{SAME_RUN} file ({printable(same_file)}): a run compared with itself; pass two different runs' results"
    if not shared:
        return None
    names = ", ".join(printable(n) for n in shared[:3]) + (f" and {len(shared) - 3} more" if len(shared) > 3 else "")
    if before_ids == after_ids:
        return (f"{SAME_RUN} run{'s' if len(shared) > 1 else ''} ({names}): a run compared with itself; "
                "pass two different runs' results")
    return (f"before and after share {len(shared)} run{'s' if len(shared) > 1 else ''} ({names}): their rows are "
            "compared with themselves; pass results of different runs")


def warnings_between(before: pd.DataFrame, after: pd.DataFrame) -> list[str]:
    out: list[str] = []
    if len(before) == 0 or len(after) == 0:
        return out
    for name in ("schema_version",) + WARN_COLUMNS:
        bv, av = run_values(before, name), run_values(after, name)
        if (bv or av) and bv != av:
            out.append(f"{name} differs: before {_show(bv)}, after {_show(av)}")
    return out


def _env_values(frame: pd.DataFrame, side: str) -> dict[str, set]:
    if "env" not in frame.columns:
        return {}
    snapshots: list[dict[str, Any]] = []
    try:
        texts = {scalar(v) for v in frame["env"].unique()}  # a run repeats its snapshot on every row
    except TypeError:
        texts = set(column(frame, "env"))
    for text in texts:
        if text is None or text == "":
            snapshots.append({})
            continue
        try:
            env = json.loads(text)
        except (TypeError, ValueError):
            raise BadInput(f"the {side} results hold an env column that is not JSON: a damaged or "
                           "hand-edited file") from None
        if not isinstance(env, dict):
            raise BadInput(f"the {side} results hold an env column that is not a JSON object")
        snapshots.append(env)
    names = {n for env in snapshots for n in env if n.startswith(ENV_PREFIXES)}
    return {n: {env.get(n) for env in snapshots} for n in names}


def differences_between(before: pd.DataFrame, after: pd.DataFrame) -> list[str]:
    """The setup differences, each with where it holds: a network fact the hosts' `net` cells
    record (link rate, mtu, iface, link_layer) per host and rail (analysis/points/hostfacts.py), the other
    columns and the environment as the runs record them."""
    out: list[str] = []
    if len(before) == 0 or len(after) == 0:
        return out
    bfacts, afacts = _facts(before), _facts(after)
    per_host = {f: hostfacts.difference(f, bfacts, afacts) for f in hostfacts.FACTS}
    for name in DIFFERENCE_COLUMNS + ("workload",):
        line = per_host.pop(name, None)
        if line:  # rank 0's column: the hosts' own facts say more, and where
            out.append(line)
            continue
        bv, av = run_values(before, name), run_values(after, name)
        if (bv or av) and bv != av:
            out.append(f"{name}: before {_show(bv)}, after {_show(av)}")
    benv, aenv = _env_values(before, "before"), _env_values(after, "after")
    for name in sorted(set(benv) | set(aenv)):
        bv, av = benv.get(name, {None}), aenv.get(name, {None})
        if bv != av:
            out.append(f"{name}: before {_show(bv).replace('(none)', '(unset)')}, "
                       f"after {_show(av).replace('(none)', '(unset)')}")
    out += [line for line in per_host.values() if line]  # the link rate (a fact of no column)
    return out


def _facts(frame: pd.DataFrame) -> hostfacts.Facts:
    """Each host's network facts over the side's runs (analysis/points/hostfacts.py)."""
    if "net" not in frame.columns:
        return {}
    try:
        cells = {scalar(v) for v in frame["net"].unique()}  # a run repeats its facts on every row
    except TypeError:
        cells = set(column(frame, "net"))
    return hostfacts.side_facts(cells)
