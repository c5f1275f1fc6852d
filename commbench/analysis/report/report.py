"""`commbench report`: one self-contained report of results, and its HTML page (figures embedded as
base64 PNG, no external URLs, no JavaScript). The Markdown form (for a ticket; the figures saved
as PNGs beside it) is built by markdown.py; what both show comes from summary.py.

Its own core: the comparison against a baseline (when given), the runs' metadata (hosts, ranks,
backend, device, network, versions, environment) and every point. Between them, the sections of
analysis/catalog/sections.py's one list, each declared by its feature: the failed links of a pairs run
("Faults"), the runs over time ("Trend"), the pairs heat map, the ZeRO grid, a replay's steps, a
layout's groups, the curves with their peak-busbw table and settings side by side, and the counters
on the wire ("Wire").

Every value read from a results file is untrusted (labels and environment values are free
text): it goes through html.escape in HTML and through md() in Markdown, never raw.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
from importlib import resources
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # types only: the page's modules import pandas and matplotlib when they run
    import pandas as pd
    from matplotlib.figure import Figure

from commbench.analysis.points.runs import describe_run, run_rows
from commbench.analysis.points.section import HtmlKit, Inputs, page_order
from commbench.analysis.report import plot, reportparts
from commbench.analysis.report.comparehtml import comparison_html
from commbench.analysis.report.htmlparts import esc, figure_html, table
from commbench.analysis.curves import curveplot, curvesection
from commbench.analysis.report.markdown import build_markdown
from commbench.analysis.catalog import sections
from commbench.analysis.curves.curvetables import CurveTables, ci_cell, curve_tables, fnum, size_text, wrong_cell
from commbench.analysis.points.runs import runs_named
from commbench.analysis.report.summary import (json_value, late_arrivals_by_run, net_rows, report_title, run_facts,
                                               run_positions)
from commbench.core import outputs
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.units import counted

FORMATS = ("html", "markdown")
UNUSED_COLUMNS = ("rank_time_us",)  # no section reads them; a section that starts to takes them out

# The page's one stylesheet, package data beside this module (pyproject.toml's package-data ships it).
CSS = "\n" + resources.files("commbench.analysis.report").joinpath("report.css").read_text(encoding="utf-8")


def _several(rows: list[dict], name: str) -> bool:
    return len({r[name] for r in rows}) > 1


def peak_table_html(rows: list[dict]) -> str:
    """The "Peak bus bandwidth" table (curves/curvesection.py's, in the page's cells)."""
    return curvesection.peak_table_html(rows, table)


def points_table_html(rows: list[dict]) -> str:
    several, settings = _several(rows, "run"), _several(rows, "settings")
    extra = (["run"] if several else []) + (["setting"] if settings else [])
    headers = ["collective", "dtype", "placement"] + extra + [
        "size", "bytes", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "repetitions", "#wrong"]
    body, classes = [], []
    for r in rows:
        wrong, bad = wrong_cell(r["wrong"])
        body.append([r["collective"], r["dtype"], r["placement"]] + ([r["run"]] if several else [])
                    + ([r["setting"]] if settings else []) + [
            size_text(r["size_bytes"]), r["size_bytes"], ci_cell(r, "time_us"), fnum(r["algbw"]), ci_cell(r, "busbw"),
            r["reps"], wrong])
        classes.append([""] * (len(headers) - 1) + ["bad" if bad else ""])
    first_num = 3 + len(extra)
    return table(headers, body, num=range(first_num, len(headers)), classes=classes)


def runs_html(df: pd.DataFrame, late: Mapping[str, str] | None = None) -> str:
    """The "Runs" section's body; late: as run_facts takes it."""
    parts = []
    at = run_positions(df)  # each run's rows, found once for every run
    for row in run_rows(df):
        title = f"Run {row['run_id']}" + (f" — {row['label']}" if row.get("label") else "")
        parts.append(f"<h3>{esc(title)}</h3>")
        parts.append(f'<p class="muted">{esc(describe_run(row))}</p>')
        facts = run_facts(row, df, at.get(row["run_id"], np.zeros(0, dtype=np.int64)), late)
        parts.append('<div class="runs">')
        half = (len(facts) + 1) // 2
        for chunk in (facts[:half], facts[half:]):
            parts.append(table(None, chunk))
        parts.append("</div>")
        net = json_value(row.get("net"))
        per_host = net_rows(net)
        if per_host:
            parts.append("<h4>Network, per host</h4>")
            parts.append(table(["host", "interface", "MTU", "link layer", "speed", "state"], per_host, num=[2]))
        elif net is not None:
            shown = json.dumps(net, indent=2) if not isinstance(net, str) else net
            parts.append(f"<h4>Network</h4><pre>{esc(shown)}</pre>")
        env = json_value(row.get("env"))
        parts.append("<h4>Environment (allow-listed)</h4>")
        if isinstance(env, dict) and env:
            parts.append(table(["variable", "value"], [[k, v if isinstance(v, str) else json.dumps(v)]
                                                       for k, v in sorted(env.items())]))
        elif isinstance(env, dict) or env is None:
            parts.append('<p class="muted">none of the allow-listed variables (NCCL_*, GLOO_*, ...) were set</p>')
        else:
            parts.append(f"<pre>{esc(env)}</pre>")
        plan_json = json_value(row.get("plan"))
        if plan_json is not None:
            text = json.dumps(plan_json, indent=2, sort_keys=True) if not isinstance(plan_json, str) else plan_json
            parts.append(f"<details><summary>plan (JSON)</summary><pre>{esc(text)}</pre></details>")
    return "\n".join(parts)


