"""The Markdown form of `commbench report`, for a ticket: the same sections as the HTML page (from
analysis/catalog/sections.py's one list), the figures as PNG files beside it (report.write_report writes
the page and its figures together, all or none, through core/outputs.py). Every value from a results
file goes through md(), never raw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

from commbench.analysis.points.mdtext import md, md_table
from commbench.analysis.points.runs import describe_run, run_rows
from commbench.analysis.points.section import Inputs, MarkdownKit, figure_order, page_order
from commbench.analysis.report import plot
from commbench.analysis.catalog import sections
from commbench.analysis.report.reportparts import runs_markdown
from commbench.analysis.curves.curvetables import curve_tables, ratio_text
from commbench.analysis.report.summary import report_title
from commbench.analysis.curves.curvetables import with_ci as with_ci  # a table figure with its CI, by its old name

if TYPE_CHECKING:
    import pandas as pd

    from commbench.analysis.compare.compare import Comparison


def build_markdown(df: pd.DataFrame, figure_name: str | None, sources: Sequence[str] = (),
                   comparison: Comparison | None = None,
                   comparison_figure_name: str | None = None, baseline_sources: Sequence[str] = (),
                   figures: Mapping[str, str] | None = None) -> str:
    """The report; figure_name: the main figure's file (the curves'), figures: the other sections'
    figure files by section id (plot.Views.drawn); none: the report names no figure of theirs."""
    out = [f"# {md(report_title(df))}", ""]
    for r in run_rows(df):
        out.append(f"- **{md(r['run_id'])}**" + (f" ({md(r['label'])})" if r.get("label") else "")
                   + f": {md(describe_run(r))}")
    out.append("")
    if comparison is not None:
        out += ["## Comparison with the baseline", "",
                f"before (baseline): {md(', '.join(map(str, baseline_sources)))}; "
                f"after: {md(', '.join(map(str, sources)))}", ""]
        out.append(comparison_markdown(comparison))
        if comparison_figure_name:
            out += ["", f"![busbw before (dashed) and after (solid)]({quote(comparison_figure_name)})"]
        out.append("")
    views = plot.split_views(df)
    names = dict(figures or {})
    main = [s.id for s in figure_order(sections.SECTIONS) if s.figure is not None and not s.figure.suffix]
    if figure_name and main:
        names.setdefault(main[0], figure_name)
    inputs = Inputs(df, sources, views.rows, curve_tables(views.rest) if views.rest is not None else None,
                    figures=names)
    kit = MarkdownKit(md_table, md)
    out += [line for s in page_order(sections.SECTIONS) for line in s.markdown(inputs, kit)]
    out += runs_markdown(df)
    from commbench import __version__

    out.append(f"_commbench {md(__version__)}; GB/s = 1e9 bytes/s; busbw and algbw as defined by nccl-tests._")
    return "\n".join(out) + "\n"


def comparison_markdown(c: Comparison) -> str:
    try:
        from commbench.analysis.compare import comparetext

        render = getattr(comparetext, "render_markdown", None)
    except ImportError:
        render = None
    if render is not None:
        return render(c)  # every value from the files in it is inert Markdown already (core/outtext.py)
    verdict = md(getattr(c, "verdict", ""))
    return f"**Verdict: {verdict}**, geometric-mean ratio {ratio_text(getattr(c, 'geomean_ratio', None))}"
