"""The sections of `commbench report` and the views of `commbench plot`, one list: the HTML page
(report.py), the Markdown report (markdown.py) and the figures (plot.py) all loop over it, so a
section is in each or none. Its order is the order rows are claimed and figures written; the page's
order follows from each section's `after` (points/section.py page_order). A new kind of rows adds its
folder, its Section, and one line here.
"""

from __future__ import annotations

from commbench.analysis.layout import layoutview
from commbench.analysis.pairs import pairsview
from commbench.analysis.points.section import Section
from commbench.analysis.replay import replayview
from commbench.analysis.curves import curvesection
from commbench.analysis.trend import trendview
from commbench.analysis.tune import zeroview
from commbench.analysis.wire import wiresection

SECTIONS: tuple[Section, ...] = (
    pairsview.FAULTS_SECTION,  # the links of a pairs run that could not be measured
    trendview.SECTION,  # a nightly folder's points run after run (docs/TREND.md)
    zeroview.SECTION,  # a `commbench zero` grid of stages x bucket sizes (after pairs on the page)
    pairsview.PAIRS_SECTION,  # the links between hosts of a pairs run
    replayview.SECTION,  # a replay's steps (docs/REPLAY.md)
    layoutview.SECTION,  # a layout run's groups (docs/LAYOUTS.md)
    curvesection.SECTION,  # the curves over message size: the rows no other section claims
    wiresection.SECTION,  # the counters on the wire (every report)
)
