"""The report's "ZeRO stages x bucket sizes" section of `commbench zero` rows: the heat map of step
time by stage and bucket size (tune/zerogrid.py) and each grid's table, as HTML and Markdown; its
figure beside `commbench plot`'s (the "-zero" file)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from commbench.analysis.points.section import HtmlKit, MarkdownKit, Section, SectionFigure
from commbench.analysis.tune import zerogrid

if TYPE_CHECKING:
    import pandas as pd

ZERO_NOTE = ("Each cell: one training step's communication for that ZeRO stage with that reduce_bucket_size "
             "(elements, as in ds_config.json), median over repetitions: step time and effective bus bandwidth. "
             "The boxed cell is the shortest step of its stage. Stage 0 ignores reduce_bucket_size (DeepSpeed's "
             "fixed 5e8-element buckets): its row is the data-parallel reference.")


def zero_html(grid_df: pd.DataFrame | None, kit: HtmlKit) -> str:
    """The section ("" without zero rows)."""
    if grid_df is None:
        return ""
    out = ['<section id="zero"><h2>ZeRO stages x bucket sizes</h2>']
    out.append(kit.figure(zerogrid.build_figure(grid_df), "heat map of step time by ZeRO stage and bucket size",
                          ZERO_NOTE))
    for g in zerogrid.grids(grid_df):
        out.append(f"<h3>{kit.esc(g.name)}</h3>")
        out.append(kit.table(zerogrid.TABLE_HEADERS, zerogrid.table_rows(g), num=range(3, 7)))
    out.append("</section>")
    return "\n".join(out)


def zero_markdown(grid_df: pd.DataFrame | None, figure_name: str | None, kit: MarkdownKit) -> list[str]:
    """The section ([] without zero rows); figure_name: the heat map's file."""
    if grid_df is None:
        return []
    out = ["## ZeRO stages x bucket sizes", "", ZERO_NOTE, ""]
    if figure_name:
        out += [f"![ZeRO stage x bucket size heat map]({quote(figure_name)})", ""]
    for g in zerogrid.grids(grid_df):
        out += [f"### {kit.md(g.name)}", "",
                kit.table(zerogrid.TABLE_HEADERS, zerogrid.table_rows(g), right=range(3, 7)), ""]
    return out


# After "pairs" on the page; listed before it so that the "-zero" file is written first, as before.
SECTION = Section("zero", "ZeRO stages x bucket sizes", "pairs",
                  lambda inp, kit: zero_html(inp.claimed("zero"), kit),
                  lambda inp, kit: zero_markdown(inp.claimed("zero"), inp.figures.get("zero"), kit),
                  claims=zerogrid.zero_rows,
                  figure=SectionFigure("-zero", lambda rows, metric, rate, label: zerogrid.build_figure(rows, metric)))
