"""The curves figure: bandwidth (or time) against message size, and the before/after overlay.

Figures are built as plain `matplotlib.figure.Figure` objects drawn by the Agg canvas, so nothing
here touches pyplot's global state (a notebook or another caller keeps its own backend). One line
per collective / dtype / placement / label / run / setting (`--env`, `--mtu`; analysis/points/settingsview.py):
the median over repetitions, with a shaded band from the smallest to the largest repetition when
there are several. A second panel shows the time per operation of the small sizes (<= 64 KiB),
where latency, not bandwidth, is the story.

Every string that comes from a results file (labels, hosts, interface names) is untrusted: it is
escaped for matplotlib's mathtext, so a `$` in a label cannot break or restyle the figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from commbench.analysis.points import points
from commbench.analysis.points.figures import CI_BARS, ci_bar_sets, ci_bars, headroom, mpl_text, new_figure, time_axis
from commbench.analysis.points.frames import present, short
from commbench.analysis.points.points import BUCKETS_SUFFIX, GROUP
from commbench.analysis.points.runs import describe_run, placement_name, run_name, run_rows
from commbench.analysis.points.settingsview import setting_name
from commbench.analysis.tune import bucketview
from commbench.core.errors import BadInput
from commbench.core.vocab import ORDER, order_key
from commbench.core.units import format_size, parse_rate

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

METRICS = {
    "busbw": ("busbw_GBps", "Bus bandwidth (GB/s)"),
    "algbw": ("algbw_GBps", "Algorithm bandwidth (GB/s)"),
    "time": ("time_us", "Time per operation (µs)"),
}
SMALL_BYTES = 64 * 1024
MAX_BANDED_LATENCY_LINES = 4

# A fixed colour per collective, in the collectives table's order, so all_reduce has the same
# colour in every figure and report. tab10 without grey (kept for "other").
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f")
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


# --------------------------------------------------------------------------- line rate


def parse_line_rate(text: str) -> float:
    """'400Gbps' -> 50.0 (GB/s). Bits: Gbps, Gb/s, Gbit/s and tc's units (1gbit, 800mbit, as
    `lab --rate` takes them); bytes: GB/s, GBps (core/units.py parse_rate)."""
    return parse_rate(text, "--line-rate") / 8e9


def format_rate(gbps_bytes: float) -> str:
    """50.0 GB/s -> '400 Gbit/s = 50 GB/s'."""
    bits = gbps_bytes * 8
    return f"{_num(bits)} Gbit/s = {_num(gbps_bytes)} GB/s"


def _num(x: float) -> str:
    return f"{x:.4g}"


# --------------------------------------------------------------------------- aggregation


@dataclass
class Line:
    key: dict
    sizes: np.ndarray
    median: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    reps: np.ndarray
    wrong_sizes: np.ndarray
    ci: np.ndarray | None = None  # each point's median time's 95% CI half-width over it (nan: unknown)
    name: str = ""
    color: str = "#1f77b4"
    style: str = "-"
    marker: str = "o"


def aggregate(df: pd.DataFrame, column: str) -> list[Line]:
    """One Line per group (LINE_KEYS: two settings of a run are two lines): median, min and max
    over repetitions at every size, of the rows a curve is drawn from (analysis/points/points.py: the same
    query the files of a large input take)."""
    from commbench.analysis.points import figurequery

    return [Line(**ln) for ln in figurequery.frame_lines(df, column)]


def collective_colors(names: Iterable[str]) -> dict[str, str]:
    """Known collectives keep their table colour; others take the remaining colours in turn."""
    colors, spare = {}, [c for c in _PALETTE[len(ORDER):]]
    for n in sorted(set(names), key=order_key):
        if n in ORDER:
            colors[n] = _PALETTE[ORDER.index(n)]
        else:
            colors[n] = spare.pop(0) if spare else _PALETTE[len(colors) % len(_PALETTE)]
    return colors


def line_name(key: dict, show_dtype: bool, show_place: bool, show_settings: bool, show_group: bool = False) -> str:
    """A line's legend name: its collective, then only the parts that differ between the lines
    (a layout run's group: 'dp0 [0,2]', 'dp0 [0,2] solo')."""
    parts = [key["collective"]]
    if show_dtype:
        parts.append(key["dtype"])
    if show_place:
        parts.append(placement_name(key["in_place"]))
    if show_settings:
        parts.append(setting_name(key["settings"]))
    if show_group and key.get(GROUP):
        parts.append(key[GROUP])
    return " ".join(map(str, parts))


def name_lines(lines: list[Line], run_labels: dict[str, str] | None = None) -> None:
    """Legend names that show only what differs between lines; colours by collective
    (by variant when there is one collective); line style and marker by variant."""
    def varies(k: str) -> bool:
        return len({ln.key[k] for ln in lines}) > 1

    show_dtype, show_place, show_settings = varies("dtype"), varies("in_place"), varies("settings")
    show_group = any(ln.key.get(GROUP) for ln in lines)
    runs = {(ln.key["run_id"], ln.key["label"]) for ln in lines}
    show_run = len(runs) > 1
    labels = {}
    if show_run:
        by_label: dict[str, set] = {}
        for run_id, label in runs:
            by_label.setdefault(label, set()).add(run_id)
        for run_id, label in runs:
            labels[run_id] = label if label and len(by_label[label]) == 1 else (
                f"{label} ({run_id})" if label else run_id)
    if run_labels:
        labels.update(run_labels)
    lines.sort(key=lambda ln: (order_key(ln.key["collective"]), ln.key["dtype"], not ln.key["in_place"],
                               ln.key["run_id"], ln.key["settings"], ln.key.get(GROUP, "")))
    collectives = {ln.key["collective"] for ln in lines}
    colors = collective_colors(collectives)
    variants: dict[str, list] = {}
    for ln in lines:
        ln.name = line_name(ln.key, show_dtype, show_place, show_settings, show_group)
        if show_run:
            ln.name += f" [{labels[ln.key['run_id']]}]"
        variant = (ln.key["dtype"], ln.key["in_place"], ln.key["run_id"], ln.key["settings"], ln.key.get(GROUP))
        order = variants.setdefault(ln.key["collective"], [])
        if variant not in order:
            order.append(variant)
        i = order.index(variant)
        ln.style, ln.marker = _STYLES[i % len(_STYLES)], _MARKERS[i % len(_MARKERS)]
        ln.color = colors[ln.key["collective"]]
    if len(collectives) == 1 and len(lines) > 1:  # one collective: tell the variants apart by colour
        for i, ln in enumerate(lines):
            ln.color = _PALETTE[i % len(_PALETTE)]


# --------------------------------------------------------------------------- axes


def size_ticks(lo_bytes: float, hi_bytes: float, max_labels: int = 16) -> tuple[list[float], list[str], list[float]]:
    """Major ticks at powers of two (at most max_labels, labelled 8 B .. 16 GiB) and minor ticks
    at every power of two between. Returns (major, labels, minor)."""
    lo = math.floor(math.log2(lo_bytes))
    hi = math.ceil(math.log2(hi_bytes))
    if hi - lo < 2:
        lo, hi = lo - 1, hi + 1
    lo = max(lo, 0)
    # Steps of 1, 2, 5 or 10 powers: every choice labels 1 KiB, 1 MiB, 1 GiB when in range.
    step = next((k for k in (1, 2, 5, 10, 20) if (hi - lo) // k + 1 <= max_labels), 20)
    start = math.ceil(lo / step) * step
    major = [float(2 ** k) for k in range(start, hi + 1, step)]
    minor = [float(2 ** k) for k in range(lo, hi + 1)]
    return major, [format_size(v) for v in major], minor


def _size_axis(ax: Axes, sizes: Sequence[float] | np.ndarray) -> None:
    from matplotlib.ticker import NullFormatter

    major, labels, minor = size_ticks(min(sizes), max(sizes))
    ax.set_xscale("log", base=2)
    ax.set_xticks(major, labels)
    ax.set_xticks(minor, minor=True)
    ax.xaxis.set_minor_formatter(NullFormatter())
    pad = 2 ** 0.2  # a little room so the end markers are not cut by the frame
    ax.set_xlim(max(min(sizes), 1) / pad, max(sizes) * pad)
    ax.set_xlabel("Message size")
    if len(major) > 8:
        for t in ax.get_xticklabels():
            t.set_rotation(35)
            t.set_horizontalalignment("right")
    ax.grid(True, which="major", alpha=0.45)
    ax.grid(True, which="minor", axis="x", alpha=0.15)


def _draw(ax: Axes, lines: list[Line], small_only: bool = False, log_y: bool = False, bands: bool = True) -> bool:
    drew = False
    for ln in lines:
        sel = ln.sizes <= SMALL_BYTES if small_only else np.ones(len(ln.sizes), bool)
        if not sel.any():
            continue
        x = ln.sizes[sel]
        ax.plot(x, ln.median[sel], color=ln.color, linestyle=ln.style, marker=ln.marker, markersize=4,
                linewidth=1.6, label=mpl_text(ln.name))
        ci_bars(ax, x, ln.median[sel], None if ln.ci is None else ln.ci[sel], ln.color)
        if bands and (ln.reps[sel] > 1).any():
            ax.fill_between(x, ln.lo[sel], ln.hi[sel], color=ln.color, alpha=0.10, linewidth=0)
        wrong = ln.wrong_sizes[ln.wrong_sizes <= SMALL_BYTES] if small_only else ln.wrong_sizes
        if len(wrong):
            idx = np.searchsorted(ln.sizes, wrong)
            ax.plot(wrong, ln.median[idx], linestyle="none", marker="x", markersize=10, markeredgewidth=2.2,
                    color="#d00000", zorder=5)
        drew = True
    if log_y and drew:
        ax.set_yscale("log")
        headroom(ax)  # before the ticks are chosen: they depend on the range
        time_axis(ax)
    return drew


def _legend(fig: Figure, lines: list[Line], extra_handles: Sequence[Artist] = (),
            extra_labels: Sequence[str] = ()) -> None:
    from matplotlib.lines import Line2D

    handles: list[Artist] = [
        Line2D([], [], color=ln.color,
               linestyle=ln.style,  # type: ignore[arg-type]  # matplotlib: a Literal of style names; ours a str of one
               marker=ln.marker, markersize=4, linewidth=1.6)
        for ln in lines]
    labels = [mpl_text(short(ln.name, 56)) for ln in lines]
    if any(len(ln.wrong_sizes) for ln in lines):
        handles.append(Line2D([], [], linestyle="none", marker="x", color="#d00000", markersize=9, markeredgewidth=2))
        labels.append("wrong results (#wrong > 0)")
    if any(ln.ci is not None and np.isfinite(ln.ci).any() for ln in lines):
        handles.append(Line2D([], [], color="#555555", marker="|", linestyle="none", markersize=10))
        labels.append(f"bars: {CI_BARS}")
    if any((ln.reps > 1).any() for ln in lines):
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="#888888", alpha=0.25))
        labels.append("min–max over repetitions")
    handles += list(extra_handles)
    labels += list(extra_labels)
    # Below the panels, in columns: the titles keep the full width and long labels still fit.
    widest = max((len(t) for t in labels), default=0)
    ncol = 4 if widest <= 30 else 3 if widest <= 44 else 2
    rows = math.ceil(len(labels) / ncol)
    fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + 0.45 + 0.19 * rows)  # room for it
    fig.legend(handles, labels, loc="outside lower center", fontsize=8.5, frameon=False, ncol=ncol,
               title="lines: median over repetitions", title_fontsize=8.5, columnspacing=2.0)


