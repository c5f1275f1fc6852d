"""analysis/catalog/sections.py: the features' report sections declared once, and the HTML page and
the Markdown report both built from that list (a section in one is in the other; none is hand-wired).
Its subject is which sections, links, headings and files a report has, not the drawing: the tests that
build pages take `undrawn` (tests/unit/conftest.py), as drawing is tested by test_plot and test_report."""

from __future__ import annotations

import ast
import inspect

import pandas as pd
import pytest

from commbench.analysis.points.section import Section
from commbench.analysis.catalog import sections
from commbench.analysis.report import markdown, plot, report
from unit import synthetic


def _planted() -> Section:
    return Section("planted", "Planted", "zero",
                   lambda inp, kit: f'<section id="planted"><h2>Planted</h2>{kit.esc("<b>")}</section>',
                   lambda inp, kit: ["## Planted", "", kit.md(f"{inp.runs} run(s)"), ""])


def test_a_section_in_the_list_is_in_the_page_and_the_markdown(monkeypatch, undrawn):
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


def test_the_markdown_report_of_nightly_runs_has_the_trend_section(tmp_path, undrawn):
    """The drift this list ends: the Markdown report claimed the page's sections but had no Trend."""
    folder = synthetic.write_nights(tmp_path, [400.0] * 15 + [100.0] * 9)
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
    assert modules == {"trendview", "replayview", "layoutview", "pairsview", "zeroview", "wiresection",
                       "curvesection"}
    assert hand_wired([report.build_html, markdown.build_markdown, plot.split_views, plot.plot_results,
                       report.write_report], modules) == {}


def _module_uses(module, modules: set[str]) -> set[str]:
    return _uses(inspect.getsource(module), modules)


def _uses(source: str, modules: set[str]) -> set[str]:
    """What a module's text names of the modules that declare a section: 'name.attribute', the bare
    name, or what it imports from one."""
    tree = ast.parse(source)
    used = {f"{n.value.id}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules}
    bare = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in modules}
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module and n.module.rsplit(".", 1)[-1] in modules for a in n.names}
    return used | (bare - {u.split(".")[0] for u in used}) | imported


def test_report_markdown_and_plot_name_no_section_function():
    """Anywhere in report.py, markdown.py and plot.py (not only the builders): no section's hook or
    figure is called by its module. One use is left, no section's hook: report.peak_table_html keeps its
    name for its callers (the curves' peak table in the page's cells)."""
    modules = _section_modules()
    assert _module_uses(markdown, modules) == set() and _module_uses(plot, modules) == set()
    assert _module_uses(report, modules) == {"curvesection.peak_table_html"}


def test_the_hand_wiring_check_finds_a_planted_call():
    def build_planted(df):
        return replayview.section_html(df, None, None)  # noqa: F821 - read by ast, never run

    assert hand_wired([build_planted], _section_modules()) == {"build_planted": ["replayview"]}


def test_the_module_check_finds_a_planted_call_and_import():
    source = ("from commbench.analysis.tune.zeroview import zero_html\n"
              "def build(df):\n    return pairsview.pairs_html(df, None)\n")
    assert _uses(source, _section_modules()) == {"pairsview.pairs_html", "zero_html"}


# ---- a planted kind of rows: declared here, added to the list, and nowhere else ----


def _planted_kind() -> Section:
    """A kind of rows of its own: the all_gather rows, claimed away from the curves, with a section,
    Markdown and a figure ("-planted") of their own."""
    from commbench.analysis.points.figures import new_figure
    from commbench.analysis.points.section import SectionFigure

    def claims(df):
        rows = df[df["collective"] == "all_gather"] if "collective" in df.columns else None
        return rows if rows is not None and len(rows) else None

    def html(inp, kit):
        rows = inp.claimed("kind")
        return "" if rows is None else f'<section id="kind"><h2>Kind</h2><p>{len(rows)} rows</p></section>'

    def md(inp, kit):
        rows = inp.claimed("kind")
        figure = inp.figures.get("kind")
        return [] if rows is None else ["## Kind", "", f"{len(rows)} rows, figure {figure}", ""]

    def draw(rows, metric, rate, label):
        fig = new_figure(2, 2)
        fig.add_subplot().bar([0], [len(rows)])
        return fig

    return Section("kind", "Kind", "zero", html, md, claims=claims, figure=SectionFigure("-planted", draw))


