"""The trend figure (`commbench trend --plot FILE`): each changed point's busbw run after run, the
first run after its change marked; with no change, the largest sizes' series (analysis/trend/trend.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.analysis.points.figures import mpl_text, new_figure
from commbench.analysis.points.sides import describe_point
from commbench.analysis.trend.trend import PointChange, Trend, series

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MOST = 8  # series in one figure: beyond it the legend hides the lines


def chosen(found: Trend) -> list[dict]:
    """The points drawn: the changed ones, most changed first; else the largest sizes followed."""
    if found.changes:
        ranked: list[PointChange] = sorted(found.changes, key=lambda c: -abs(c.change))
        return [c.key for c in ranked[:MOST]]
    assert found.table is not None
    keys = found.table.drop_duplicates(subset=["size_bytes", "collective", "src_host", "dst_host"])
    keys = keys.sort_values("size_bytes", ascending=False).head(MOST)
    return [{k: (None if _missing(v) else v) for k, v in row.items()} for row in keys.to_dict("records")]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def draw(found: Trend) -> Figure:
    fig = new_figure(12.0, 6.5)
    ax = fig.add_subplot(1, 1, 1)
    for key in chosen(found):
        x, y = series(found, key)
        ax.plot(x, y, marker="o", markersize=3, label=mpl_text(describe_point(key), 90))
    for at in found.change_runs():
        run = found.runs[at]
        ax.axvline(run.index - 0.5, color="crimson", linestyle="--", linewidth=1)
        ax.annotate(
            mpl_text(f"change from run {run.index}"),
            (run.index - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            textcoords="offset points",
            xytext=(4, -12),
            color="crimson",
            fontsize=9,
        )
    first, last = found.runs[0], found.runs[-1]
    ax.set_title(mpl_text(f"commbench trend: {len(found.runs)} runs, {first.started_at} .. {last.started_at}"))
    ax.set_xlabel("run (time order)")
    ax.set_ylabel("busbw (GB/s), the run's median")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return fig