def _titles(df: pd.DataFrame) -> str:
    rows = run_rows(df)
    described: dict[str, list[str]] = {}
    for r in rows:
        described.setdefault(describe_run(r), []).append(run_name(r))
    lines = []
    for text, names in described.items():
        prefix = ""
        if len(described) > 1 or any(present(r.get("label")) for r in rows):
            prefix = (", ".join(short(n, 48 if len(names) == 1 else 24) for n in names[:2])
                      + (f" +{len(names) - 2}" if len(names) > 2 else "") + ": ")
        lines.append(prefix + text)
    if len(lines) > 3:
        lines = lines[:2] + [f"… and {len(lines) - 2} more run setups (see the report)"]
    return "\n".join(mpl_text(short(t, 150)) for t in lines)


def _what(lines: list[Line], metric_label: str, against: str = "message size") -> str:
    colls = sorted({ln.key["collective"] for ln in lines}, key=order_key)
    dtypes = sorted({str(ln.key["dtype"]) for ln in lines})
    what = ", ".join(colls) if len(colls) <= 4 else f"{len(colls)} collectives"
    if dtypes and len(dtypes) <= 2:
        what += " · " + ", ".join(dtypes)
    return mpl_text(f"{metric_label.split(' (')[0]} vs {against} — {what}")