def comparison_figure(before_df: pd.DataFrame, after_df: pd.DataFrame) -> Figure | None:
    """The before/after overlay, or None when a side has no bandwidth to draw (every pairs link of
    it failed: the comparison's "link down" points say so)."""
    try:
        return curveplot.build_comparison_figure(before_df, after_df)
    except BadInput:
        return None


def _compare(before_df: pd.DataFrame, after_df: pd.DataFrame) -> Any:
    try:
        from commbench.analysis.compare import compare
    except ImportError as exc:
        raise RuntimeFailure(f"--baseline needs commbench.analysis.compare.compare, which this install lacks ({exc})"
                             ) from None
    return compare.compare_frames(before_df, after_df)


# --------------------------------------------------------------------------- the page


def _large_html(paths: Sequence[str | Path], baseline: Sequence[str | Path] | None,
                rate: float | None) -> str | None:
    """The HTML page of large inputs (analysis/points/pointtable.py: MIN_ROWS rows or more, curves only): the
    comparison and the figures aggregated over parquet, the tables from the rows' light columns.
    None: pandas reads the inputs."""
    from commbench.analysis.compare import compare
    from commbench.analysis.points import pointtable, figurequery

    if not pointtable.large([*paths, *(baseline or ())]):
        return None
    after = figurequery.plot_source(paths, force=True)
    before = figurequery.plot_source(baseline, force=True) if baseline else None
    if after is None or (baseline and before is None):
        return None
    comparison = compare.compare_paths(baseline, paths) if baseline else None
    if baseline and comparison is None:
        return None
    # the figures before the rows are read: the engine's aggregations never share memory with them
    drawn = reportparts.engine_figures(figurequery, after, before, rate)
    tables = curve_tables(after, with_ratios=True)
    source, bsource = after.source, before.source if before is not None else None
    del after, before  # their DuckDB connections and what they cached: half a GB at 10M rows, held
    gc.collect()  # in reference cycles until a collection
    if source.rows == 0:
        raise BadInput(f"{paths[0]} holds no points (an empty or interrupted run): nothing to report")
    late = late_arrivals_by_run(source)  # from the files' per-rank columns, which no frame here holds
    # the baseline's runs' metadata, without its plan, as write_report reads the baseline; only the
    # columns its "Runs" section reads (not the measured values nor the wire counters), written out
    # and let go before the after side's rows are read: the two frames are never held together
    baseline_runs = None
    if bsource is not None:
        bdf = figurequery.report_frame(bsource, figurequery.BASELINE_COLUMNS)
        baseline_runs = runs_html(bdf, late_arrivals_by_run(bsource)) if len(bdf) else None
        del bdf
    df = figurequery.report_frame(source)
    return build_html(df, [str(p) for p in paths], None, comparison, [str(p) for p in baseline or ()],
                      line_rate=rate, drawn=drawn, baseline_runs=baseline_runs, tables=tables, late=late)


