"""The sections the features add to `commbench report`, in page order within their slot: the HTML
page (report.py) and the Markdown report (markdown.py) both loop over this one list, so a section
is in both or neither. A new kind of rows adds its folder, its Section, and one line here.
"""

from __future__ import annotations

from commbench.analysis.layout import layoutview
from commbench.analysis.points.section import Section
from commbench.analysis.replay import replayview
from commbench.analysis.trend import trendview

SECTIONS: tuple[Section, ...] = (
    trendview.SECTION,  # a nightly folder's points run after run (docs/TREND.md)
    replayview.SECTION,  # a replay's steps (docs/REPLAY.md)
    layoutview.SECTION,  # a layout run's groups (docs/LAYOUTS.md)
)