# --------------------------------------------------------------------------- figures


def build_figure(df: pd.DataFrame, metric: str = "busbw", line_rate: float | None = None,
                 line_rate_text: str | None = None, lines_of: Callable[[str], list[Line]] | None = None) -> Figure:
    """The figure for a results DataFrame: the metric vs size (top) and the small-size latency
    (bottom). line_rate is in GB/s (see parse_line_rate). Returns a matplotlib Figure.
    lines_of(column): the lines of a column where the engine drew them (analysis/points/pointtable.py; df is
    then the first row of every run); aggregate(df, column) otherwise."""
    if metric not in METRICS:
        raise BadInput(f"--metric {metric!r} is not one of {', '.join(METRICS)}")
    column, ylabel = METRICS[metric]
    if line_rate is not None and metric == "time":
        raise BadInput("--line-rate is a bandwidth: use it with --metric busbw or algbw, not time")
    # the engine's df is each run's first row already; a frame's: its runs' first rows drawn
    d = df if lines_of is not None else points.first_frame_rows(df, column)
    lines_of = lines_of or (lambda c: aggregate(df, c))
    lines = lines_of(column)
    name_lines(lines)
    # The latency panel only when there are small sizes to show: an empty panel is noise.
    in_buckets = np.array([str(ln.key["collective"]).endswith(BUCKETS_SUFFIX) for ln in lines])
    fig = new_figure()
    top, bottom = _panels(fig, _has_small(lines))
    buckets = bucketview.units(lines) if in_buckets.all() else None
    if buckets is not None and metric == "time":
        ylabel = bucketview.TIME_LABEL
    fig.suptitle(_what(lines, ylabel, "bucket size" if buckets is not None else "message size"),
                 fontsize=13, fontweight="bold")
    top.set_title(_titles(d), fontsize=9, loc="left")
    top.set_ylabel(ylabel)  # before _draw: a time axis names its unit in it
    _draw(top, lines, log_y=(metric == "time"))
    _size_axis(top, np.concatenate([ln.sizes for ln in lines]))
    if metric != "time":
        top.set_ylim(bottom=0)
    extra_h: list[Artist] = []
    extra_l: list[str] = []
    if line_rate is not None:
        from matplotlib.lines import Line2D

        top.axhline(line_rate, color="black", linestyle=(0, (6, 3)), linewidth=1.2)
        text = (f"line rate {line_rate_text}: {_num(line_rate)} GB/s" if line_rate_text
                else f"line rate {format_rate(line_rate)}")
        top.annotate(mpl_text(text), xy=(0.01, line_rate), xycoords=("axes fraction", "data"),
                     xytext=(0, 3), textcoords="offset points", fontsize=8.5, va="bottom")
        top.set_ylim(top=max(top.get_ylim()[1], line_rate * 1.08))
        extra_h.append(Line2D([], [], color="black", linestyle=(0, (6, 3)), linewidth=1.2))
        extra_l.append(mpl_text("line rate" + (f" {line_rate_text}" if line_rate_text else "")))
    headroom(top)
    if buckets is not None:
        bucketview.bucket_axis(top, buckets)
    elif in_buckets.all():
        top.set_xlabel("Bucket size (each point: one step's gradients reduced in buckets of this size)")
    if bottom is not None:
        # a buckets row's time is a whole step, not one operation: it has no place in this panel
        time_lines = [ln for ln in (lines if column == "time_us" else lines_of("time_us"))
                      if not str(ln.key["collective"]).endswith(BUCKETS_SUFFIX)]
        _latency_panel(bottom, time_lines, lines)
    _legend(fig, lines, extra_h, extra_l)
    return fig


