"""`commbench plot` and the figure files: which view each kind of rows gets, drawn and written all or none.

The curves over message size are analysis/report/curveplot.py; the ZeRO grid, the pairs matrix and
the replayed steps are drawn by their features (tune/zerogrid.py, pairs/pairsplot.py,
replay/replayplot.py). Here: splitting a results table into its views, the figure's target
refused before anything is read (never an input, never overwritten without --force), and the
PNG or SVG bytes written through core/outputs.py.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.analysis.points.figures import DPI
from commbench.analysis.report.curveplot import METRICS, Line, build_comparison_figure, build_figure, parse_line_rate
from commbench.core import outputs
from commbench.core.errors import BadInput

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

FORMATS = (".png", ".svg")

# Columns no figure reads, left on disk when reading results to plot (the lists are most of a
# million rows' memory). A figure that starts using one takes it out of here.
UNUSED_COLUMNS = ("samples_us", "rank_time_us", "rank_skew_us", "env", "plan")


# --------------------------------------------------------------------------- saving


def default_out(first_result: str | Path, suffix: str = ".png") -> Path:
    """Next to the first result: results/run.parquet -> results/run.png; results/ -> results.png."""
    p = Path(first_result)
    return p.with_suffix(suffix) if p.suffix else p.parent / (p.name + suffix)


def check_new(path: str | Path, command: str = "plot", flag: str = "--out", inputs: Sequence = (),
              force: bool = False) -> Path:
    """A figure's (or a report's) target, refused before anything is read or drawn (core/outputs.py's
    rules); an existing file is replaced only with `force`, and its refusal says so."""
    path = outputs.check_new(path, command, flag, inputs, force=True)  # an input, a folder, not a file
    if os.path.lexists(path) and not force:
        raise BadInput(f"{path} already exists: {command} never overwrites a file; pass --force to replace it, "
                       f"or another {flag}")
    return path


def check_figure(path: str | Path, command: str = "plot", flag: str = "--out", inputs: Sequence = (),
                 force: bool = False) -> Path:
    """check_new, and a suffix this module can draw."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise BadInput(f"{flag} {path} must end in .png or .svg")
    return check_new(path, command, flag, inputs, force)


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=DPI, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


def figure_output(fig: Figure, path: str | Path, flag: str = "--out") -> outputs.Output:
    """A drawn figure as one file for outputs.write_files, in the format of its suffix."""
    path = Path(path)
    return outputs.Output(path, figure_bytes(fig, path.suffix.lower()[1:]), flag)


def save_figure(fig: Figure, out: str | Path, flag: str = "--out", command: str = "plot", inputs: Sequence = (),
                force: bool = False) -> Path:
    out = check_figure(out, command, flag, inputs, force)
    return outputs.write_files([figure_output(fig, out, flag)], command, inputs, force)[0]


