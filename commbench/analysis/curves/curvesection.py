"""The report's sections of the curves over message size, the rows no other section claims: the
figure of bus bandwidth and small-size latency ("Bandwidth and latency"), the peak busbw table with
reduce-scatter's gap to all-reduce ("Peak bus bandwidth"), and the settings side by side ("Settings",
only when the rows hold several settings: analysis/points/settingsview.py), as HTML and Markdown. Its
figure is `commbench plot`'s main one; every point's table is the page's own (report.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

from commbench.analysis.points import settingsview
from commbench.analysis.points.mdtext import md, md_table
from commbench.analysis.points.section import HtmlKit, Inputs, MarkdownKit, Section, SectionFigure
from commbench.analysis.curves import curveplot
from commbench.analysis.curves.curvetables import CurveTables, ci_cell, size_text, wrong_cell

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

PEAKS_NOTE = ("Per collective, dtype and placement: the size with the highest median busbw over repetitions "
              "(±: its median's 95% CI); #wrong sums every row of the line.")


def _several(rows: list[dict], name: str) -> bool:
    return len({r[name] for r in rows}) > 1


def peak_table_html(rows: list[dict], table: Callable[..., str]) -> str:
    """The peak table; table: the page's (report/htmlparts.py)."""
    several, settings = _several(rows, "run_id"), _several(rows, "settings")
    extra = (["run"] if several else []) + (["setting"] if settings else [])
    headers = ["collective", "dtype", "placement"] + extra + [
        "peak busbw (GB/s)", "at size", "algbw there (GB/s)", "time there (µs)", "repetitions", "#wrong (total)"]
    body, classes = [], []
    for r in rows:
        wrong, bad = wrong_cell(r["wrong"], r["unchecked"])
        body.append([r["collective"], r["dtype"], r["placement"]] + ([r["run"]] if several else [])
                    + ([r["setting"]] if settings else []) + [
            ci_cell(r, "peak_busbw"), size_text(r["size_bytes"]), ci_cell(r, "algbw"), ci_cell(r, "time_us"), r["reps"],
            wrong])
        classes.append([""] * (len(headers) - 1) + ["bad" if bad else ""])
    first_num = 3 + len(extra)
    return table(headers, body, num=range(first_num, len(headers)), classes=classes)


def settings_html(tables: list, kit: HtmlKit) -> str:
    """The "Settings" section (settingsview.settings_tables): "" when the rows hold one setting or none."""
    if not tables:
        return ""
    esc, table = kit.esc, kit.table
    out = ['<section id="settings"><h2>Settings</h2>', f'<p class="muted">{esc(settingsview.NOTE)}</p>']
    for t in tables:
        out += [f"<h3>{esc(t.title)}</h3>", f'<p class="best">{esc(t.line)}</p>',
                table(settingsview.HEADERS, t.rows, num=[2, 4, 5])]
    out.append("</section>")
    return "\n".join(out)


def peaks_markdown(peaks: list[dict]) -> list[str]:
    several = len({p["run_id"] for p in peaks}) > 1
    settings = len({p["settings"] for p in peaks}) > 1
    extra = (["run"] if several else []) + (["setting"] if settings else [])
    headers = ["collective", "dtype", "placement"] + extra + [
        "peak busbw (GB/s)", "at size", "algbw there (GB/s)", "time there (µs)", "repetitions", "#wrong"]
    rows = [[p["collective"], p["dtype"], p["placement"]] + ([p["run"]] if several else [])
            + ([p["setting"]] if settings else []) + [
        ci_cell(p, "peak_busbw"), size_text(p["size_bytes"]), ci_cell(p, "algbw"), ci_cell(p, "time_us"), p["reps"],
        wrong_cell(p["wrong"], p["unchecked"])[0]] for p in peaks]
    return [md_table(headers, rows, right=range(3 + len(extra), len(headers))), ""]


def settings_markdown(tables: list) -> list[str]:
    """The "Settings" section (settingsview.settings_tables): [] when the rows hold one setting or none."""
    if not tables:
        return []
    out = ["## Settings", "", settingsview.NOTE, ""]
    for t in tables:
        out += [f"### {md(t.title)}", "", f"**{md(t.line)}**", "", md_table(settingsview.HEADERS, t.rows,
                                                                         right=[2, 4, 5]), ""]
    return out


def _curves_parts(cfig: Figure, tables: CurveTables, kit: HtmlKit) -> list[str]:
    """The figure, the peak table with the reduce-scatter gap, the settings."""
    return ['<section id="curves"><h2>Bandwidth and latency</h2>',
            kit.figure(cfig, "bus bandwidth and small-size latency against message size",
                       curveplot.curves_caption(cfig)),
            "</section>", '<section id="peaks"><h2>Peak bus bandwidth</h2>',
            f'<p class="muted">{PEAKS_NOTE}</p>',
            peak_table_html(tables.peaks, kit.table),
            *(f'<p class="gap">{kit.esc(line)}</p>' for line in tables.gaps),  # rs vs all_reduce
            "</section>", settings_html(tables.settings, kit)]


def curves_html(inp: Inputs, kit: HtmlKit) -> str:
    """The curves' sections ("" without curves); the figure the engine drew where it did (large inputs)."""
    curves, tables = inp.claimed("curves"), inp.tables
    if curves is None or tables is None:
        return ""
    cfig = inp.drawn["curves"] if inp.drawn else curveplot.build_figure(curves, "busbw", inp.line_rate)
    return "\n".join(_curves_parts(cfig, tables, kit))


def curves_markdown(inp: Inputs, kit: MarkdownKit) -> list[str]:
    """The curves' sections ([] without curves); the figure is the file beside the report."""
    if inp.claimed("curves") is None or inp.tables is None:
        return []
    out = ["## Bandwidth and latency", ""]
    if figure_name := inp.figures.get("curves"):
        out += [f"![busbw and small-size latency vs message size]({quote(figure_name)})", ""]
    out += ["## Peak bus bandwidth", ""]
    out += peaks_markdown(inp.tables.peaks)
    gaps = inp.tables.gaps  # reduce_scatter's gap to all_reduce, where both were measured
    out += [kit.md(line) for line in gaps] + ([""] if gaps else [])
    return out + settings_markdown(inp.tables.settings)


def _nav(inp: Inputs, body: str) -> list[tuple[str, str]]:
    if inp.tables is None:
        return []
    return [("curves", "Bandwidth and latency"), ("peaks", "Peak bus bandwidth")] + (
        [("settings", "Settings")] if inp.tables.settings else [])


def _draw(rows: pd.DataFrame, metric: str, rate: float | None, label: str | None) -> Figure:
    return curveplot.build_figure(rows, metric, rate, label)


SECTION = Section("curves", "Bandwidth and latency", "", curves_html, curves_markdown, claims_rest=True,
                  figure=SectionFigure("", _draw), nav=_nav)