LATENCY_PANEL = "latency"  # the label of a figure's latency axes (has_latency_panel)


def _has_small(lines: list[Line]) -> bool:
    """Sizes for the latency panel: a curve (not a buckets line, whose time is a step) at a small size."""
    return any(bool((ln.sizes <= SMALL_BYTES).any()) for ln in lines
               if not str(ln.key["collective"]).endswith(BUCKETS_SUFFIX))


def _panels(fig: Figure, latency: bool) -> tuple[Axes, Axes | None]:
    """(top, bottom): the latency panel below only when there are small sizes to show: an empty
    panel is noise, and a caption would name a panel that is not there."""
    if not latency:
        fig.set_figheight(fig.get_figheight() * 0.65)
        return fig.subplots(1, 1), None
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 2])
    bottom.set_label(LATENCY_PANEL)
    return top, bottom


def has_latency_panel(fig: Figure) -> bool:
    """Whether a figure of this module has the small-size latency panel (captions name it only then)."""
    return any(ax.get_label() == LATENCY_PANEL for ax in fig.axes)


def _latency_panel(ax: Axes, time_lines: list[Line], named: list[Line]) -> None:
    style = {tuple(ln.key.values()): ln for ln in named}
    for ln in time_lines:
        ref = style.get(tuple(ln.key.values()))
        if ref is not None:
            ln.name, ln.color, ln.style, ln.marker = ref.name, ref.color, ref.style, ref.marker
    ax.set_title(f"Latency: time per operation, sizes ≤ {format_size(SMALL_BYTES)} (log scale)", fontsize=10,
                 loc="left")
    small = [s for ln in time_lines for s in ln.sizes if s <= SMALL_BYTES]
    if not small:
        ax.text(0.5, 0.5, f"no sizes ≤ {format_size(SMALL_BYTES)} in these results", ha="center", va="center",
                transform=ax.transAxes, fontsize=10, color="#555555")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.set_ylabel("Time per operation (µs)")  # before _draw: the time axis names its unit in it
    # Bands of many lines in a narrow panel turn into mud: draw them only for a few lines.
    _draw(ax, time_lines, small_only=True, log_y=True, bands=len(time_lines) <= MAX_BANDED_LATENCY_LINES)
    _size_axis(ax, small)


