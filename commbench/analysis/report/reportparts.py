"""Report pieces that follow what was drawn and what was given: figure captions that name only
the panels a figure has (a figure without small sizes has no latency panel), and the baseline's
runs, so that the before side's metadata is in the report as the after side's is.

For large inputs (report._large_html): the figures from the engine's lines, the after side's
passes over the files shared by its curves and its half of the overlay.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from commbench.analysis.curves import curveplot
from commbench.analysis.points.mdtext import md, md_table
from commbench.analysis.points.runs import run_rows
from commbench.analysis.report.summary import json_value, net_rows, run_facts
from commbench.core.errors import BadInput

if TYPE_CHECKING:
    pass

BASELINE_RUNS = "Baseline runs (before)"
def baseline_runs_markdown(df: pd.DataFrame) -> list[str]:
    """The baseline's runs as the Markdown report's "Runs" section lists the after side's."""
    return runs_markdown(df, BASELINE_RUNS)


def with_baseline_runs(text: str, baseline_df: pd.DataFrame | None) -> str:
    """The Markdown report with the baseline's runs after its own "Runs" section (before the footer line)."""
    if baseline_df is None or len(baseline_df) == 0:
        return text
    body, _, footer = text.rstrip("\n").rpartition("\n")
    return "\n".join([body, *baseline_runs_markdown(baseline_df), footer]) + "\n"


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


def engine_figures(figurequery: Any, after: Any, before: Any, rate: float | None) -> dict[str, Any]:
    """The curves of the after side and the before/after overlay, drawn from the engine's lines.
    Where the after side's lines are all of one run (one run_id and label), its overlay lines are
    the same groups, renamed: they are taken from the curves' lines instead of another pass."""
    mine: dict[str, list[dict[str, Any]]] = {}
    sides = {"before": before, "after": after}

    def after_lines(column: str) -> list[dict[str, Any]]:
        if column not in mine:
            mine[column] = figurequery.plot_lines(after, column)
        return mine[column]

    def side_lines(name: str, column: str) -> list[dict[str, Any]]:
        if name == "after":
            lines = after_lines(column)
            if len({(ln["key"]["run_id"], ln["key"]["label"]) for ln in lines}) == 1:
                return [as_side(ln, name) for ln in lines]
        return figurequery.plot_lines(sides[name], column, side=name)

    drawn: dict[str, Any] = {"curves": curveplot.build_figure(
        figurequery.run_firsts(after, "busbw_GBps"), "busbw", rate,
        lines_of=lambda c: [curveplot.Line(**as_side(ln)) for ln in after_lines(c)])}
    if before is not None:
        try:
            drawn["comparison"] = curveplot.build_comparison_figure(
                figurequery.run_firsts(before, "busbw_GBps"), figurequery.run_firsts(after, "busbw_GBps"),
                lines_of=lambda name, c: [curveplot.Line(**ln) for ln in side_lines(name, c)])
        except BadInput:
            drawn["comparison"] = None
    return drawn


def as_side(line: dict[str, Any], side: str | None = None) -> dict[str, Any]:
    """A copy of one of plot_lines' lines (a figure styles its lines in place); with `side`, as
    plot_lines(..., side=side) names it: every run of the side as one."""
    key = dict(line["key"])
    if side is not None:
        key["run_id"], key["label"] = side, ""
    return {**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in line.items()}, "key": key}
