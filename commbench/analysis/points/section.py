"""A report section as its feature declares it: its id and title, the section it follows on the page,
the rows it claims, its HTML and Markdown, its figure, its part in `commbench compare` and its metrics
in `commbench export`. analysis/catalog/sections.py lists every feature's Section; the HTML page, the
Markdown report, `commbench plot`, compare (its computation, lines and Markdown) and export loop over
that list: a new kind of rows adds its folder and a line there, never a branch in report.py,
markdown.py, plot.py, compare or export.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from commbench.analysis.points.pointtable import Aggregate, Query


@dataclass(frozen=True)
class Inputs:
    """What a section reads: the report's rows, the files they came from (none for a frame), the rows
    each claiming section took (by its id; the rest under the section that claims the rest), the curves'
    tables (curves/curvetables.py CurveTables; None without curves), the figures the engine drew for large
    inputs, the line rate to mark, and the Markdown report's figure files (by section id)."""

    df: pd.DataFrame
    sources: Sequence[str] = ()
    rows: Mapping[str, pd.DataFrame | None] = field(default_factory=dict)
    tables: Any = None
    drawn: Mapping[str, Any] | None = None
    line_rate: float | None = None
    figures: Mapping[str, str] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return int(self.df["run_id"].nunique()) if "run_id" in self.df.columns else 0

    def claimed(self, section_id: str) -> pd.DataFrame | None:
        """The rows the section `section_id` claimed (None: none)."""
        return self.rows.get(section_id)


@dataclass(frozen=True)
class HtmlKit:
    """The page's helpers: a table of escaped cells, escaping, an embedded figure with its caption."""

    table: Callable[..., str]
    esc: Callable[[Any], str]
    figure: Callable[..., str]


@dataclass(frozen=True)
class MarkdownKit:
    """The Markdown report's helpers: a table of inert cells, one inert value."""

    table: Callable[..., str]
    md: Callable[[Any], str]


@dataclass(frozen=True)
class SectionFigure:
    """A section's figure file: `commbench plot` writes it beside the file asked for (its name plus
    `suffix`; "" the main figure, which takes the name asked for), and the Markdown report beside
    itself where `in_report`. draw(rows, metric, line rate, the rate's text as given) takes the rows the
    section claimed; refuse(metric) says why a metric cannot be drawn (None: it can)."""

    suffix: str
    draw: Callable[[pd.DataFrame, str, float | None, str | None], Figure]
    in_report: bool = True
    refuse: Callable[[str], str | None] | None = None


@dataclass(frozen=True)
class CompareKit:
    """compare's helpers for a section's summary lines: the verdicts of points folded into one
    (compare.overall_verdict), a ratio as a signed percentage (comparetext.pct_text)."""

    overall: Callable[[set[str]], str]
    pct: Callable[[float], str]


@dataclass(frozen=True)
class CompareHooks:
    """A section's part in `commbench compare` (analysis/compare). `compared(before, after, points)`
    computes its own findings from both sides' aggregates and the compared points: compare keeps them
    in Comparison.parts under the section's id (and its JSON under that key). `causes(before, after,
    keys)` names a likely cause per point key. Its lines, each given the Comparison: `summary` in the
    verdict's lines after the points' counts (with compare's CompareKit), `text` after the table,
    `markdown` in the Markdown, `html` on the report page (with the page's escaping)."""

    compared: Callable[[Aggregate, Aggregate, list[Any]], Any] | None = None
    causes: Callable[[Aggregate, Aggregate, list[tuple]], dict[tuple, str]] | None = None
    summary: Callable[[Any, CompareKit], list[str]] | None = None
    text: Callable[[Any], list[str]] | None = None
    markdown: Callable[[Any], list[str]] | None = None
    html: Callable[[Any, Callable[[Any], str]], str] | None = None


# The most series one metric family of an export holds (analysis/export/metrics.py): a hostile or huge
# results file cannot make a million; what is left out is counted (commbench_series_dropped) and said once.
MAX_SERIES = 4096


class Gauges(Protocol):
    """Where a section's metrics go (analysis/export/metrics.py Metrics): one gauge value a call,
    at most MAX_SERIES series a family (the rest counted as dropped)."""

    def set(self, name: str, help_text: str, labels: Mapping[str, Any], value: float) -> None: ...

    def dropped(self, name: str, count: int) -> None:
        """`count` series of family `name` that a section left out itself (the pairs links above the cap)."""


def _own_entry(section: Section, inputs: Inputs, body: str) -> list[tuple[str, str]]:
    return [(section.id, section.title)] if body else []


@dataclass(frozen=True)
class Section:
    """One feature's section: `html` returns "" and `markdown` [] where the rows hold none of it."""

    id: str
    title: str
    after: str  # the id of the section it follows on the page and in the Markdown ("": in list order)
    html: Callable[[Inputs, HtmlKit], str]
    markdown: Callable[[Inputs, MarkdownKit], list[str]]
    compare: CompareHooks | None = None  # its part in `commbench compare`, if it has one
    # its gauges in `commbench export` (the rows' query, where they go), if it has any (docs/METRICS.md)
    metrics: Callable[[Query, Gauges], None] | None = None
    # the rows of its kind, taken from those no section before it in the list took (None: none)
    claims: Callable[[pd.DataFrame], pd.DataFrame | None] | None = None
    claims_rest: bool = False  # it takes the rows no section claimed (the curves over message size)
    figure: SectionFigure | None = None
    # its links in the page's nav, given its body (default: its own id and title where it has a body)
    nav: Callable[[Inputs, str], list[tuple[str, str]]] | None = None
    # whether it reads the rows' per-iteration samples, given the results files (the report reads them
    # only where a section does or a comparison tests them: most of a million rows' memory)
    reads_samples: Callable[[Sequence[Any]], bool] | None = None

    def nav_entries(self, inputs: Inputs, body: str) -> list[tuple[str, str]]:
        return self.nav(inputs, body) if self.nav is not None else _own_entry(self, inputs, body)


def page_order(sections: Sequence[Section]) -> list[Section]:
    """The sections in page order: those that follow none (after "") in list order, each followed
    by the sections that name it, in list order (and by theirs). The list's own order is the order
    rows are claimed and figures drawn."""
    ids = {s.id for s in sections}
    for s in sections:
        if s.after and s.after not in ids:
            raise ValueError(f"section {s.id!r} follows {s.after!r}, which is not listed")

    def chain(s: Section) -> list[Section]:
        return [s] + [x for f in sections if f.after == s.id for x in chain(f)]

    return [x for s in sections if not s.after for x in chain(s)]


def figure_order(sections: Sequence[Section]) -> list[Section]:
    """The sections that draw a figure, in the order their files are written: the main figure (suffix
    "") first, the others in list order."""
    drawn = [s for s in sections if s.figure is not None]
    return sorted(drawn, key=lambda s: s.figure is None or s.figure.suffix != "")
