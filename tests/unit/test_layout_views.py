"""Layout runs' views (issue #38, docs/LAYOUTS.md "Views"): compare's group column and verdict per
group dimension, gate's bands per group, plot's curve per group, the report's Layout section."""

from __future__ import annotations

import pandas as pd

from commbench.analysis.compare import compare as cmp
from commbench.analysis.compare import comparetext
from unit.synthetic import make_rows

GROUPS = {0: "0,2", 1: "1,3"}


def layout_rows(speed: float = 400.0, run_id: str = "20250101-000000-abcdef", repetitions: int = 7,
                solo_speed: float | None = None, sizes=(1 << 20, 1 << 24), slow_group: int | None = None) -> list[dict]:
    """A layout run's rows: dp groups 0 and 1, each all at once (concurrent) and alone (solo)."""
    rows = []
    for index, ranks in GROUPS.items():
        for concurrent in (True, False):
            s = (solo_speed or speed) if not concurrent else speed
            s = s / 2 if slow_group == index and concurrent else s
            for r in make_rows(collectives=("all_reduce",), sizes=sizes, placements=(True,),
                               repetitions=repetitions, run_id=run_id, speed_gbps=s, seed=index):
                r.update(group_dim="dp", group_index=index, group_ranks=ranks, group_hosts="node01,node02",
                         concurrent=concurrent, world_size=2, nnodes=2, ranks_per_node=1)
                rows.append(r)
    return rows


def test_compare_of_two_layout_runs_has_a_group_column_and_a_verdict_per_dimension():
    before = pd.DataFrame(layout_rows())
    after = pd.DataFrame(layout_rows(speed=200.0, solo_speed=400.0, run_id="20250102-000000-abcdef"))
    c = cmp.compare_frames(before, after)
    assert len(c.points) == 8  # 2 sizes x 2 groups x (concurrent, solo): never merged as duplicates
    text = comparetext.render_table(c)
    header = text.splitlines()[0]
    assert "group" in header
    assert "dp1 solo" in text and "dp0 " in text
    lines = [line for line in text.splitlines() if line.startswith("dp groups")]
    assert lines[0].startswith("dp groups, all at once: 2 of 2 slower (median -")
    assert "dp0 regression" in lines[0] and "dp1 regression" in lines[0]
    assert lines[1].startswith("dp groups, each alone: 2 of 2 unchanged")
    assert c.verdict == "regression"
    assert "dp groups, all at once" in comparetext.render_markdown(c)


def test_compare_of_plain_runs_has_no_group_column():
    text = comparetext.render_table(cmp.compare_frames(pd.DataFrame(make_rows(repetitions=3)),
                                               pd.DataFrame(make_rows(repetitions=3, run_id="20250102-000000-abcdef"))))
    assert "group" not in text.splitlines()[0] and "groups," not in text


def test_the_report_of_a_layout_run_has_a_layout_section_with_groups_slowest_and_contention(undrawn):
    from commbench.analysis.report import report

    rows = layout_rows(repetitions=3, slow_group=1)
    for r in rows:
        if r["concurrent"]:
            r["contention"] = 0.5 if r["group_index"] == 1 else 1.0
        r["samples_us"] = [r["time_us"] * f for f in (0.9, 0.95, 1.0, 1.05, 1.1, 1.0, 0.98, 1.02)]
        r.update(rank_skew_us=[1.0, 2.0], rank_host=[0, 1])
    page = report.build_html(pd.DataFrame(rows), ["synthetic"])
    layout = page[page.index('<section id="layout">'):]
    layout = layout[:layout.index("</section>")]
    assert '<a href="#layout">Layout</a>' in page
    assert "<td>dp1</td>" in layout and "<td>[1,3]</td>" in layout and "node01,node02" in layout
    assert "Slowest group per size" in layout and "dp1 [1,3]" in layout  # group 1 ran at half speed
    assert "Contention factor per group" in layout and "0.50" in layout and "contended" in layout
    assert "judged per group" in page  # the run facts leave late arrivals to the section
    assert "in-place dp1 [1,3] solo" in page  # the peak and point tables: a row per group, named
    assert "Late ranks per group" in layout and "dp1 [1,3]: no rank or host stood out" in layout


def test_the_report_of_a_plain_run_has_no_layout_section(undrawn):
    from commbench.analysis.report import report

    assert 'id="layout"' not in report.build_html(pd.DataFrame(make_rows(repetitions=2)), ["synthetic"])