def _side_lines(df: pd.DataFrame, name: str, column: str,
                lines_of: Callable[[str, str], list[Line]] | None) -> tuple[list[Line], list[Line]]:
    """A side's lines of `column` and of time, all its runs as one named `name`."""
    if lines_of is not None:
        return lines_of(name, column), lines_of(name, "time_us")
    from commbench.analysis.points import figurequery

    return ([Line(**ln) for ln in figurequery.frame_lines(df, column, side=name)],
            [Line(**ln) for ln in figurequery.frame_lines(df, "time_us", side=name)])


def build_comparison_figure(before_df: pd.DataFrame, after_df: pd.DataFrame, metric: str = "busbw",
                            before_name: str = "before", after_name: str = "after",
                            lines_of: Callable[[str, str], list[Line]] | None = None) -> Figure:
    """Both sides overlaid: before dashed, after solid, one colour per collective. Each side is
    the median over all its rows (every run and repetition) per collective/dtype/placement/size.
    lines_of(side name, column): a side's lines where the engine drew them (the frames are then
    the first row of every run, analysis/points/pointtable.py)."""
    column, ylabel = METRICS[metric]
    sides = [(name, *_side_lines(df, name, column, lines_of), style)
             for name, df, style in ((before_name, before_df, "--"), (after_name, after_df, "-"))]
    everything = [ln for _, d, _, _ in sides for ln in d]
    colors = collective_colors(ln.key["collective"] for ln in everything)
    variants = sorted({(ln.key["dtype"], ln.key["in_place"], ln.key["settings"]) for ln in everything},
                      key=lambda v: (v[0], not v[1], v[2]))
    show_dtype = len({v[0] for v in variants}) > 1
    show_place = len({v[1] for v in variants}) > 1
    show_settings = len({v[2] for v in variants}) > 1

    def style(lines: list[Line], dash: str) -> list[Line]:
        for ln in lines:
            ln.name = line_name(ln.key, show_dtype, show_place, show_settings) + f" [{ln.key['run_id']}]"
            v = variants.index((ln.key["dtype"], ln.key["in_place"], ln.key["settings"]))
            # one collective under several settings: the settings apart by colour too
            by_variant = show_settings and len(colors) == 1
            ln.color = _PALETTE[v % len(_PALETTE)] if by_variant else colors[ln.key["collective"]]
            ln.style = dash
            ln.marker = _MARKERS[v % len(_MARKERS)]
        lines.sort(key=lambda ln: (order_key(ln.key["collective"]), ln.key["dtype"], not ln.key["in_place"],
                                   ln.key["settings"]))
        return lines

    fig = new_figure()
    # a buckets row's time is a whole step, not one operation: it has no place in the latency panel
    timed = [(d, [ln for ln in t if not str(ln.key["collective"]).endswith(BUCKETS_SUFFIX)]) for _, d, t, _ in sides]
    top, bottom = _panels(fig, _has_small([ln for _, t in timed for ln in t]))
    fig.suptitle(mpl_text(f"{ylabel.split(' (')[0]}: {before_name} (dashed) vs {after_name} (solid)"),
                 fontsize=13, fontweight="bold")
    where = []
    for name, df in ((before_name, before_df), (after_name, after_df)):
        rows = run_rows(df)
        more = f" (+{len(rows) - 1} more runs)" if len(rows) > 1 else ""
        where.append((name, describe_run(rows[0]) + more))
    if where[0][1] == where[1][1]:
        where = [(f"{before_name} and {after_name}", where[0][1])]
    titles = [mpl_text(short(f"{name}: {text}", 130)) for name, text in where]
    top.set_title("\n".join(titles), fontsize=9, loc="left")
    lines: list[Line] = []
    time_lines: list[Line] = []
    for (d, t), (_, _, _, dash) in zip(timed, sides):
        lines += style(d, dash)
        time_lines += style(t, dash)
    # Two sides double the lines: bands only while they stay few enough to tell apart.
    top.set_ylabel(ylabel)  # before _draw: a time axis names its unit in it
    _draw(top, lines, log_y=(metric == "time"), bands=len(lines) <= MAX_BANDED_LATENCY_LINES)
    _size_axis(top, np.concatenate([ln.sizes for ln in lines]))
    if metric != "time":
        top.set_ylim(bottom=0)
    headroom(top)
    if bottom is not None:
        _latency_panel(bottom, time_lines, lines)
    # Legend: one entry per collective/variant colour, plus the two line styles.
    from matplotlib.lines import Line2D

    seen, keyed = set(), []
    for ln in lines:
        name = ln.name.rsplit(" [", 1)[0]
        if name not in seen:
            seen.add(name)
            keyed.append(Line(key=ln.key, sizes=ln.sizes, median=ln.median, lo=ln.lo, hi=ln.hi, reps=np.ones(1, int),
                              wrong_sizes=np.array([]), name=name, color=ln.color, style="-", marker=ln.marker))
    _legend(fig, keyed,
            [Line2D([], [], color="black", linestyle="--"), Line2D([], [], color="black", linestyle="-")],
            [mpl_text(f"{before_name} (dashed)"), mpl_text(f"{after_name} (solid)")])
    return fig


_LATENCY = f"time per operation of sizes ≤ {format_size(SMALL_BYTES)}"


def curves_caption(fig: Figure) -> str:
    """The caption of the curves figure: its top panel, and its bottom one only when it has one."""
    against = "bucket size" if fig.axes and fig.axes[0].get_xlabel().startswith("Bucket size") else "message size"
    bars = ", bars: each point's 95% CI of its median" if ci_bar_sets(fig) else ""
    top = (f"bus bandwidth (nccl-tests definition) against {against}, median over repetitions, "
           f"band from min to max{bars}.")
    if not has_latency_panel(fig):
        return top[0].upper() + top[1:]
    return f"Top: {top} Bottom: {_LATENCY}."


def comparison_caption(fig: Figure) -> str:
    text = "Before (baseline, dashed) and after (solid): median busbw over every run and repetition of each side"
    return text + (f"; below, the {_LATENCY}." if has_latency_panel(fig) else ".")
