"""The host x host heat map of `commbench pairs` results, for `commbench plot`.

Rows are senders, columns receivers (bidir: the same value in both triangles), each cell the
median GB/s over repetitions. Slow links are dark, the slowest ones (as many as one host takes
part in) get a box, and hosts singled out as slow are named in red. One map per run, side by side.
"""

from __future__ import annotations

import numpy as np

from commbench.analysis import linkrank
from commbench.analysis.figures import draw_heatmap, mpl_text, new_figure
from commbench.analysis.frames import short
from commbench.analysis.runs import describe_run, run_name
from commbench.core.errors import BadInput
from commbench.core.units import format_size

MAX_RUNS = 4
MAX_ANNOTATED = 16  # endpoints per side up to which every cell shows its value


def pairs_rows(df):
    """The rows of `commbench pairs` runs (None when there are none)."""
    if df is None or len(df) == 0 or "workload" not in df.columns:
        return None
    rows = df[df["workload"] == "pairs"]
    return rows if len(rows) else None


def matrix(links: list[linkrank.Link]) -> tuple[list[str], np.ndarray]:
    """(endpoint names in rank order, GB/s with senders on rows and receivers on columns; NaN where
    nothing was measured, e.g. the diagonal)."""
    names = linkrank.endpoint_order(links)
    at = {n: i for i, n in enumerate(names)}
    values = np.full((len(names), len(names)), np.nan)
    for ln in links:
        values[at[ln.src], at[ln.dst]] = ln.gbps
        if ln.bidir:
            values[at[ln.dst], at[ln.src]] = ln.gbps
    return names, values


def build_figure(df, threshold: float = linkrank.DEFAULT_THRESHOLD):
    runs = linkrank.links_by_run(df)
    if not runs:
        raise BadInput("the results hold no pairs rows with src/dst columns: pass a file written by commbench pairs")
    if len(runs) > MAX_RUNS:
        raise BadInput(f"the results hold {len(runs)} pairs runs; a figure shows up to {MAX_RUNS}: pass fewer files")
    n = max(len(linkrank.endpoint_order(links)) for links in runs.values())
    side = min(14.0, max(4.5, 0.75 * n + 2.5))
    fig = new_figure(width=(side + 1.6) * len(runs), height=side + 1.4)
    axes = fig.subplots(1, len(runs), squeeze=False)[0]
    for ax, (run_id, links) in zip(axes, runs.items()):
        first = df[df["run_id"] == run_id].iloc[0]
        image = _draw_run(fig, ax, links, threshold, dict(first))
        bidir = all(ln.bidir for ln in links)
        fig.colorbar(image, ax=ax, label="GB/s" + (" per direction" if bidir else ""), shrink=0.85)
    fig.suptitle("Point-to-point bandwidth between every pair of hosts", fontsize=12, fontweight="bold")
    return fig


def _draw_run(fig, ax, links: list[linkrank.Link], threshold: float, first: dict):
    ranking = linkrank.rank_links(links, threshold)
    names, values = matrix(links)
    at = {name: i for i, name in enumerate(names)}
    texts = [[f"{v:.3g}" if np.isfinite(v) and len(names) <= MAX_ANNOTATED else "" for v in row] for row in values]
    marked = {(at[ln.src], at[ln.dst]) for ln in ranking.slowest}
    if ranking.bidir:
        marked |= {(j, i) for i, j in marked}
    image = draw_heatmap(ax, values, names, names, texts=texts, higher_is_better=True, marked=sorted(marked))
    slow = {e.name for e in ranking.singled_out}
    for label in list(ax.get_xticklabels()) + list(ax.get_yticklabels()):
        if label.get_text().replace("\\$", "$") in slow:
            label.set_color("#c00000")
            label.set_fontweight("bold")
    for label in ax.get_xticklabels():
        label.set_rotation(35)
        label.set_horizontalalignment("right")
    ax.set_xlabel("host" if ranking.bidir else "receiver")
    ax.set_ylabel("host" if ranking.bidir else "sender")
    what = f"{first.get('collective')} of {format_size(int(first.get('size_bytes') or 0))}"
    found = linkrank.verdict(ranking)
    if found:
        verdict = found.split(" (")[0]
    elif ranking.note:
        verdict = "no host singled out (two endpoints)"
    else:
        verdict = f"no host stands out (threshold {threshold:.0%})"
    ax.set_title(mpl_text(f"{run_name(first)}: {what}\n{short(describe_run(first), 90)}\n"
                          f"boxed: the {len(ranking.slowest)} slowest links · {verdict}"),
                 fontsize=8.5, loc="left")
    return image
