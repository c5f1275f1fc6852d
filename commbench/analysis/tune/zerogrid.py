"""The ZeRO stage x reduce-bucket grid of `commbench zero --bucket-size a,b,c`.

Each cell is one stage's training step with one reduce_bucket_size: the median over repetitions of
the step time and of the effective bus bandwidth. `plot` and `report` draw it as a heat map (one
per run) and list it as a table, so a user reads off the bucket size that makes each stage's step
shortest. Stage 0 ignores reduce_bucket_size (DeepSpeed's fixed 5e8-element buckets), so its row
is flat up to noise; it stays in the grid as the data-parallel reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from commbench.analysis.points.figures import draw_heatmap, mpl_text, new_figure
from commbench.core.vocab import get_dtype
from commbench.core.errors import BadInput
from commbench.core.units import format_size

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

METRIC_COLUMNS = {"busbw": "busbw_GBps", "algbw": "algbw_GBps", "time": "time_us"}


@dataclass
class ZeroGrid:
    """One run's grid (at one setting and accumulation): rows are stages, columns reduce bucket
    sizes (NaN where not measured)."""

    run_id: str
    label: str
    dtype: str
    stages: list[int]
    bucket_elems: list[int]
    bucket_bytes: list[int]
    time_ms: np.ndarray
    busbw: np.ndarray
    algbw: np.ndarray
    collectives: np.ndarray
    reps: np.ndarray
    part: str = ""  # which setting and accumulation of the run, where it measured several

    @property
    def name(self) -> str:
        return (self.label or self.run_id) + (f" [{self.part}]" if self.part else "")

    def values(self, metric: str) -> np.ndarray:
        return {"busbw": self.busbw, "algbw": self.algbw, "time": self.time_ms}[metric]

    def best_bucket(self) -> dict[int, int]:
        """Per stage with any measurement: the bucket size (elements) with the shortest step."""
        best = {}
        for i, stage in enumerate(self.stages):
            row = self.time_ms[i]
            if np.isfinite(row).any():
                best[stage] = self.bucket_elems[int(np.nanargmin(row))]
        return best


def zero_rows(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """The rows of `commbench zero` schedule runs (not the engine's, not other workloads)."""
    if df is None or len(df) == 0 or "workload" not in df.columns or "zero_stage" not in df.columns:
        return df.iloc[0:0] if df is not None else None
    return df[df["workload"].eq("zero") & df["zero_stage"].notna() & df["bucket_bytes"].notna()]


# What else a zero run can vary besides stage and bucket: a grid is one run at one value of each
# (`--env` settings, `--grad-accum`), so that no cell's median mixes two of them.
_SPLITS = ("settings", "grad_accum")


def grids(df: pd.DataFrame | None) -> list[ZeroGrid]:
    """One grid per run (run_id), and per setting and gradient accumulation where the run measured
    more than one, in the order the runs appear."""
    rows = zero_rows(df)
    if rows is None or len(rows) == 0:
        raise BadInput("the results hold no `commbench zero` rows: run e.g. "
                       "`commbench zero --bucket-size 1e6,5e7,5e8` for a stage x bucket grid")
    out = []
    for run_id, run in rows.groupby("run_id", sort=False):
        splits = [c for c in _SPLITS if c in run.columns and run[c].nunique(dropna=False) > 1]
        if not splits:
            out.append(_grid(str(run_id), run, ""))
            continue
        for key, g in run.groupby(splits, sort=False, dropna=False):
            values = dict(zip(splits, key if isinstance(key, tuple) else (key,)))
            out.append(_grid(str(run_id), g, _part_name(values)))
    return out


def _part_name(values: dict) -> str:
    parts = []
    if "settings" in values:
        parts.append(str(values["settings"]) if isinstance(values["settings"], str) else "no setting")
    if "grad_accum" in values:
        accum = values["grad_accum"]
        known = isinstance(accum, (int, float, np.integer, np.floating)) and np.isfinite(accum)
        parts.append(f"GAS {int(accum)}" if known else "GAS ?")
    return ", ".join(parts)


def _grid(run_id: str, g: pd.DataFrame, part: str) -> ZeroGrid:
    """One grid from the rows of one run (one setting, one accumulation): medians over repetitions."""
    dtype = str(g["dtype"].iloc[0])
    try:
        itemsize = get_dtype(dtype).itemsize
    except BadInput:
        itemsize = 1  # an unknown dtype name from a foreign file: show bytes as elements
    stages = sorted(int(s) for s in g["zero_stage"].unique())
    buckets = sorted(int(b) for b in g["bucket_bytes"].unique())
    shape = (len(stages), len(buckets))
    cells = {name: np.full(shape, np.nan) for name in ("time_ms", "busbw", "algbw", "collectives", "reps")}
    med = g.groupby(["zero_stage", "bucket_bytes"]).agg(
        time=("time_us", "median"), busbw=("busbw_GBps", "median"), algbw=("algbw_GBps", "median"),
        n=("n_collectives", "median") if "n_collectives" in g.columns else ("time_us", "size"),
        reps=("time_us", "size"))
    for (stage, bucket), r in med.iterrows():
        i, j = stages.index(int(stage)), buckets.index(int(bucket))
        cells["time_ms"][i, j] = r["time"] / 1e3
        cells["busbw"][i, j] = r["busbw"]
        cells["algbw"][i, j] = r["algbw"]
        cells["collectives"][i, j] = r["n"]
        cells["reps"][i, j] = r["reps"]
    label = g["label"].iloc[0] if "label" in g.columns else ""
    return ZeroGrid(run_id=run_id, label=str(label) if isinstance(label, str) else "", dtype=dtype, stages=stages,
                    bucket_elems=[b // itemsize for b in buckets], bucket_bytes=buckets, part=part, **cells)


def bucket_text(elems: int) -> str:
    """5e8-style element counts, as ds_config.json writes them."""
    return f"{elems:.3g}".replace("e+0", "e").replace("e+", "e")


def draw(ax: Axes, grid: ZeroGrid, metric: str = "busbw") -> AxesImage:
    """The heat map of one grid on `ax`; returns the image (for a colour bar)."""
    if metric not in METRIC_COLUMNS:
        raise BadInput(f"--metric {metric!r} is not one of {', '.join(METRIC_COLUMNS)}")
    values = grid.values(metric)
    texts = [[("–" if not np.isfinite(grid.time_ms[i, j]) else
               f"{grid.time_ms[i, j]:.4g} ms\n{grid.busbw[i, j]:.3g} GB/s")
              for j in range(len(grid.bucket_elems))] for i in range(len(grid.stages))]
    best = grid.best_bucket()
    # a box says "the shortest of this stage's steps": only where the stage has steps to choose from
    # (one bucket size would box every cell)
    choices = np.isfinite(grid.time_ms).sum(axis=1)
    marked = [(i, grid.bucket_elems.index(best[s])) for i, s in enumerate(grid.stages) if s in best and choices[i] > 1]
    image = draw_heatmap(
        ax, values, row_labels=[f"stage {s}" for s in grid.stages],
        col_labels=[f"{bucket_text(e)}\n({format_size(b)})" for e, b in zip(grid.bucket_elems, grid.bucket_bytes)],
        texts=texts, higher_is_better=(metric != "time"), marked=marked)
    ax.set_xlabel(f"reduce_bucket_size in elements ({grid.dtype} bytes below)")
    ax.set_ylabel("ZeRO stage")
    note = " (box: shortest step per stage)" if marked else ", one bucket size"
    ax.set_title(mpl_text(f"{grid.name}: step time and effective busbw{note}"), fontsize=9, loc="left")
    return image


def build_figure(df: pd.DataFrame | None, metric: str = "busbw") -> Figure:
    """One heat map per run, side by side, with a shared colour bar label."""
    all_grids = grids(df)
    fig = new_figure(width=max(7.0, 1.9 * max(len(g.bucket_elems) for g in all_grids) + 2.5) * len(all_grids),
                     height=1.1 * max(len(g.stages) for g in all_grids) + 2.4)
    axes = fig.subplots(1, len(all_grids), squeeze=False)[0]
    label = {"busbw": "effective busbw (GB/s)", "algbw": "algbw (GB/s)", "time": "step time (ms)"}[metric]
    for ax, grid in zip(axes, all_grids):
        image = draw(ax, grid, metric)
        fig.colorbar(image, ax=ax, label=label, shrink=0.9)
    fig.suptitle("ZeRO stage x reduce bucket size: one training step's communication", fontsize=12,
                 fontweight="bold")
    return fig


def table_rows(grid: ZeroGrid) -> list[list[str]]:
    """Rows for the report's table: stage, bucket, collectives, step time, busbw, best mark."""
    best = grid.best_bucket()
    rows = []
    for i, stage in enumerate(grid.stages):
        for j, elems in enumerate(grid.bucket_elems):
            if not np.isfinite(grid.time_ms[i, j]):
                continue
            rows.append([f"{stage}", bucket_text(elems), format_size(grid.bucket_bytes[j]),
                         f"{int(grid.collectives[i, j])}" if np.isfinite(grid.collectives[i, j]) else "–",
                         f"{grid.time_ms[i, j]:.4g}", f"{grid.busbw[i, j]:.3g}", f"{int(grid.reps[i, j])}",
                         "shortest" if best.get(stage) == elems and len(grid.bucket_elems) > 1 else ""])
    return rows


TABLE_HEADERS = ["stage", "reduce_bucket_size", "bucket bytes", "collectives", "step time (ms)",
                 "effective busbw (GB/s)", "repetitions", "note"]