def test_a_planted_kind_of_rows_gets_its_section_its_markdown_and_its_figure(monkeypatch, tmp_path, undrawn):
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, _planted_kind()))
    rows = synthetic.make_rows(repetitions=1)
    path = synthetic.write(tmp_path / "run.parquet", rows)
    gathers = sum(1 for r in rows if r["collective"] == "all_gather")
    df = pd.DataFrame(rows)
    views = plot.split_views(df)
    assert len(views.kind) == gathers and (views.curves["collective"] == "all_reduce").all()
    page = report.build_html(df)
    assert '<a href="#kind">Kind</a>' in page and f'<section id="kind"><h2>Kind</h2><p>{gathers} rows</p>' in page
    assert page.index('<a href="#kind">') < page.index('<a href="#curves">')
    assert page.index('id="kind"') < page.index('<section id="curves">')
    assert "<td>all_gather</td>" not in page.split('<section id="peaks">')[1].split("</section>")[0]
    written = plot.plot_results([str(path)], out=tmp_path / "p.png")
    assert [p.name for p in written] == ["p.png", "p-planted.png"]
    assert (tmp_path / "p-planted.png").read_bytes()[:4] == b"\x89PNG"
    files = report.write_report([str(path)], out=tmp_path / "r.md")
    assert [p.name for p in files] == ["r.md", "r.png", "r-planted.png"]
    text = files[0].read_text()
    assert f"## Kind\n\n{gathers} rows, figure r-planted.png\n" in text
    assert text.index("## Kind") < text.index("## Bandwidth and latency")


def test_a_section_following_no_listed_section_is_refused(monkeypatch):
    from commbench.analysis.points.section import page_order

    stray = Section("stray", "Stray", "nowhere", lambda inp, kit: "", lambda inp, kit: [])
    with pytest.raises(ValueError, match="follows 'nowhere', which is not listed"):
        page_order((*sections.SECTIONS, stray))


def test_the_page_order_and_the_figure_order_come_from_the_list():
    from commbench.analysis.points.section import figure_order, page_order

    assert [s.id for s in page_order(sections.SECTIONS)] == ["faults", "trend", "pairs", "zero", "replay", "layout",
                                                             "curves", "wire"]
    assert [s.id for s in figure_order(sections.SECTIONS)] == ["curves", "zero", "pairs", "replay"]


def _planted_compare_kind() -> Section:
    """The planted kind with a part in compare (its count of all_gather points on both sides, a
    summary line, a text line, Markdown and page lines) and a gauge in export, declared here only."""
    from commbench.analysis.points.section import CompareHooks

    def compared(before, after, points):
        return sum(1 for p in points if p.key.get("collective") == "all_gather")

    def metrics(q, m):
        n = q.run("SELECT count(*) AS n FROM rows WHERE collective = 'all_gather'").column("n").to_pylist()[0]
        m.set("planted_rows", "The planted kind's rows.", {"kind": "planted"}, n)

    hooks = CompareHooks(compared=compared,
                         summary=lambda c, kit: [f"planted: {kit.overall({p.verdict for p in c.points})}"],
                         text=lambda c: [f"planted points: {c.parts['kind']}"],
                         markdown=lambda c: [f"**planted points: {c.parts['kind']}**"],
                         html=lambda c, esc: f"<p>planted points: {esc(c.parts['kind'])}</p>")
    base = _planted_kind()
    return Section(base.id, base.title, base.after, base.html, base.markdown, claims=base.claims,
                   compare=hooks, metrics=metrics)


def test_a_planted_kind_of_rows_gets_its_part_in_compare_and_export(monkeypatch, tmp_path, undrawn):
    from commbench.analysis.compare import compare, comparetext
    from commbench.analysis.export import metrics

    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, _planted_compare_kind()))
    rows = synthetic.make_rows(repetitions=5)
    gathers = len({(r["size_bytes"], r["in_place"], r["dtype"]) for r in rows if r["collective"] == "all_gather"})
    df = pd.DataFrame(rows)
    c = compare.compare_frames(df, df)
    assert c.parts["kind"] == gathers and c.to_dict()["kind"] == gathers
    table = comparetext.render_table(c)
    assert f"planted points: {gathers}" in table and f"planted: {c.verdict}\n" in table
    assert table.index(f"planted: {c.verdict}") > table.index("points: ")
    assert f"**planted points: {gathers}**" in comparetext.render_markdown(c)
    page = report.build_html(df, comparison=c)
    assert f"<p>planted points: {gathers}</p>" in page.split('id="comparison"')[1]
    exported = metrics.collect(df).text().decode()
    n = sum(1 for r in rows if r["collective"] == "all_gather")
    assert f'commbench_planted_rows{{kind="planted"}} {float(n)}' in exported


def test_compare_and_export_name_no_section_module():
    """compare's computation and text, and export's gauges, reach the sections through the list only."""
    from commbench.analysis.compare import compare, comparetext
    from commbench.analysis.export import metrics

    modules = _section_modules() | {"replayrows", "wirequery", "linkrank", "linkfaults", "railrank",
                                    "pairsmetrics", "replaymetrics", "wiremetrics"}
    assert {m.__name__: _module_uses(m, modules) for m in (compare, comparetext, metrics)} == {
        m.__name__: set() for m in (compare, comparetext, metrics)}