def test_gate_suggest_on_a_layout_run_writes_a_band_per_group_and_judges_each_group():
    import yaml

    from commbench.analysis.gate import gate
    from commbench.analysis.gate.bands import parse_bands
    from commbench.analysis.gate.bandsuggest import suggest

    good = pd.DataFrame(layout_rows(repetitions=5))
    s = suggest(good, ["good"], allow_wide=True)
    entries = yaml.safe_load(s.text)["entries"]
    assert sorted({e["group"] for e in entries}) == ["dp0", "dp0 solo", "dp1", "dp1 solo"]
    assert len(entries) == 8  # 2 sizes x 4 groups: never one band over every group
    bands = parse_bands(s.text)
    assert gate.judge(bands, good).exit_code() == 0
    slow = gate.judge(bands, pd.DataFrame(layout_rows(repetitions=5, slow_group=1)))
    failed = {r.entry.group for r in slow.failed}
    assert failed == {"dp1"}, failed  # only dp1 all at once ran at half speed
    assert "dp1" in parse_bands(s.text).entries[4].describe()


def test_a_gate_entry_without_a_group_matches_no_group_rows():
    from commbench.analysis.gate import gate
    from commbench.analysis.gate.bands import parse_bands

    bands = parse_bands("version: 1\nsystem: x\nentries:\n"
                             "- {collective: all_reduce, size: 1M, ranks: 2, busbw_GBps: 1.0}\n"
                             "- {collective: all_reduce, size: 1M, ranks: 2, group: dp1 solo, busbw_GBps: 1.0}\n")
    results = gate.judge(bands, pd.DataFrame(layout_rows(repetitions=2))).results
    assert results[0].n_rows == 0 and results[1].n_rows == 2


def test_the_plot_of_a_layout_run_draws_a_curve_per_group_and_kind_of_pass():
    from commbench.analysis.curves import curveplot

    rows = layout_rows(repetitions=2)
    fig = curveplot.build_figure(pd.DataFrame(rows), "busbw")
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    for name in ("all_reduce dp0 [0,2]", "all_reduce dp0 [0,2] solo", "all_reduce dp1 [1,3]",
                 "all_reduce dp1 [1,3] solo"):
        assert name in texts, texts
    lines = [ln for ln in fig.axes[0].get_lines() if ln.get_label() in texts]
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in lines}) == 4  # told apart without colour too


def test_a_group_label_from_a_file_is_inert_in_the_figure():
    from commbench.analysis.curves import curveplot

    rows = layout_rows(repetitions=1, sizes=(1 << 20,))
    for r in rows:
        r["group_dim"] = "$x$\x1b[2J"
    fig = curveplot.build_figure(pd.DataFrame(rows), "busbw")
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert not any("\x1b" in t for t in texts) and any(r"\$x\$" in t for t in texts), texts


def test_the_markdown_report_of_a_layout_run_has_the_layout_section_with_inert_group_text():
    from commbench.analysis.report import markdown

    rows = layout_rows(repetitions=2, sizes=(1 << 20,))
    for r in rows:
        r["group_hosts"] = "<b>node|01</b>"
    text = markdown.build_markdown(pd.DataFrame(rows), None)
    section = text[text.index("## Layout"):]
    assert "### Groups" in section and "### Slowest group per size" in section
    assert "<b>" not in section and "node\\|01" in section  # a host name from the file cannot break the table


def test_the_layout_section_of_two_runs_keeps_each_runs_groups_apart():
    """One rail (contended) and two rails (not): one factor per run, never the two pooled."""
    from commbench.analysis.layout import layoutview

    rows = []
    for run, factor in (("20250101-000000-onerail", 0.5), ("20250102-000000-tworail", 1.0)):
        for r in layout_rows(run_id=run, repetitions=2):
            r["contention"] = factor if r["concurrent"] else None
            rows.append(r)
    parts = layoutview.section_parts(pd.DataFrame(rows))
    factors = {title: {row[5] for row in table} for title, _, table, _ in parts if title.startswith("Contention")}
    assert factors == {"Contention factor per group (--solo) — run 20250101-000000-onerail": {"0.50"},
                       "Contention factor per group (--solo) — run 20250102-000000-tworail": {"1.00"}}
