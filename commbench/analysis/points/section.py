"""A report section as its feature declares it: its id and title, the hand-kept section it follows,
and its HTML and Markdown hooks. analysis/report/sections.py lists every feature's one Section, and
the HTML page and the Markdown report loop over that list: a new kind of rows adds its folder and a
line there, never a branch in report.py or markdown.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# The hand-kept sections a feature's section may follow, in page order (report.py, markdown.py).
SLOTS = ("faults", "zero")


@dataclass(frozen=True)
class Inputs:
    """What a section reads: the report's rows and the files they came from (none for a frame)."""

    df: pd.DataFrame
    sources: Sequence[str] = ()

    @property
    def runs(self) -> int:
        return int(self.df["run_id"].nunique()) if "run_id" in self.df.columns else 0


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
class Section:
    """One feature's section: `html` returns "" and `markdown` [] where the rows hold none of it."""

    id: str
    title: str
    after: str  # one of SLOTS: where the section stands on the page and in the Markdown
    html: Callable[[Inputs, HtmlKit], str]
    markdown: Callable[[Inputs, MarkdownKit], list[str]]
    # its lines in the page's comparison section (the comparison, the page's escaping), if it adds any
    compare_html: Callable[[Any, Callable[[Any], str]], str] | None = None

    def __post_init__(self) -> None:
        if self.after not in SLOTS:
            raise ValueError(f"section {self.id!r} follows {self.after!r}, not one of {', '.join(SLOTS)}")
