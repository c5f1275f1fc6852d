"""commbench.analysis.report.report: the self-contained HTML page (tables, embedded figures, escaping, no external
resources), the Markdown report, comparison_html on a Comparison-shaped object, and the `report`
command's files and bad input. Synthetic rows through the real results module; no processes."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from commbench.analysis.curves import curvetables
from commbench.analysis.report import comparehtml, markdown, report
from commbench.cli.app import main
from commbench.core.errors import BadInput
from commbench.core.units import format_size

from unit.synthetic import frame, make_rows, write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVIL = "<script>alert(1)</script>"


class Page(HTMLParser):
    """Tags, attributes and tables of a page, as a browser's tokenizer sees them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
            self.tables[-1].append(self._row)
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def table_with(self, header: str) -> list[list[str]]:
        return next(t for t in self.tables if t and header in t[0])


@pytest.fixture(scope="module")
def df(tmp_path_factory):
    rows = make_rows(label=f"mtu1500 {EVIL}", mtu=1500, wrong=2,
                     env={"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": '"><img src=x onerror=alert(2)>'})
    rows += make_rows(collectives=("all_reduce",), placements=(True,), label="mtu9000", run_id="20250102-000000-bbbbbb",
                      mtu=9000, speed_gbps=800, hosts=("gpu-a1", "gpu-a2"))
    return frame(rows, tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def page_html(df):
    return report.build_html(df, ["results/run.parquet"])


@pytest.fixture(scope="module")
def page(page_html):
    return Page(page_html)


@pytest.mark.failure(row="hostile-label-environment-value-results")
def test_html_is_self_contained_no_external_urls_no_scripts(page_html, page):
    assert not re.search(r"https?://", page_html, re.IGNORECASE)
    assert not re.search(r"(src|href)\s*=\s*[\"']?//", page_html)
    assert "script" not in {tag for tag, _ in page.tags}
    for tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if "src" in attrs:
            assert attrs["src"].startswith("data:image/png;base64,")
        if "href" in attrs:
            assert attrs["href"].startswith("#")
    assert "<link" not in page_html and "@import" not in page_html and "url(" not in page_html


def test_html_embeds_the_figure_as_a_png(page):
    imgs = [attrs for tag, attrs in page.tags if tag == "img"]
    assert len(imgs) == 1 and imgs[0]["alt"]
    data = base64.b64decode(imgs[0]["src"].split(",", 1)[1])
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


@pytest.mark.failure(row="hostile-label-environment-value-results")
def test_untrusted_values_are_escaped(page_html, page):
    assert EVIL not in page_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page_html
    assert "<img src=x" not in page_html and "onerror=alert(2)" not in "".join(
        f"{k}={v}" for _, attrs in page.tags for k, v in attrs.items())
    # and the text still reads as the user wrote it
    assert f"mtu1500 {EVIL}" in "".join(page.text)
    assert '"><img src=x onerror=alert(2)>' in "".join(page.text)


def test_peak_table_has_a_row_per_line_with_the_peak_its_size_algbw_and_wrong(df, page):
    table = page.table_with("peak busbw (GB/s)")
    header = table[0]
    assert header[:4] == ["collective", "dtype", "placement", "run"]
    assert {"at size", "algbw there (GB/s)", "#wrong (total)"} <= set(header)
    body = [dict(zip(header, r)) for r in table[1:]]
    assert len(body) == 5
    row = next(r for r in body if r["collective"] == "all_reduce" and r["run"] == "mtu9000")
    d = df[(df.collective == "all_reduce") & (df.label == "mtu9000")]
    med = d.groupby("size_bytes")[["busbw_GBps", "algbw_GBps"]].median()
    peak = med["busbw_GBps"].idxmax()
    assert row["at size"] == format_size(peak)
    assert row["peak busbw (GB/s)"] == report.fnum(med.loc[peak, "busbw_GBps"])
    assert row["algbw there (GB/s)"] == report.fnum(med.loc[peak, "algbw_GBps"])
    assert row["#wrong (total)"] == "0"
    bad = next(r for r in body if r["collective"] == "all_gather" and r["placement"] == "out-of-place")
    assert bad["#wrong (total)"] == "4"  # 2 wrong elements at the largest size x 2 repetitions


def test_peak_rows_say_not_checked_when_wrong_is_null(tmp_path):
    rows = curvetables.peak_rows(frame(make_rows(wrong=None), tmp_path))
    assert all(r["wrong"] is None for r in rows)
    html_text = report.peak_table_html(rows)
    assert "not checked" in html_text


def test_run_metadata_is_shown(page):
    text = " ".join(page.text)
    for want in ("20250101-000000-abcdef", "20250102-000000-bbbbbb", "node[01-02]", "gpu-a[1-2]", "nccl",
                 "NVIDIA H100 80GB HBM3", "2.21.5", "2.13.0", "slurm", "NCCL_IB_HCA", "mlx5_0", "800 Gbit/s"):
        assert want in text, want
    net = page.table_with("link layer")
    assert ["node01", "eth0", "1500", "ethernet", "400 Gbit/s", "up"] in net
    facts = [r for t in page.tables for r in t if len(r) == 2]
    assert ["MTU", "1500"] in facts and ["MTU", "9000"] in facts and ["ranks (world size)", "16"] in facts


def test_all_points_table_is_there_collapsed(page_html, page, df):
    assert "<details><summary>" in page_html
    table = page.table_with("bytes")
    assert len(table) - 1 == df.groupby(["run_id", "collective", "in_place", "size_bytes"]).ngroups


def stand_in_comparison(**over):
    """The shape of commbench.analysis.compare.compare.Comparison (field names only), for comparison_html alone."""
    point = lambda **kw: SimpleNamespace(**{  # noqa: E731
        "key": {"collective": "all_reduce", "dtype": "float32", "in_place": True, "size_bytes": 1 << 20},
        "before_busbw": 40.0, "after_busbw": 30.0, "ratio": 0.75, "p_value": 0.00001, "p_holm": 0.0004,
        "q_bh": 0.0002, "test": "repetitions", "verdict": "regression", "note": f"slower {EVIL}",
        "threshold": 0.03, "bandwidth_bound": True, **kw})
    base = dict(
        points=[point(), point(key={"collective": "all_gather", "dtype": "float32", "in_place": False,
                                     "size_bytes": 8}, ratio=1.01, p_value=0.6, p_holm=1.0, q_bh=0.8,
                               verdict="no change", note="", bandwidth_bound=False)],
        only_before=[{"collective": "broadcast", "dtype": "float32", "in_place": True, "size_bytes": 4096}],
        only_after=[], geomean_ratio=0.87, verdict="regression", warnings=[f"backend differs {EVIL}"],
        differences=["mtu: before 1500, after 9000"], alpha=0.05, threshold=0.03)
    base.update(over)
    return SimpleNamespace(**base)


def test_comparison_html_renders_verdict_points_warnings_differences_and_one_sided():
    text = comparehtml.comparison_html(stand_in_comparison())
    page = Page(text)
    badge = next(attrs for tag, attrs in page.tags if tag == "span" and "badge" in attrs.get("class", ""))
    assert "bad" in badge["class"]
    assert "REGRESSION" in "".join(page.text) and "0.870×" in text
    table = page.table_with("Holm p")
    header = table[0]
    for col in ("collective", "size", "placement", "ratio", "p", "Holm p", "BH q", "verdict", "note"):
        assert col in header
    first = dict(zip(header, table[1]))
    assert first["size"] == "1 MiB" and first["ratio"] == "0.750×" and first["p"] == "<0.0001"
    assert first["Holm p"] == "0.0004" and first["BH q"] == "0.0002" and first["verdict"] == "regression"
    assert first["note"] == f"slower {EVIL}"
    second = dict(zip(header, table[2]))
    assert second["size"] == "8 B" and second["placement"] == "out-of-place" and second["Holm p"] == "1"
    assert EVIL not in text and "&lt;script&gt;" in text
    assert "backend differs" in text and "mtu: before 1500, after 9000" in text
    assert "Only in the baseline (before): 1 point, not compared" in text and "broadcast" in text


@pytest.mark.parametrize("verdict, cls", [("improvement", "good"), ("no change", "neutral"),
                                          ("inconclusive", "warn"), ("regression", "bad")])
def test_comparison_badge_colour_follows_the_verdict(verdict, cls):
    text = comparehtml.comparison_html(stand_in_comparison(verdict=verdict, points=[], warnings=[], differences=[]))
    assert f'class="badge {cls}"' in text


def test_html_report_with_a_baseline_has_the_comparison_and_its_overlay(tmp_path):
    pytest.importorskip("commbench.analysis.compare.compare")
    before = write(tmp_path / "before.parquet", make_rows(label="before", mtu=1500, speed_gbps=200, repetitions=3))
    after = write(tmp_path / "after.parquet", make_rows(label="after", run_id="20250105-000000-eeeeee", mtu=9000,
                                                        repetitions=3))
    out = report.write_report([after], [before], out=tmp_path / "r.html")
    assert out == [tmp_path / "r.html"]
    text = out[0].read_text()
    page = Page(text)
    assert 'id="comparison"' in text and "Holm p" in text
    assert len([a for t, a in page.tags if t == "img"]) == 2
    assert not re.search(r"https?://", text)


def test_markdown_report_has_tables_and_a_linked_png_beside_it(df, tmp_path):
    res = write(tmp_path / "run.parquet", make_rows(label=f"x | {EVIL} [a](b)"))
    written = report.write_report([res], out=tmp_path / "ticket.md")
    md_path, png = written
    assert md_path == tmp_path / "ticket.md" and png == tmp_path / "ticket.png"
    assert png.read_bytes().startswith(PNG_MAGIC)
    text = md_path.read_text()
    assert "![" in text and "](ticket.png)" in text
    assert re.search(r"^\| collective \| dtype \| placement \|.*peak busbw", text, re.MULTILINE)
    assert re.search(r"^\|---\|---\|---\|---:\|", text, re.MULTILINE)
    assert EVIL not in text and "&lt;script&gt;" in text
    assert "x \\| " in text and "\\[a\\](b)" in text  # no column break, no link
    lines = [ln for ln in text.splitlines() if ln.startswith("| all_reduce")]
    assert lines and all(ln.count(" | ") == lines[0].count(" | ") for ln in lines)


@pytest.mark.failure(row="hostile-label-environment-value-results")
def test_md_escapes_what_markdown_would_interpret():
    assert markdown.md("a|b") == "a\\|b"
    assert markdown.md("<b>") == "&lt;b&gt;"
    assert markdown.md("[x](javascript:y)") == "\\[x\\](javascript:y)"
    assert markdown.md("all_reduce") == "all_reduce" and markdown.md("_e_") == "\\_e\\_"
    assert markdown.md("line\nbreak") == "line\\\\nbreak"  # one line; the break shown as an escape (issue #39)


def test_format_follows_the_out_suffix_and_default_out_is_next_to_the_first_result(tmp_path, undrawn):
    assert report.resolve_format(None, "x.md") == "markdown"
    assert report.resolve_format(None, "x.html") == "html" and report.resolve_format(None, None) == "html"
    assert report.resolve_format("markdown", "x.txt") == "markdown"
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    assert report.write_report([res]) == [tmp_path / "run.html"]


@pytest.mark.failure(row="output-already-exists-every-output")
def test_never_overwrites_the_report_or_its_figure(tmp_path):
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    (tmp_path / "r.html").write_text("mine")
    with pytest.raises(BadInput, match="r.html already exists"):
        report.write_report([res], out=tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text() == "mine"
    (tmp_path / "t.png").write_bytes(b"mine")
    with pytest.raises(BadInput, match="t.png already exists"):
        report.write_report([res], out=tmp_path / "t.md")
    assert not (tmp_path / "t.md").exists() and (tmp_path / "t.png").read_bytes() == b"mine"


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code, capsys.readouterr()


def test_report_command_writes_html_and_markdown(tmp_path, capsys):
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    code, out = run_cli(["report", str(res), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0, out.err
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    code, out = run_cli(["report", str(res), "--format", "markdown", "--out", str(tmp_path / "r.txt")], capsys)
    assert code == 0, out.err
    assert (tmp_path / "r.txt").read_text().startswith("# commbench report") and (tmp_path / "r.png").exists()


@pytest.mark.parametrize("extra, message", [
    (["--out", "{tmp}/run.parquet"], "run.parquet already exists"),
    (["--baseline", "{tmp}/missing.parquet", "--out", "{tmp}/x.html"], "missing.parquet does not exist"),
    (["--format", "pdf"], "'pdf' is not one of"),
    (["--line-rate", "fast", "--out", "{tmp}/y.html"], "--line-rate 'fast' is not a rate"),
])
def test_report_command_bad_input_is_one_line_exit_2(tmp_path, capsys, extra, message):
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    code, out = run_cli(["report", str(res)] + [e.format(tmp=tmp_path) for e in extra], capsys)
    assert code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.err


# ---- settings (--env NAME=v1|v2): the "Settings" section ----

ETH0, ETH1 = "GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"


def settings_rows(settings=(ETH0, ETH1), **kw) -> list[dict]:
    """One run measured once per setting (as sweep --env runs its grid): eth1 a quarter of eth0's
    busbw from 64 KiB up, 10% faster than eth0 below (its latency is lower, say)."""
    out = []
    for i, setting in enumerate(settings):
        for r in make_rows(label="", **kw):
            r["settings"] = setting
            factor = 1.0 if i == 0 else 1.1 if r["size_bytes"] < 65536 else 0.25
            r["busbw_GBps"] *= factor
            r["algbw_GBps"] *= factor
            out.append(r)
    return out


def expected_medians(d, collective, in_place):
    sel = d[(d.collective == collective) & (d.in_place == in_place)]
    return sel.groupby(["size_bytes", "settings"])["busbw_GBps"].median().unstack()


def test_html_settings_section_has_best_and_worst_setting_per_size(tmp_path, undrawn):
    d = frame(settings_rows(), tmp_path)
    page = Page(report.build_html(d, ["env.parquet"]))
    assert ("a", {"href": "#settings"}) in page.tags
    tables = [t for t in page.tables if t and t[0][:2] == ["size", "best setting"]]
    assert len(tables) == 4  # all_reduce, all_gather x in-place, out-of-place
    titles = [t for t in page.text if t.startswith(("all_reduce float32", "all_gather float32"))]
    assert titles[:4] == ["all_reduce float32 in-place", "all_reduce float32 out-of-place",
                          "all_gather float32 in-place", "all_gather float32 out-of-place"]
    table = tables[0]
    assert table[0] == ["size", "best setting", "best busbw (GB/s)", "worst setting", "worst busbw (GB/s)",
                        "best/worst"]
    med = expected_medians(d, "all_reduce", True)
    body = {r[0]: r for r in table[1:]}
    assert list(body) == ["8 B", "1 KiB", "64 KiB", "1 MiB", "16 MiB"]
    for size in med.index:
        row = body[format_size(size)]
        best, worst = (ETH1, ETH0) if size < 65536 else (ETH0, ETH1)
        assert row[1] == best and row[3] == worst
        assert float(row[2]) == pytest.approx(med.loc[size, best], rel=1e-3)
        assert float(row[4]) == pytest.approx(med.loc[size, worst], rel=1e-3)
        assert row[5] == ("1.1×" if size < 65536 else "4×")
    text = " ".join(page.text)
    assert f"{ETH0} is best at 3 of 5 sizes (median best/worst 4×)" in text
    # the peak table and every point keep the settings apart
    peaks = page.table_with("peak busbw (GB/s)")
    assert peaks[0][:4] == ["collective", "dtype", "placement", "setting"] and len(peaks) - 1 == 8
    assert len(page.table_with("bytes")) - 1 == 2 * 2 * 2 * 5
    assert ["settings", "GLOO_SOCKET_IFNAME=eth0|eth1"] in [r for t in page.tables for r in t if len(r) == 2]


def test_markdown_settings_section(tmp_path):
    d = frame(settings_rows(collectives=("all_reduce",), placements=(False,)), tmp_path)
    text = markdown.build_markdown(d, None)
    assert "## Settings" in text
    section = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    assert "### all_reduce float32 out-of-place" in section
    assert f"**{ETH0} is best at 3 of 5 sizes (median best/worst 4×)**" in section
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "setting" not in ln]
    assert len(rows) == 5
    assert rows[-1].startswith(f"| 16 MiB | {ETH0} | ") and rows[-1].endswith(f"| {ETH1} | "
                                                                              f"{rows[-1].split(' | ')[4]} | 4× |")
    assert rows[0].startswith(f"| 8 B | {ETH1} | ") and rows[0].endswith("| 1.1× |")
    assert re.search(r"^\| size \| best setting \|.*\|\n\|---\|---\|---:\|---\|---:\|---:\|", section, re.MULTILINE)


@pytest.mark.parametrize("settings", [(), (ETH0,)])
def test_no_settings_section_with_one_setting_or_none(tmp_path, settings, undrawn):
    rows = settings_rows(settings=settings) if settings else make_rows()
    d = frame(rows, tmp_path)
    html_text = report.build_html(d, ["run.parquet"])
    assert 'id="settings"' not in html_text and "best setting" not in html_text
    assert "## Settings" not in markdown.build_markdown(d, None)
    peaks = Page(html_text).table_with("peak busbw (GB/s)")
    assert "setting" not in peaks[0]
    facts = [r[0] for t in Page(html_text).tables for r in t if len(r) == 2]
    assert ("settings" in facts) == bool(settings)


def test_settings_beside_rows_without_one_and_ties(tmp_path):
    """Two files side by side: one without a settings column's values, one with --env: the rows
    without a setting are a setting of their own; a tie names both settings."""
    from commbench.analysis.points import settingsview

    rows = make_rows(collectives=("all_reduce",), placements=(True,), sizes=(1 << 20, 1 << 24), label="")
    other = [dict(r, settings="NCCL_ALGO=Ring NCCL_PROTO=LL", run_id="20250102-000000-bbbbbb") for r in rows]
    for r in other:
        if r["size_bytes"] == 1 << 24:
            r["busbw_GBps"] *= 0.5
        else:
            r["busbw_GBps"] *= 2
    tables = settingsview.settings_tables(frame(rows + other, tmp_path))
    assert len(tables) == 1
    assert tables[0].rows[0][1:4:2] == ["NCCL_ALGO=Ring NCCL_PROTO=LL", "(no setting)"]
    assert tables[0].rows[1][1:4:2] == ["(no setting)", "NCCL_ALGO=Ring NCCL_PROTO=LL"]
    assert tables[0].line.startswith("NCCL_ALGO=Ring NCCL_PROTO=LL and (no setting) are each best at 1 of 2 sizes")
    assert settingsview.settings_text(["", "MTU=1500", "MTU=9000"]) == "MTU=1500|9000 and rows without one"
    assert settingsview.settings_text([None]) == "none"


def test_the_page_carries_the_stylesheet_shipped_beside_the_module(tmp_path, undrawn):
    """The CSS is package data (report/report.css, pyproject.toml's package-data): read through
    importlib.resources and inlined whole in the page's one <style>, so the page stays self-contained."""
    from importlib import resources

    sheet = resources.files("commbench.analysis.report").joinpath("report.css").read_text(encoding="utf-8")
    assert ":root { --fg:#1d232a;" in sheet and "td.num, th.num { text-align: right;" in sheet
    page = report.build_html(frame(make_rows(repetitions=2), tmp_path))
    styles = re.findall(r"<style>(.*?)</style>", page, flags=re.S)
    assert len(styles) == 1 and styles[0].strip() == sheet.strip()
    assert "<link" not in page  # no external stylesheet
