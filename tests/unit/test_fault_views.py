"""Failed links of `commbench pairs` (rows with a status in linkrank.FAILED) in the views of a
results table: the heat map's hatched cells, the report's "Faults" section (HTML and Markdown),
and `commbench compare`'s "link down" / "link restored" verdicts. Frames go through the real
ResultWriter and read_results, so the status, error and confirm columns are what the tools see."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from commbench.analysis.compare import compare
from commbench.analysis.compare import comparetext
from commbench.analysis.pairs import linkrank, pairsplot
from commbench.analysis.report import report
from commbench.analysis.report.markdown import build_markdown
from commbench.analysis.report.plot import figure_bytes
from commbench.cli.app import main
from commbench.core.results import read_results

from unit.synthetic import make_rows, write

HOSTS = ["n1", "n2", "n3", "n4"]
RUN = "20250101-000000-aaaaaa"
HOSTILE = "<script>alert(1)</script> | **bold** `tick`"
NAN = float("nan")


def link_rows(rate=None, hosts=HOSTS, reps=2, collective="sendrecv", down=None, confirm=(), run_id=RUN,
              error=None):
    """Pairs rows like workloads/pairs.py writes them. down: {(src, dst): status, or a list with
    one status (None: measured) per repetition}; confirm: (src, dst, status or None) rows of the
    confirmation round; error: the failed rows' reason (default: one naming the peer)."""
    rate = rate or dict.fromkeys(hosts, 0.12)
    down = down or {}
    base = make_rows(collectives=("sendrecv",), sizes=(16 << 20,), placements=(False,), repetitions=1,
                     run_id=run_id, hosts=tuple(hosts), backend="gloo", device_name="cpu")[0]
    bidir = collective == "sendrecv_bidir"
    pairs = list(itertools.combinations(hosts, 2) if bidir else itertools.permutations(hosts, 2))

    def row(s, d, rep, status, is_confirm):
        gbps = min(rate[s], rate[d]) * (1 + 0.01 * rep)
        failed = status in linkrank.FAILED
        t = NAN if failed else (16 << 20) / gbps / 1e3
        return {**base, "workload": "pairs", "collective": collective, "dtype": "uint8", "op": None,
                "repetition": rep, "busbw_GBps": NAN if failed else gbps, "algbw_GBps": NAN if failed else gbps,
                "time_us": t, "time_us_min": t, "time_us_max": t, "time_us_p99": t,
                "samples_us": None if failed else [t * 0.99, t, t * 1.01], "wrong": None if failed else 0,
                "src_host": s, "dst_host": d, "src_rank": hosts.index(s), "dst_rank": hosts.index(d),
                "world_size": len(hosts), "nnodes": len(hosts), "ranks_per_node": 1, "status": status,
                "error": (error or f"{status}: {d} did not answer") if failed else None,
                "confirm": True if is_confirm else None}

    rows = []
    for rep in range(reps):
        for s, d in pairs:
            status = down.get((s, d))
            rows.append(row(s, d, rep, status[rep] if isinstance(status, list) else status, False))
    rows += [row(s, d, 0, status, True) for s, d, status in confirm]
    return rows


def read(tmp_path, rows, name="pairs.parquet"):
    return read_results([write(tmp_path / name, rows)])


def host_down(host="n3", status="unreachable", hosts=HOSTS, bidir=False):
    pairs = itertools.combinations(hosts, 2) if bidir else itertools.permutations(hosts, 2)
    return {(s, d): status for s, d in pairs if host in (s, d)}


def cell_texts(ax) -> dict[tuple[int, int], str]:
    """(row, column) -> the text drawn in that heat map cell."""
    return {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}


