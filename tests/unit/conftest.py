"""Fixtures of the unit tier (tests/conftest.py's are shared by every tier), and its guard: each
test's set-up, call and tear-down run with process starts refused (tests/unit/inprocess.py)."""

from __future__ import annotations

import pytest

from unit.inprocess import MOVE, refused


def _in_process(item: pytest.Item):
    """Run one phase of `item` with process starts refused; fail it if it started one, even where the
    code under test caught the refusal."""
    with refused() as started:
        result = yield
    if started:
        pytest.fail(f"{item.nodeid}: {MOVE}; it started: {'; '.join(started)}", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _in_process(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _in_process(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    return (yield from _in_process(item))

# What drawing a figure gives under `undrawn`: fixed bytes of its format.
FIGURE_BYTES = {"png": b"\x89PNG\r\n\x1a\n(a figure, not drawn)", "svg": b"<svg>(a figure, not drawn)</svg>\n"}


@pytest.fixture
def undrawn(monkeypatch) -> None:
    """Figures are built but not drawn: plot.figure_bytes, through which every figure a command writes
    or a report embeds goes, gives FIGURE_BYTES of its format instead of matplotlib's drawing (0.1-0.4 s
    a figure on 2 cores, most of a report's time). For tests whose subject is something else (the
    writer, a report's text, its sections and captions) on plain synthetic rows: which figures and
    panels are built, and with what lines, is unchanged. Drawing itself is tested by test_plot.py,
    test_report.py's pages and figures (its settings-section, stylesheet and default-out tests take
    this), test_golden_results.py, test_aggregate.py and the heat-map tests (test_zerogrid, test_pairs,
    test_fault_views), which never use this."""
    from commbench.analysis.report import plot

    monkeypatch.setattr(plot, "figure_bytes", lambda fig, fmt="png": FIGURE_BYTES[fmt])
