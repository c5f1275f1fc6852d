"""analysis/report/sections.py: the features' report sections declared once, and the HTML page and
the Markdown report both built from that list (a section in one is in the other; none is hand-wired)."""

from __future__ import annotations

import ast
import inspect

import pandas as pd

from commbench.analysis.points.section import Section
from commbench.analysis.report import markdown, report, sections
from tests.unit import synthetic
from tests.unit.test_trend import _write_nights


def _planted() -> Section:
    return Section("planted", "Planted", "zero",
                   lambda inp, kit: f'<section id="planted"><h2>Planted</h2>{kit.esc("<b>")}</section>',
                   lambda inp, kit: ["## Planted", "", kit.md(f"{inp.runs} run(s)"), ""])


def test_a_section_in_the_list_is_in_the_page_and_the_markdown(monkeypatch):
    """One line in the list, nothing else: the page has its link and body, the Markdown its heading."""
    df = pd.DataFrame(synthetic.make_rows(collectives=("all_reduce",), sizes=(1 << 16,), placements=(False,)))
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, _planted()))
    page = report.build_html(df)
    assert '<a href="#planted">Planted</a>' in page
    assert '<section id="planted"><h2>Planted</h2>&lt;b&gt;</section>' in page
    assert page.index('id="planted"') < page.index('<section id="curves">')  # after the zero slot, before curves
    text = markdown.build_markdown(df, None)
    assert "## Planted\n\n1 run(s)\n" in text
    assert text.index("## Planted") < text.index("## Bandwidth and latency")


def test_the_markdown_report_of_nightly_runs_has_the_trend_section(tmp_path):
    """The drift this list ends: the Markdown report claimed the page's sections but had no Trend."""
    folder = _write_nights(tmp_path, [400.0] * 15 + [100.0] * 9)
    text = report.write_report([str(folder)], out=tmp_path / "r.md")[0].read_text()
    assert "\n## Trend\n" in text
    assert "### Change from run 16 (20260016-000000-abcdef 'night16'" in text
    assert "What differs from the run before: link rate: before 400 Gbit/s" in text
    page = report.write_report([str(folder)], out=tmp_path / "r.html")[0].read_text()
    assert '<section id="trend"><h2>Trend</h2>' in page


def test_every_listed_section_has_both_hooks_and_a_unique_id():
    ids = [s.id for s in sections.SECTIONS]
    assert len(ids) == len(set(ids)) and {"trend", "replay", "layout"} <= set(ids)
    assert all(callable(s.html) and callable(s.markdown) for s in sections.SECTIONS)


def _names_in(function) -> set[str]:
    tree = ast.parse(inspect.getsource(inspect.getmodule(function)))
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function.__name__]
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _section_modules() -> set[str]:
    """The modules that declare a listed section (by the name a builder would import them under)."""
    return {s.html.__module__.rsplit(".", 1)[1] for s in sections.SECTIONS}


def hand_wired(functions, modules: set[str]) -> dict[str, list[str]]:
    return {f.__name__: sorted(_names_in(f) & modules) for f in functions if _names_in(f) & modules}


def test_no_builder_names_a_section_module_itself():
    """build_html and build_markdown reach the features' sections through the list only."""
    modules = _section_modules()
    assert modules == {"trendview", "replayview", "layoutview"}
    assert hand_wired([report.build_html, markdown.build_markdown], modules) == {}


def test_the_hand_wiring_check_finds_a_planted_call():
    def build_planted(df):
        return replayview.section_html(df, None, None)  # noqa: F821 - read by ast, never run

    assert hand_wired([build_planted], _section_modules()) == {"build_planted": ["replayview"]}
