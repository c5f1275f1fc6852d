"""The Markdown form of `commbench report`, for a ticket: the same sections as the HTML page, the
figures as PNG files beside it (report.write_report writes the page and its figures together,
all or none, through core/outputs.py). Every value from a results file goes through md(), never raw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

from commbench.analysis.points import settingsview
from commbench.analysis.points.mdtext import md, md_table
from commbench.analysis.points.runs import describe_run, run_rows
from commbench.analysis.points.section import Inputs, MarkdownKit
from commbench.analysis.report import plot
from commbench.analysis.report import sections
from commbench.analysis.report.summary import (CULPRIT_HEADERS, FAULT_HEADERS, FAULTS_NOTE, PAIRS_NOTE, ZERO_NOTE,
                                               curve_tables, fault_runs, fnum, json_value, net_rows, ratio_text,
                                               report_title, run_facts, runs_named, size_text, wrong_cell)
from commbench.analysis.wire import wireview
from commbench.core.outtext import LINE_LIMIT, terminal
from commbench.core.runsummary import halfwidth_text

if TYPE_CHECKING:
    import pandas as pd

    from commbench.analysis.compare.compare import Comparison


def build_markdown(df: pd.DataFrame, figure_name: str | None, sources: Sequence[str] = (),
                   comparison: Comparison | None = None,
                   comparison_figure_name: str | None = None, baseline_sources: Sequence[str] = (),
                   zero_figure_name: str | None = None, pairs_figure_name: str | None = None) -> str:
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
    curves, grid = views.curves, views.zero
    inputs, kit = Inputs(df, sources), MarkdownKit(md_table, md)
    if views.pairs is not None:
        out += faults_markdown(views.pairs)
    out += [line for s in sections.SECTIONS if s.after == "faults" for line in s.markdown(inputs, kit)]
    if views.pairs is not None:
        out += pairs_markdown(views.pairs, pairs_figure_name)
    if grid is not None:
        out += zero_markdown(grid, zero_figure_name)
    out += [line for s in sections.SECTIONS if s.after == "zero" for line in s.markdown(inputs, kit)]
    if curves is not None:
        out += ["## Bandwidth and latency", ""]
        if figure_name:
            out += [f"![busbw and small-size latency vs message size]({quote(figure_name)})", ""]
        out += ["## Peak bus bandwidth", ""]
        tables = curve_tables(curves)
        out += peaks_markdown(tables.peaks)
        gaps = tables.gaps  # reduce_scatter's gap to all_reduce, where both were measured
        out += [md(line) for line in gaps] + ([""] if gaps else [])
        out += settings_markdown(tables.settings)
    out += wire_markdown(df)
    out += runs_markdown(df)
    from commbench import __version__

    out.append(f"_commbench {md(__version__)}; GB/s = 1e9 bytes/s; busbw and algbw as defined by nccl-tests._")
    return "\n".join(out) + "\n"


def runs_markdown(df: pd.DataFrame, title: str = "Runs") -> list[str]:
    """Every run's facts, network per host and environment: the after side's "Runs" section, and
    the baseline's with its own title."""
    out = [f"## {title}", ""]
    for r in run_rows(df):
        out += [f"### {md(r['run_id'])}", "", md_table(["fact", "value"], run_facts(r, df)), ""]
        per_host = net_rows(json_value(r.get("net")))
        if per_host:
            out += [md_table(["host", "interface", "MTU", "link layer", "speed", "state"], per_host, right=[2]), ""]
        env = json_value(r.get("env"))
        if isinstance(env, dict) and env:
            out += [md_table(["variable", "value"], sorted((k, v if isinstance(v, str) else json.dumps(v))
                                                           for k, v in env.items())), ""]
    return out


def with_ci(number: str, ci: float | None) -> str:
    """A table's figure with how precisely it is known: '1.51 ±12%' (the point's median time's 95% CI
    half-width, the time_ci column, as the sweep's table marks it; busbw and algbw are known to the
    same fraction), '>±100%' past it; the figure alone where rows do not say (older files)."""
    return number if ci is None or not math.isfinite(ci) or number == "–" else f"{number} {halfwidth_text(ci)}"


def ci_cell(row: dict, name: str) -> str:
    """with_ci of a table row's figure `name`, by its row's ci."""
    return with_ci(fnum(row[name]), row.get("ci"))


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


def _code_block(lines: Iterable[str]) -> list[str]:
    """Lines from a file shown verbatim: no backtick can close the fence."""
    return ["```", *(terminal(line, LINE_LIMIT).replace("`", "'") for line in lines), "```"]


def faults_markdown(pairs_df: pd.DataFrame | None) -> list[str]:
    """The "Faults" section: links of a pairs run that could not be measured ([] when none failed)."""
    runs = fault_runs(pairs_df)
    if not runs:
        return []
    out = ["## Faults", "", FAULTS_NOTE, ""]
    for run in runs:
        if len(runs) > 1:
            out += [f"### Run {md(run['run'])}", ""]
        out += [f"**{md(run['summary'])}**", ""]
        if run["culprits"]:
            out += [md_table(CULPRIT_HEADERS, run["culprits"]), ""]
        if run["undecided"]:
            out += [f"No verdict: {md(run['undecided'])}.", ""]
        out += [md_table(FAULT_HEADERS, run["rows"]), ""]
    return out


def pairs_markdown(pairs_df: pd.DataFrame | None, figure_name: str | None) -> list[str]:
    from commbench.analysis.pairs import faultstext

    lines, _ = faultstext.report(pairs_df)
    out = ["## Links between hosts", "", PAIRS_NOTE, ""]
    if figure_name:
        out += [f"![bandwidth between hosts]({quote(figure_name)})", ""]
    return out + [*_code_block(lines), ""]


def zero_markdown(grid_df: pd.DataFrame | None, figure_name: str | None) -> list[str]:
    from commbench.analysis.tune import zerogrid

    out = ["## ZeRO stages x bucket sizes", "", ZERO_NOTE, ""]
    if figure_name:
        out += [f"![ZeRO stage x bucket size heat map]({quote(figure_name)})", ""]
    for g in zerogrid.grids(grid_df):
        out += [f"### {md(g.name)}", "",
                md_table(zerogrid.TABLE_HEADERS, zerogrid.table_rows(g), right=range(3, 7)), ""]
    return out


def wire_markdown(df: pd.DataFrame) -> list[str]:
    """The "Wire" section: trouble counters that moved during the run, wire bytes per payload byte,
    or the sentence that nothing moved or that no counters were read."""
    w = wireview.section(df, runs_named(df))
    out = ["## Wire", ""]
    if w.read_line:
        out += [f"{wireview.WIRE_NOTE} {md(w.read_line)}", ""]
    if w.sentence:
        out += [md(w.sentence), ""]
    if w.troubles:
        out += ["### Trouble counters that moved", "", md_table(wireview.TROUBLE_HEADERS, w.troubles, right=[4]), ""]
    if w.payload:
        out += ["### Wire bytes per payload byte", "", md_table(wireview.PAYLOAD_HEADERS, w.payload,
                                                                  right=[2, 3, 4, 5]), ""]
    return out
