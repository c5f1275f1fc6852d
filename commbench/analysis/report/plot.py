"""`commbench plot` and the figure files: which view each kind of rows gets, drawn and written all or none.

Which rows each view takes and how it is drawn is its section's (analysis/catalog/sections.py: the
curves over message size are curves/curvesection.py's, the ZeRO grid, the pairs matrix and the
replayed steps their features'). Here: splitting a results table into its views, the figure's target
refused before anything is read (never an input, never overwritten without --force), and the
PNG or SVG bytes written through core/outputs.py.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.analysis.points.figures import DPI
from commbench.analysis.points.section import SectionFigure, figure_order
from commbench.analysis.catalog import sections
from commbench.analysis.curves.curveplot import METRICS, Line, build_comparison_figure, build_figure, parse_line_rate
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
        curves = build_figure(figurequery.run_firsts(q, METRICS[metric][0]), metric, rate,
                              line_rate.strip() if line_rate else None,
                              lambda c: [Line(**ln) for ln in figurequery.plot_lines(q, c)])
        return outputs.write_files([figure_output(curves, target)], "plot", inputs=paths, force=force)
    df = read_results(paths, skip=UNUSED_COLUMNS)
    views = split_views(df)
    label = line_rate.strip() if line_rate else None
    drawn = views.drawn()
    for _, fig, _ in drawn:
        if fig.refuse is not None and (why := fig.refuse(metric)):
            raise BadInput(why)
    # The view that comes first gets the file asked for; the others go beside it as <name><suffix>
    # (<name>-zero.png, <name>-pairs.png ...). Every name is checked before anything is drawn.
    paths_out = [target] + [check_new(target.with_name(target.stem + fig.suffix + target.suffix), inputs=paths,
                                      force=force) for _, fig, _ in drawn[1:]]
    # All the views or none: a full disk or Ctrl-C leaves no lone figure behind.
    return outputs.write_files([figure_output(fig.draw(rows, metric, rate, label), path)
                                for path, (_, fig, rows) in zip(paths_out, drawn)], "plot", inputs=paths, force=force)


@dataclass
class Views:
    """The parts of a results table that are drawn differently: the rows each section of
    analysis/catalog/sections.py claimed, by its id (None: no such rows), e.g. views.curves (the rows
    over message size), views.zero, views.pairs, views.replay."""

    rows: dict[str, pd.DataFrame | None]
    rest: pd.DataFrame | None = None  # the rows no section claimed by kind: the curves

    def __getattr__(self, name: str) -> pd.DataFrame | None:
        rows = self.__dict__.get("rows", {})
        if name in rows:
            return rows[name]
        raise AttributeError(f"no section {name!r} claims rows")

    def drawn(self, report: bool = False) -> list[tuple[str, SectionFigure, pd.DataFrame]]:
        """(section id, its figure, its rows) for each section with a figure and rows to draw it from,
        in the order their files are written; report: only those the Markdown report writes beside itself."""
        return [(s.id, s.figure, rows) for s in figure_order(sections.SECTIONS)
                if s.figure is not None and (rows := self.rows.get(s.id)) is not None
                and (s.figure.in_report or not report)]


def split_views(df: pd.DataFrame) -> Views:
    """A ZeRO step, a link between two hosts or a replayed job has no message-size curve: each
    section claims its kind of rows from those left, in list order; the rows none claims are the
    curves (the section that claims the rest)."""
    rows: dict[str, pd.DataFrame | None] = {}
    rest: pd.DataFrame | None = df
    for s in sections.SECTIONS:
        if s.claims is not None:
            rest, rows[s.id] = _claim(rest, s.claims)
    rows.update({s.id: rest for s in sections.SECTIONS if s.claims_rest})
    return Views(rows, rest)


def _claim(df: pd.DataFrame | None, claims: Callable[[pd.DataFrame], pd.DataFrame | None]
           ) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(the rows left, the rows claimed); None for a part with no rows."""
    got = claims(df) if df is not None else None
    if got is None or len(got) == 0:
        return df, None
    rest = df.drop(index=got.index) if df is not None else None
    return (rest if rest is not None and len(rest) else None), got


def split_zero(df: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(every row but the ZeRO grid's, the rows the "zero" section claims); None for a part with no rows."""
    (claims,) = [s.claims for s in sections.SECTIONS if s.id == "zero" and s.claims is not None]
    return _claim(df, claims)


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