def hatched_cells(ax) -> set[tuple[int, int]]:
    return {(round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in ax.patches if p.get_hatch()}


# ----------------------------------------------------------------------------- the heat map


def test_a_failed_host_is_hatched_with_its_status_and_left_out_of_the_colour_scale(tmp_path):
    rate = {"n1": 0.12, "n2": 0.12, "n3": 0.12, "n4": 0.06}
    df = read(tmp_path, link_rows(rate, down=host_down("n3")))
    fig = pairsplot.build_figure(df)
    ax = fig.axes[0]
    texts, hatched = cell_texts(ax), hatched_cells(ax)
    n3 = HOSTS.index("n3")
    failed = {(i, n3) for i in range(4) if i != n3} | {(n3, j) for j in range(4) if j != n3}
    assert hatched == failed
    assert all(texts[c] == "unreachable" for c in failed)
    assert all(texts[c] not in ("", "nan", "0") and "!" not in texts[c] for c in texts if c not in failed
               and c[0] != c[1])
    image = ax.images[0]
    data = np.ma.getdata(image.get_array())
    assert np.isnan([data[c] for c in failed]).all()  # no colour: never a bandwidth of zero
    assert image.norm.vmin == pytest.approx(0.06 * 1.005) and image.norm.vmax == pytest.approx(0.12 * 1.005)
    title = ax.get_title(loc="left")
    assert "hatched: 6 links not measured (unreachable)" in title and "\nfailed: host n3 (unreachable)" in title
    assert "slow host: n4" in title  # the measured links are still ranked, n3's left out
    assert [t.get_text() for t in ax.get_yticklabels() if t.get_color() == "#c00000"] == ["n3", "n4"]
    assert figure_bytes(fig, "png")[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_link_failed_in_one_repetition_shows_the_other_median_with_a_mark(tmp_path):
    df = read(tmp_path, link_rows(reps=3, down={("n1", "n2"): ["timeout", None, None],
                                               ("n2", "n4"): "error"}))
    ax = pairsplot.build_figure(df).axes[0]
    texts = cell_texts(ax)
    assert texts[(0, 1)] == f"{0.12 * 1.015:.3g}!"  # median of repetitions 1 and 2
    assert texts[(1, 3)] == "error" and hatched_cells(ax) == {(1, 3)}
    title = ax.get_title(loc="left")
    assert "hatched: 1 link not measured (error)" in title
    assert "!: 1 link failed in some repetitions" in title


def test_confirmation_rows_are_not_cells(tmp_path):
    rows = link_rows(down=host_down("n3"), confirm=[("n3", "n1", None), ("n2", "n4", None)])
    for r in rows[-2:]:
        r["busbw_GBps"] = r["algbw_GBps"] = 5.0  # far from every main-round value
    ax = pairsplot.build_figure(read(tmp_path, rows)).axes[0]
    texts = cell_texts(ax)
    assert texts[(2, 0)] == "unreachable" and texts[(1, 3)] == f"{0.12 * 1.005:.3g}"
    assert ax.images[0].norm.vmin == pytest.approx(0.12 * 1.005) and "5" not in texts.values()


def test_bidir_failed_pair_is_hatched_in_both_triangles(tmp_path):
    df = read(tmp_path, link_rows(hosts=HOSTS[:3], collective="sendrecv_bidir", down={("n1", "n3"): "timeout"}))
    ax = pairsplot.build_figure(df).axes[0]
    assert hatched_cells(ax) == {(0, 2), (2, 0)}
    assert cell_texts(ax)[(2, 0)] == cell_texts(ax)[(0, 2)] == "timeout"
    assert "hatched: 1 pair not measured (timeout)" in ax.get_title(loc="left")


def test_a_run_where_every_link_failed_still_draws(tmp_path):
    down = {(s, d): "unreachable" for s, d in itertools.permutations(HOSTS[:3], 2)}
    ax = pairsplot.build_figure(read(tmp_path, link_rows(hosts=HOSTS[:3], down=down))).axes[0]
    assert len(hatched_cells(ax)) == 6 and "no link was measured" in ax.get_title(loc="left")


def test_large_maps_keep_the_mark_without_the_words(tmp_path):
    hosts = [f"h{i:02d}" for i in range(18)]
    down = {(s, d): "timeout" for s, d in itertools.permutations(hosts, 2) if "h05" in (s, d)}
    ax = pairsplot.build_figure(read(tmp_path, link_rows(hosts=hosts, reps=1, down=down))).axes[0]
    texts = cell_texts(ax)
    assert len(hatched_cells(ax)) == 34 and {texts[c] for c in hatched_cells(ax)} == {"T"}


def test_a_frame_without_failures_draws_as_before(tmp_path):
    rate = {"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1}
    df = read(tmp_path, link_rows(rate))
    ax = pairsplot.build_figure(df).axes[0]
    names, values = pairsplot.matrix(next(iter(linkrank.links_by_run(df).values())))
    texts = cell_texts(ax)
    assert {c: t for c, t in texts.items() if t} == {(i, j): f"{values[i, j]:.3g}" for i in range(4) for j in range(4)
                                                     if i != j}
    assert not hatched_cells(ax) and "hatched" not in ax.get_title(loc="left")
    assert sum(1 for p in ax.patches if not p.get_fill()) == 6  # the boxed slowest links
    assert "slow host: n3" in ax.get_title(loc="left")


# ----------------------------------------------------------------------------- the report


def test_html_report_has_the_faults_section_with_the_culprit_and_escapes_errors(tmp_path):
    df = read(tmp_path, link_rows(down=host_down("n3"), error=HOSTILE))
    page = report.build_html(df)
    assert 'href="#faults"' in page and '<section id="faults"><h2>Faults</h2>' in page
    faults = page[page.index('id="faults"'):page.index('id="pairs"')]
    assert "<td class=\"v-bad\">n3</td><td>host</td><td>unreachable</td>" in faults
    assert "3 of 3 links failed (unreachable): n3 &lt;-&gt; n1" in faults  # the culprit's evidence
    assert "12 of 24 measurements failed: 12 unreachable" in faults
    assert faults.count("<tr>") == 1 + 1 + 1 + 6  # culprit table, failed links table: headers and rows
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in faults


def test_html_report_without_failures_has_no_faults_section(tmp_path):
    page = report.build_html(read(tmp_path, link_rows()))
    assert 'id="faults"' not in page and "Faults" not in page and 'id="pairs"' in page


def test_markdown_report_has_the_faults_section_and_escapes_errors(tmp_path):
    df = read(tmp_path, link_rows(down=host_down("n3"), error=HOSTILE,
                                  confirm=[("n3", "n1", "unreachable"), ("n3", "n2", "unreachable")]))
    text = build_markdown(df, None)
    section = text[text.index("## Faults"):text.index("## Links between hosts")]
    assert "| n3 | host | unreachable | failed again: confirmed |" in section
    assert "**14 of 26 measurements failed: 14 unreachable (2 in the confirmation round)**" in section
    assert "| n3 | n1 | unreachable | &lt;script&gt;alert(1)&lt;/script&gt; \\| \\*\\*bold\\*\\* \\`tick\\` | yes |" \
        in section
    # outside code blocks nothing is raw; inside (the ranking as pairs --from prints it) no backtick
    # can close the block, and Markdown shows a code block verbatim
    parts = text.split("```\n")
    assert len(parts) % 2 == 1 and "`" not in "".join(parts[1::2])
    assert "<script>" not in "".join(parts[0::2]) and "<script>" in "".join(parts[1::2])


def test_markdown_without_failures_is_unchanged_by_the_new_columns(tmp_path):
    rows = link_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1})
    text = build_markdown(read(tmp_path, rows), "f.png")
    old = [{k: v for k, v in r.items() if k not in ("status", "error", "confirm")} for r in rows]
    assert "Faults" not in text and text == build_markdown(read(tmp_path, old, "old.parquet"), "f.png")


def test_report_command_writes_the_faults_section(tmp_path):
    path = write(tmp_path / "p.parquet", link_rows(down=host_down("n2")))
    with pytest.raises(SystemExit) as info:
        main(["report", str(path), "--out", str(tmp_path / "r.md")])
    assert info.value.code == 0
    text = (tmp_path / "r.md").read_text()
    assert "## Faults" in text and "| n2 | host | unreachable |" in text
    assert (tmp_path / "r-pairs.png").read_bytes()[:4] == b"\x89PNG"


# ----------------------------------------------------------------------------- compare


def sides(tmp_path, before_down=None, after_down=None, reps=7, hosts=HOSTS[:3]):
    b = read(tmp_path, link_rows(hosts=hosts, reps=reps, down=before_down), "before.parquet")
    a = read(tmp_path, link_rows(hosts=hosts, reps=reps, down=after_down, run_id="20250102-000000-bbbbbb"),
             "after.parquet")
    return b, a


def point(c, src, dst):
    [p] = [p for p in c.points if (p.key["src_host"], p.key["dst_host"]) == (src, dst)]
    return p


def test_a_link_down_after_is_a_regression_of_its_own(tmp_path):
    b, a = sides(tmp_path, after_down={("n1", "n2"): "unreachable"})
    c = compare.compare_frames(b, a)
    p = point(c, "n1", "n2")
    assert p.verdict == "link down" and p.ratio is None and p.after_busbw is None and p.n_after == 0
    assert p.note == "could not be measured after: unreachable in 7 of 7 repetitions: unreachable: n2 did not answer"
    assert {q.verdict for q in c.points if q is not p} == {"unchanged"}
    assert c.verdict == "regression" and c.exit_code() == 1 and len(c.points) == 6
    table = comparetext.render_table(c)
    assert "LINK DOWN" in table and "failed" in table and "nan" not in table.lower()
    assert "1 link down, 5 unchanged" in table
    down = [q for q in json.loads(json.dumps(c.to_dict()))["points"] if q["verdict"] == "link down"]
    assert [(q["key"]["src_host"], q["ratio"], q["after_busbw"]) for q in down] == [("n1", None, None)]
    assert "LINK DOWN" in comparetext.render_markdown(c)


def test_a_link_restored_after_is_not_a_regression(tmp_path):
    b, a = sides(tmp_path, before_down={("n1", "n2"): "timeout"})
    c = compare.compare_frames(b, a)
    p = point(c, "n1", "n2")
    assert p.verdict == "link restored" and p.before_busbw is None and p.after_busbw == pytest.approx(0.1236)
    assert p.note == ("could not be measured before: timeout in 7 of 7 repetitions: timeout: n2 did not answer; "
                      "measured again after")
    assert c.verdict == "improvement" and c.exit_code() == 0


def test_a_link_down_on_both_sides_is_no_answer(tmp_path):
    b, a = sides(tmp_path, before_down={("n1", "n2"): "error"}, after_down={("n1", "n2"): "timeout"})
    c = compare.compare_frames(b, a)
    p = point(c, "n1", "n2")
    assert p.verdict == "still down" and c.verdict == "inconclusive" and c.exit_code() == 3
    assert p.note == ("could not be measured on either side, nothing to compare; before: error in 7 of 7 "
                      "repetitions: error: n2 did not answer; after: timeout in 7 of 7 repetitions: timeout: n2 did "
                      "not answer")


def test_a_link_failing_in_some_repetitions_after_is_down(tmp_path):
    b, a = sides(tmp_path, after_down={("n2", "n3"): [None, None, "timeout", None, None, None, None]})
    c = compare.compare_frames(b, a)
    p = point(c, "n2", "n3")
    assert p.verdict == "link down" and p.n_after == 6 and math.isfinite(p.ratio)
    assert p.note.startswith("after: timeout in 1 of 7 repetitions: timeout: n3 did not answer, never before; "
                             "the measured repetitions: unchanged")
    assert c.exit_code() == 1


def test_confirmation_rows_are_not_repetitions(tmp_path):
    b, a = sides(tmp_path)
    a = read(tmp_path, link_rows(hosts=HOSTS[:3], reps=7, run_id="20250102-000000-bbbbbb",
                                 confirm=[("n1", "n2", "unreachable"), ("n1", "n3", None)]), "after2.parquet")
    c = compare.compare_frames(b, a)
    assert c.verdict == "unchanged" and {p.n_after for p in c.points} == {7}


def test_compare_command_exits_1_on_a_link_down(tmp_path, capsys):
    before = write(tmp_path / "b.parquet", link_rows(hosts=HOSTS[:3], reps=7))
    after = write(tmp_path / "a.parquet", link_rows(hosts=HOSTS[:3], reps=7, run_id="20250102-000000-bbbbbb",
                                                    down=host_down("n3", hosts=HOSTS[:3])))
    with pytest.raises(SystemExit) as info:
        main(["compare", str(before), str(after)])
    out = capsys.readouterr().out
    assert info.value.code == 1 and out.count("LINK DOWN") == 4 and "verdict: regression (exit 1)" in out


def test_report_against_a_baseline_whose_links_all_failed_after(tmp_path):
    down = {(s, d): "unreachable" for s, d in itertools.permutations(HOSTS[:3], 2)}
    before = write(tmp_path / "b.parquet", link_rows(hosts=HOSTS[:3], reps=7))
    after = write(tmp_path / "a.parquet", link_rows(hosts=HOSTS[:3], reps=7, run_id="20250102-000000-bbbbbb",
                                                    down=down))
    b, a = read_results([before]), read_results([after])
    page = report.build_html(a, comparison=compare.compare_frames(b, a), baseline_df=b)
    assert page.count('<td class="v-bad">link down</td>') == 6 and 'badge bad">REGRESSION' in page
    assert 'id="faults"' in page and "No verdict: every link failed" in page
    with pytest.raises(SystemExit) as info:
        main(["report", str(after), "--baseline", str(before), "--out", str(tmp_path / "r.md")])
    assert info.value.code == 0 and "LINK DOWN" in (tmp_path / "r.md").read_text()
    assert not (tmp_path / "r-comparison.png").exists()  # no bandwidth after: nothing to overlay