def _where_html(df: pd.DataFrame) -> str:
    """Under the title: one line per run setup, what ran where."""
    described: dict[str, list[str]] = {}
    names = runs_named(df)
    for r in run_rows(df):
        described.setdefault(describe_run(r), []).append(names[str(r["run_id"])])
    several = len(names) > 1
    items = [f"<li>{esc(', '.join(n) + ': ' if several else '')}{esc(text)}</li>" for text, n in described.items()]
    return '<ul class="sub where">' + "".join(items) + "</ul>"


def build_html(df: pd.DataFrame, sources: Sequence[str] = (), baseline_df: pd.DataFrame | None = None,
               comparison: Any = None, baseline_sources: Sequence[str] = (), line_rate: float | None = None,
               drawn: dict[str, Any] | None = None, baseline_runs: str | None = None,
               tables: CurveTables | None = None, late: Mapping[str, str] | None = None) -> str:
    """The whole page (no external resources, no scripts). drawn: the figures the engine drew (large inputs:
    {"curves": Figure, "comparison": Figure}); baseline_runs: the baseline's runs_html, written before;
    tables, late: the curves' tables and each run's "late arrivals" from the files (large inputs), else the rows'.

    The sections between the comparison and the runs come from sections.py's list; the rest is the
    page's own core: the title, what ran where, the comparison with a baseline (its lines from the
    sections' compare hooks), every run's metadata and every point, which every report has or which
    belong to no one kind of rows."""
    if baseline_runs is None and baseline_df is not None and len(baseline_df):
        baseline_runs = runs_html(baseline_df)
    from commbench import __version__

    views = plot.split_views(df)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tables = tables if tables is not None or views.rest is None else curve_tables(views.rest)
    inputs = Inputs(df, sources, views.rows, tables, drawn, line_rate)
    bodies = [(s, s.html(inputs, HtmlKit(table, esc, figure_html))) for s in page_order(sections.SECTIONS)]
    nav = ([("comparison", "Comparison with the baseline")] if comparison is not None else []) + [
        entry for s, body in bodies for entry in s.nav_entries(inputs, body)] + [("runs", "Runs")] + (
        [("baseline-runs", reportparts.BASELINE_RUNS)] if baseline_runs is not None else []) + (
        [("points", "All points")] if tables is not None else [])
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(report_title(df))}</title>", f"<style>{CSS}</style></head><body>",
           f"<header><h1>{esc(report_title(df))}</h1>",
           _where_html(df),
           "<nav>" + "".join(f'<a href="#{sid}">{esc(t)}</a>' for sid, t in nav) + "</nav></header>"]
    if comparison is not None:
        out += _comparison_section(df, sources, baseline_df, comparison, baseline_sources, drawn)
    out += [body for _, body in bodies if body]
    out.append(f'<section id="runs"><h2>Runs</h2>{runs_html(df, late)}</section>')
    if baseline_runs is not None:  # the before side's metadata, as the after side's
        out.append(f'<section id="baseline-runs"><h2>{esc(reportparts.BASELINE_RUNS)}</h2>{baseline_runs}'
                   "</section>")
    if tables is not None:
        points = tables.points
        out.append('<section id="points"><h2>All points</h2><details><summary>'
                   f"{counted(len(points), 'point')} (median over repetitions)</summary>")
        out.append(points_table_html(points))
        out.append("</details></section>")
    out.append(f"<footer>Generated {esc(now)} by commbench {esc(__version__)} from "
               f"{esc(', '.join(map(str, sources)) or 'a DataFrame')}. GB/s = 1e9 bytes/s; sizes in binary "
               "units (KiB = 1024 B); busbw and algbw as defined by nccl-tests.</footer>")
    out.append("</body></html>")
    return "\n".join(out)


def _comparison_section(df: pd.DataFrame, sources: Sequence[str], baseline_df: pd.DataFrame | None,
                        comparison: Any, baseline_sources: Sequence[str], drawn: dict[str, Any] | None) -> list[str]:
    """The comparison with the baseline: its table, the overlay, and each section's own lines."""
    out = ['<section id="comparison"><h2>Comparison with the baseline</h2>',
           f'<p class="muted">before (baseline): {esc(", ".join(map(str, baseline_sources)) or "–")}; '
           f'after: {esc(", ".join(map(str, sources)) or "–")}</p>']
    figure = ""
    cfig = (drawn.get("comparison") if drawn
            else comparison_figure(baseline_df, df) if baseline_df is not None else None)
    if cfig is not None:
        figure = figure_html(cfig, "bus bandwidth before (dashed) and after (solid)",
                             curveplot.comparison_caption(cfig))
    hooks = [s.compare.html for s in sections.SECTIONS if s.compare and s.compare.html]
    return out + [comparison_html(comparison, figure), *(html(comparison, esc) for html in hooks), "</section>"]