def plot_results(paths: Sequence[str | Path], metric: str = "busbw", out: str | Path | None = None,
                 line_rate: str | None = None, force: bool = False) -> list[Path]:
    """The `commbench plot` command: read, draw, save; returns the files written: the one asked for
    first, then a heat map beside it for each other view the results hold (see split_views).
    force: replace existing figures (never an input)."""
    from commbench.core.results import read_results

    if metric not in METRICS:
        raise BadInput(f"--metric {metric!r} is not one of {', '.join(METRICS)}")
    rate = parse_line_rate(line_rate) if line_rate is not None else None
    target = check_figure(Path(out) if out is not None else default_out(paths[0]), inputs=paths,
                          force=force)  # before reading
    from commbench.analysis.points import figurequery  # large inputs: the curves aggregated over parquet

    q = figurequery.plot_source(paths)
    if q is not None:
        fig = build_figure(figurequery.run_firsts(q, METRICS[metric][0]), metric, rate,
                           line_rate.strip() if line_rate else None,
                           lambda c: [Line(**ln) for ln in figurequery.plot_lines(q, c)])
        return outputs.write_files([figure_output(fig, target)], "plot", inputs=paths, force=force)
    df = read_results(paths, skip=UNUSED_COLUMNS)
    views = split_views(df)
    if views.pairs is not None and metric == "time":
        raise BadInput("the pairs heat map shows bandwidth: use --metric busbw (or algbw, the same for pairs)")
    # The view that comes first gets the file asked for; the others go beside it as <name>-zero.png
    # and <name>-pairs.png. Every name is checked before anything is drawn.
    drawers = []
    if views.curves is not None:
        drawers.append(("", lambda: build_figure(views.curves, metric, rate, line_rate.strip() if line_rate else None)))
    if views.zero is not None:
        from commbench.analysis.tune import zerogrid

        drawers.append(("-zero", lambda: zerogrid.build_figure(views.zero, metric)))
    if views.pairs is not None:
        from commbench.analysis.pairs import pairsplot

        drawers.append(("-pairs", lambda: pairsplot.build_figure(views.pairs)))
    if views.replay is not None:
        from commbench.analysis.replay import replayplot

        drawers.append(("-replay", lambda: replayplot.build_figure(views.replay)))
    paths_out = [target] + [check_new(target.with_name(target.stem + suffix + target.suffix), inputs=paths,
                                      force=force) for suffix, _ in drawers[1:]]
    # All the views or none: a full disk or Ctrl-C leaves no lone figure behind.
    return outputs.write_files([figure_output(draw(), path) for path, (_, draw) in zip(paths_out, drawers)],
                               "plot", inputs=paths, force=force)


@dataclass
class Views:
    """The parts of a results table that are drawn differently (None: no such rows): curves over
    message size, the ZeRO stage x bucket grid, the pairs host x host matrix, replayed steps."""

    curves: pd.DataFrame | None
    zero: pd.DataFrame | None
    pairs: pd.DataFrame | None
    replay: pd.DataFrame | None = None


def split_views(df: pd.DataFrame) -> Views:
    """A ZeRO step, a link between two hosts or a replayed job has no message-size curve: their rows
    get their own view."""
    from commbench.analysis.pairs.pairsplot import pairs_rows

    replayed = None
    if "workload" in df.columns and (df["workload"] == "replay").any():
        mask = df["workload"] == "replay"
        replayed, df = df[mask], df[~mask]
        if not len(df):
            return Views(None, None, None, replayed)
    rest, zero = split_zero(df)
    pairs = pairs_rows(rest) if rest is not None else None
    if rest is not None and pairs is not None:  # pairs only from rows left
        rest = rest.drop(index=pairs.index)
        rest = rest if len(rest) else None
    return Views(rest, zero, pairs, replayed)


def split_zero(df: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(rows drawn against message size, `commbench zero` rows drawn as a stage x bucket grid);
    None for a part with no rows. A ZeRO step has no message size: it is not a point on a curve."""
    from commbench.analysis.tune.zerogrid import zero_rows

    grid = zero_rows(df)
    if grid is None or len(grid) == 0:
        return df, None
    rest = df.drop(index=grid.index)
    return (rest if len(rest) else None), grid


def comparison_output(before_df: pd.DataFrame, after_df: pd.DataFrame, out_path: str | Path, metric: str = "busbw",
                      before_name: str = "before", after_name: str = "after") -> outputs.Output:
    """The before/after overlay (before dashed, after solid) drawn for `compare --plot`, not yet written."""
    fig = build_comparison_figure(before_df, after_df, metric, before_name, after_name)
    return figure_output(fig, out_path, "--plot")


def plot_comparison(before_df: pd.DataFrame, after_df: pd.DataFrame, out_path: str | Path, metric: str = "busbw",
                    before_name: str = "before", after_name: str = "after", inputs: Sequence = (),
                    force: bool = False) -> Path:
    """The overlay of comparison_output, written to its own file."""
    out = check_figure(out_path, "compare", "--plot", inputs, force)
    made = comparison_output(before_df, after_df, out, metric, before_name, after_name)
    return outputs.write_files([made], "compare", inputs, force)[0]
