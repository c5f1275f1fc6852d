"""The report's "Trend" section: when the results hold enough runs of one measurement (a nightly
job's folder), each point's busbw run after run (analysis/trend/trendplot.py) and the changes `commbench
trend` names, with what differed around them (docs/TREND.md). No section for fewer runs, runs of
several shapes, or a frame given without files. The Markdown report says the same changes; its
figure is the page's (or `commbench trend --plot FILE`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from commbench.analysis.points.section import Section
from commbench.analysis.trend import trend, trendplot
from commbench.core.errors import BadInput, Inconclusive


def found(sources: Sequence[str], runs: int) -> trend.Trend | None:
    """The trend of the report's files, or None where it has none to show."""
    if not sources or runs < trend.MIN_RUNS:
        return None
    try:
        return trend.trend(sources)
    except (BadInput, Inconclusive):  # several shapes, too few runs: the other sections say enough
        return None


def section_html(got: trend.Trend | None, esc: Callable[[Any], str], figure: Callable[..., str]) -> str:
    """The section's HTML ("" without a trend); esc and figure: the report's escaping and figure helpers."""
    if got is None:
        return ""
    out = ['<section id="trend"><h2>Trend</h2>',
           f'<p class="muted">{_intro(got)}</p>',
           figure(trendplot.draw(got), "busbw of each point run after run", "each point's median per run; "
                  "a dashed line marks the first run after a change")]
    if not got.changes:
        out.append("<p>No change: every point's series is steady.</p>")
    for at in got.change_runs():
        changed = [c for c in got.changes if c.at == at]
        host, links = trend.common_host(changed)
        out.append(f"<h3>Change from {esc(got.runs[at].name())}</h3><ul>")
        out += [f"<li>{esc(trend.describe(c))}</li>" for c in changed[:12]]
        out.append("</ul>")
        if host is not None:
            out.append(f"<p>Every changed link ({links}) has {esc(host)} at one end.</p>")
        differs = got.differs.get(at) or ["nothing commbench records"]
        out.append("<p>What differs from the run before: " + esc("; ".join(differs)) + "</p>")
    out.append("</section>")
    return "\n".join(out)


def _intro(got: trend.Trend) -> str:
    return (f"{len(got.runs)} runs in time order, {got.points} points followed; a change is named where "
            "Pettitt's test (Benjamini-Hochberg over points) and a 5% move agree (docs/TREND.md).")


def section_markdown(got: trend.Trend | None, md: Callable[[Any], str]) -> list[str]:
    """The Markdown report's "Trend" section ([] without a trend): the changes and what differed around
    them; the figure of each point run after run is the HTML page's."""
    if got is None:
        return []
    out = ["## Trend", "", md(_intro(got)), ""]
    if not got.changes:
        out += ["No change: every point's series is steady.", ""]
    for at in got.change_runs():
        changed = [c for c in got.changes if c.at == at]
        host, links = trend.common_host(changed)
        out += [f"### Change from {md(got.runs[at].name())}", ""]
        out += [f"- {md(trend.describe(c))}" for c in changed[:12]] + [""]
        if host is not None:
            out += [f"Every changed link ({links}) has {md(host)} at one end.", ""]
        differs = got.differs.get(at) or ["nothing commbench records"]
        out += ["What differs from the run before: " + md("; ".join(differs)), ""]
    return out


SECTION = Section("trend", "Trend", "faults",
                  lambda inp, kit: section_html(found(inp.sources, inp.runs), kit.esc, kit.figure),
                  lambda inp, kit: section_markdown(found(inp.sources, inp.runs), kit.md))
