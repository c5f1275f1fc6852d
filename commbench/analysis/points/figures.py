"""The matplotlib pieces every figure shares (curves, the ZeRO grid, the pairs heat map).

A figure is a plain `matplotlib.figure.Figure` on the Agg canvas, so nothing here touches pyplot's
global state. Every string that comes from a results file goes through `mpl_text`: a `$` in a
label cannot start mathtext and break or restyle the figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from commbench.core import outtext

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

DPI = 110
HATCH_FACE, HATCH_EDGE = "#c8c8c8", "#8a8a8a"  # a cell where nothing could be measured


def mpl_text(value: object, limit: int = outtext.LIMIT) -> str:
    """A string safe to hand matplotlib, line by line (core/outtext.py `figure`): '$' would start
    mathtext (and can raise while drawing), a control character makes an SVG invalid XML, and a
    line of a million characters takes minutes to lay out; each line is bounded."""
    text = str(value)
    if "\n" not in text:
        return outtext.figure(text, limit)
    return "\n".join(outtext.figure(line, limit) for line in text.split("\n"))


def new_figure(width: float = 12.0, height: float = 7.8) -> Figure:
    """An empty Figure on its own Agg canvas (constrained layout)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def draw_heatmap(ax: Axes, values: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str],
                 texts: Sequence[Sequence[str]] | None = None, higher_is_better: bool = True,
                 marked: Iterable[tuple[int, int]] = (), hatched: Iterable[tuple[int, int]] = ()) -> AxesImage:
    """A matrix as coloured cells with a text in each (the ZeRO grid, the host x host pairs).
    Better cells are lighter (the eye goes to the dark ones); NaN cells stay blank; `marked`
    cells get a black box; `hatched` cells (NaN: nothing measured there, e.g. a failed link) are
    grey with diagonal hatching, under their text. The colour scale is set by the finite cells
    only. Returns the image for a colour bar."""
    import matplotlib

    values = np.asarray(values, dtype=float)
    hatched = set(hatched)
    cmap = matplotlib.colormaps["viridis" if higher_is_better else "viridis_r"].with_extremes(bad="#f0f0f0")
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    # values spanning more than 10x (a step of 10 s beside 0.5 s) get a log scale: else one cell is
    # dark and every other one the same light colour
    norm: Normalize
    if lo > 0 and hi > 10 * lo:
        from matplotlib.colors import LogNorm

        norm, mid = LogNorm(vmin=lo, vmax=hi), math.sqrt(lo * hi)
    else:
        from matplotlib.colors import Normalize

        norm, mid = Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1), (lo + hi) / 2
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto", norm=norm)
    ax.set_xticks(range(len(col_labels)), [mpl_text(c) for c in col_labels], fontsize=8)
    ax.set_yticks(range(len(row_labels)), [mpl_text(r) for r in row_labels], fontsize=8)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            text = texts[i][j] if texts is not None else (f"{values[i, j]:.3g}" if np.isfinite(values[i, j]) else "")
            dark = np.isfinite(values[i, j]) and ((values[i, j] < mid) == higher_is_better)
            box = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85)
            ax.text(j, i, mpl_text(text), ha="center", va="center", fontsize=8, color="white" if dark else "black",
                    bbox=box if text and (i, j) in hatched else None)
    from matplotlib.patches import Rectangle

    for i, j in sorted(hatched):
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=HATCH_FACE, edgecolor=HATCH_EDGE, hatch="///",
                               linewidth=0.0, zorder=1.5))
    for i, j in marked:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2.2))
    return image


HEADROOM = 0.10  # of the highest value: the top of a curve (and its marker) clear of the frame


def headroom(ax: Axes, share: float = HEADROOM) -> None:
    """Room above everything drawn on `ax` (lines, bands, a reference line), on a linear or log y."""
    lo, hi = ax.get_ylim()
    top = float(ax.dataLim.y1)
    if not math.isfinite(top) or top <= 0:
        return
    if ax.get_yscale() == "log":
        low = lo if lo > 0 else top / 10
        wanted = top * (top / low) ** share if top > low else top * (1 + share)
    else:
        wanted = top + share * (top - min(lo, 0.0))
    if wanted > hi:
        ax.set_ylim(top=wanted)


# --------------------------------------------------------------------------- precision and time units

CI_BARS = "the median's 95% CI"  # the label of a curve's error bars (errorbar containers carry it)
CI_CAP = 1.0  # as the table's marks: a half-width past the median itself is drawn as ±100%
TIME_UNITS = ((1e6, "s"), (1e3, "ms"), (1.0, "µs"))  # microseconds per unit, the largest first


def ci_bars(ax: Axes, x: np.ndarray, y: np.ndarray, ci: np.ndarray | None, color: str) -> bool:
    """Each point's precision as an error bar: y ± y x ci, ci being its median time's 95% CI
    half-width over the median (the time_ci column; busbw and algbw are known to the same
    fraction); none where ci is unknown. The lower end stops short of 0 (a log axis has none)."""
    if ci is None or not len(ci):
        return False
    known = np.isfinite(ci) & np.isfinite(y)
    if not known.any():
        return False
    width = np.minimum(ci[known], CI_CAP)
    yk = y[known]
    ax.errorbar(x[known], yk, yerr=[yk * np.minimum(width, 0.95), yk * width], fmt="none", ecolor=color,
                elinewidth=1.0, capsize=2.5, alpha=0.8, label=CI_BARS)
    return True


def ci_bar_sets(fig: Figure) -> list[tuple[str, int]]:
    """The error bars ci_bars drew in a figure: (the axes' label, points with a bar) per curve."""
    from matplotlib.container import ErrorbarContainer

    return [(str(ax.get_label()), len(c.lines[2][0].get_segments())) for ax in fig.axes for c in ax.containers
            if isinstance(c, ErrorbarContainer) and c.get_label() == CI_BARS]


def time_unit(top_us: float) -> tuple[float, str]:
    """The one unit of a time axis whose top is `top_us` microseconds: (microseconds per unit, name)."""
    for scale, name in TIME_UNITS:
        if top_us >= scale:
            return scale, name
    return TIME_UNITS[-1]


def time_axis(ax: Axes) -> None:
    """A log time axis (data in µs) labelled in one human unit (s from 1 s at its top, ms from 1 ms,
    else µs: '20' ms, not '2e+04' µs), the plain numbers 100, 200, 500; the ylabel's '(µs)' names it."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    lo, hi = ax.get_ylim()
    scale, unit = time_unit(hi)
    fmt = FuncFormatter(lambda v, _: f"{v / scale:g}")
    ax.yaxis.set_major_formatter(fmt)
    if hi / max(lo, 1e-300) < 1e3:  # few decades: label 2x and 5x too; within one, every multiple
        subs = (2.0, 5.0) if hi / max(lo, 1e-300) >= 10 else tuple(float(k) for k in range(2, 10))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=subs))
        ax.yaxis.set_minor_formatter(fmt)
    ax.set_ylabel(ax.get_ylabel().replace("(µs)", f"({unit})"))
    ax.grid(True, which="minor", axis="y", alpha=0.12)