# --------------------------------------------------------------------------- command


def default_out(first_result: str | Path, fmt: str) -> Path:
    return plot.default_out(first_result, ".html" if fmt == "html" else ".md")


def resolve_format(fmt: str | None, out: str | Path | None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise BadInput(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
        return fmt
    if out is not None and Path(out).suffix.lower() in (".md", ".markdown"):
        return "markdown"
    return "html"


def write_report(paths: Sequence[str | Path], baseline: Sequence[str | Path] | None = None,
                 out: str | Path | None = None, fmt: str | None = None,
                 line_rate: str | None = None, force: bool = False) -> list[Path]:
    """The `commbench report` command. Returns the files written (the report first). A Markdown
    report and its figures are written together (core/outputs.py): all of them or none; force
    replaces existing ones (never an input)."""
    from commbench.core.results import read_results

    fmt = resolve_format(fmt, out)
    inputs = [*paths, *(baseline or ())]
    target = Path(out) if out is not None else default_out(paths[0], fmt)
    rate = curveplot.parse_line_rate(line_rate) if line_rate is not None else None
    cfigure = target.with_name(f"{target.stem}-comparison.png")
    plot.check_new(target, "report", inputs=inputs, force=force)
    if fmt == "html" and (page := _large_html(paths, baseline, rate)) is not None:
        return outputs.write_files([outputs.Output(target, page.encode("utf-8"))], "report", inputs, force)
    # What no section reads stays on disk (most of a million rows' memory): the per-rank times (the
    # skews are read: the run facts judge late arrivals from them), the per-iteration samples unless
    # a comparison tests them or a section reads them (a layout's contention intervals), the baseline's plan.
    samples = bool(baseline) or any(s.reads_samples(paths) for s in sections.SECTIONS if s.reads_samples)
    df = read_results(paths, skip=UNUSED_COLUMNS + (() if samples else ("samples_us",)))
    if len(df) == 0:
        raise BadInput(f"{paths[0]} holds no points (an empty or interrupted run): nothing to report")
    drawn = plot.split_views(df).drawn(report=True)  # the sections' figures beside a Markdown report
    named = {sid: target.with_name(f"{target.stem}{fig.suffix}.png") for sid, fig, _ in drawn}
    if fmt == "markdown":  # before anything is drawn or written: never half a report
        main = [named[sid] for sid, fig, _ in drawn if not fig.suffix]
        for path in [*main, *([cfigure] if baseline else []), *(named[sid] for sid, fig, _ in drawn if fig.suffix)]:
            plot.check_new(path, "report", inputs=inputs, force=force)
    baseline_df = comparison = None
    if baseline:
        baseline_df = read_results(baseline, skip=UNUSED_COLUMNS + ("plan",))
        if len(baseline_df) == 0:
            raise BadInput(f"--baseline {baseline[0]} holds no points: nothing to compare with")
        comparison = _compare(baseline_df, df)
    sources, bsources = [str(p) for p in paths], [str(p) for p in baseline or ()]
    if fmt == "html":
        page = build_html(df, sources, baseline_df, comparison, bsources, line_rate=rate)
        return outputs.write_files([outputs.Output(target, page.encode("utf-8"))], "report", inputs, force)
    figures = [plot.figure_output(fig.draw(rows, "busbw", rate, None), named[sid]) for sid, fig, rows in drawn]
    cfig = comparison_figure(baseline_df, df) if baseline_df is not None else None
    if cfig is not None:
        figures.append(plot.figure_output(cfig, cfigure))
    text = build_markdown(df, None, sources, comparison, cfigure.name if cfig is not None else None, bsources,
                          {sid: path.name for sid, path in named.items()})
    text = reportparts.with_baseline_runs(text, baseline_df)
    return outputs.write_files([outputs.Output(target, text.encode("utf-8")), *figures], "report", inputs, force)
