"""The gated rows of a run as plain columns, read once for judging and suggesting alike.

Only the rows of GATED_WORKLOADS (one collective at one size) are kept; the others are counted in
`ignored`. On one rank the value is algbw (busbw is 0 there by definition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from commbench.analysis.gate.bands import GATED_WORKLOADS
from commbench.analysis.points.frames import check_frame, column
from commbench.core.columns import GROUP_KEY
from commbench.core.errors import BadInput
from commbench.core.grouplabel import group_label


@dataclass
class Rows:
    """The gated rows of a run as plain columns (one entry per row)."""

    collective: list
    size_bytes: list
    world_size: list
    dtype: list
    op: list
    in_place: list
    nnodes: list
    workload: list
    value: np.ndarray  # busbw, or algbw on one rank (busbw is 0 there by definition)
    wrong: list
    time_us: list
    samples: list
    run_id: list
    settings: list  # None where a row has no setting
    group: list  # a layout run's group label (core/grouplabel.py), None off one
    ignored: dict  # workload -> rows left out
    # Rows grouped (analysis/points/pointtable.py: large inputs): entry i stands for counts[i] rows whose values
    # are value[starts[i]:starts[i] + counts[i]], and wrong[i] counts its wrong ones. None: a row an entry.
    starts: np.ndarray | None = None
    counts: np.ndarray | None = None
    index: dict | None = None  # (collective, size_bytes, world_size) -> its entries, built once


def read_rows(frame: pd.DataFrame) -> Rows:
    check_frame(frame, "gated")
    if len(frame) == 0:
        raise BadInput("the results hold no rows: pass a run that measured something")
    workloads = [w if w is not None else "sweep" for w in column(frame, "workload")]
    keep = [w in GATED_WORKLOADS for w in workloads]
    ignored: dict = {}
    for w, k in zip(workloads, keep):
        if not k:
            ignored[w] = ignored.get(w, 0) + 1

    def col(name: str) -> list:
        return [v for v, k in zip(column(frame, name), keep) if k]

    world = col("world_size")
    busbw = np.asarray(col("busbw_GBps"), dtype=float)
    if any(w == 1 for w in world):
        alg = np.asarray(col("algbw_GBps"), dtype=float)
        busbw = np.where(np.asarray([w == 1 for w in world], dtype=bool), alg, busbw)
    samples = col("samples_us") if "samples_us" in frame.columns else [None] * len(world)
    return Rows(collective=col("collective"), size_bytes=[None if v is None else int(v) for v in col("size_bytes")],
                 world_size=world, dtype=col("dtype"), op=col("op"),
                 in_place=[None if v is None else bool(v) for v in col("in_place")], nnodes=col("nnodes"),
                 workload=[w if w is not None else "sweep" for w in col("workload")], value=busbw,
                 wrong=col("wrong"), time_us=col("time_us"), samples=samples,
                 run_id=col("run_id") if "run_id" in frame.columns else [None] * len(world),
                 settings=[v or None for v in col("settings")], ignored=ignored,
                 group=[group_label(*g) or None for g in zip(*(col(c) if c in frame.columns else [None] * len(world)
                                                               for c in GROUP_KEY))])


def row_values(rows: Rows, idx: list[int], what: str) -> np.ndarray:
    if rows.counts is None:
        v = rows.value[idx]
    else:
        starts, counts = rows.starts, rows.counts
        assert starts is not None  # grouped rows have both
        v = np.concatenate([rows.value[starts[i]:starts[i] + counts[i]] for i in idx] or [np.zeros(0)])
    if not np.all(np.isfinite(v) & (v > 0)):
        raise BadInput(f"the results hold busbw_GBps {v[~(np.isfinite(v) & (v > 0))][0]} for {what}: a damaged "
                       "or hand-edited file; re-run the measurement")
    return v
