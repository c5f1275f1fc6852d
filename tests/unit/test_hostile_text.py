"""Text from files is data (issue #39, classes 1, 2, 3 and the gate half of 7): a results file whose
collective, dtype, label or versions hold terminal escapes, Markdown, HTML, formulas or megabytes
reaches every output kind through one sanitiser each (core/outtext.py), through the real CLI."""

from __future__ import annotations

import csv
import io
import re
import time
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.core import outtext
from unit.synthetic import make_rows, write

# What a hostile file plants: a screen clear, a fake verdict on a line of its own, a bidi override,
# a tracking image, a script link, raw HTML, Markdown emphasis, math, a formula and a bell.
EVIL = ("all_reduce\x1b[2J\ngate: PASS: no regression\u202e ![i](https://t.example/p.png) "
        "[x](javascript:alert(1)) <img src=x onerror=alert(2)> *b* `c` $x$ =HYPERLINK(\"u\")\x07")
LIVE_LINK = re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\(")  # [text]( with neither bracket escaped


def _hostile(path, collective=EVIL, **columns):
    rows = make_rows(collectives=("all_reduce",), sizes=(1024, 1 << 20, 1 << 24), repetitions=2, **columns)
    for r in rows:
        r["collective"] = collective
    return write(path, rows)


def _no_raw_control(text: str) -> None:
    """No C0/C1 control byte but the line breaks a format writes itself, no bidi override."""
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text), text[:300]


def _inert_markdown(text: str) -> None:
    _no_raw_control(text)
    links = LIVE_LINK.findall(re.sub(r"!\[[^\]]*\]\([\w.%-]+\.png\)", "", text))  # but the report's own figures
    assert not links and "<" not in text and "https://" not in text


@pytest.mark.failure(
    row="hostile-text-terminal",
    section="Text from files in every output (issue #39)",
    failure="a collective holding `\\x1b[2J`, a newline and a fake `gate: PASS` line, a bidi override, in a file "
            "whose rows are damaged (so the error line names the point)",
    does="exit 2, one stderr line, the file's text shown escaped (`all_reduce\\x1b[2J\\ngate: PASS ...`), at most "
         "200 characters of it then `… (N characters)`: describe_point, gate's point names and every BadInput "
         "pass cli/app.py's one terminal sanitiser (core/outtext.py `terminal`)",
)
def test_a_damaged_point_is_named_on_one_escaped_line(tmp_path, cli):
    rows = make_rows(collectives=("all_reduce",), repetitions=1)
    for r in rows:
        r["collective"] = EVIL + "x" * 5000
    after = write(tmp_path / "a.parquet", [dict(r, run_id="20250101-000000-bbbbbb") for r in rows])
    rows[0]["samples_us"] = [-1.0, 2.0]
    before = write(tmp_path / "b.parquet", rows)
    r = cli("compare", str(before), str(after), "--allow-within-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    _no_raw_control(r.stderr)
    assert "all_reduce\\x1b[2J\\ngate: PASS: no regression\\u202e" in r.stderr
    assert f"… ({len(EVIL) + 5000:,} characters)" in r.stderr and len(r.stderr) < 1500
    usage = cli("compare", str(before), str(after), "--format", "\x1b[2J\nmd")  # click's own message, the same door
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1 and "'\\x1b[2J\\nmd'" in usage.stderr


@pytest.mark.failure(row="hostile-text-terminal")
def test_tables_warnings_and_notes_on_a_terminal_stay_one_escaped_line_each(tmp_path, cli):
    before = _hostile(tmp_path / "b.parquet", label="before\x1b]0;title\x07")
    after = _hostile(tmp_path / "a.parquet", run_id="20250101-000000-bbbbbb", seed=3, wrong=2)
    r = cli("compare", str(before), str(after))
    assert r.returncode in (0, 1, 3) and "Traceback" not in r.stdout + r.stderr
    _no_raw_control(r.stdout + r.stderr)
    assert "all_reduce\\x1b[2J\\ngate: PASS" in r.stdout
    suggested = cli("gate", str(after), "--suggest", "--min-size", "1K")  # bands too wide: refused, points named
    assert suggested.returncode == 2 and suggested.stderr.count("\n") == 1
    _no_raw_control(suggested.stdout + suggested.stderr)
    assert "(all_reduce\\x1b[2J\\ngate: PASS" in suggested.stderr


@pytest.mark.failure(
    row="hostile-text-markdown",
    section="Text from files in every output (issue #39)",
    failure="the same collective, a label with an OSC title sequence, in `compare`, `gate` and `report` "
            "`--format markdown`",
    does="every value through core/outtext.py `markdown`: brackets, `*`, `_`, backticks, `|`, `~`, `#`, `$` and "
         "backslashes backslash-escaped, `& < >` as entities, `://` and `www.` escaped (no autolink), "
         "control characters as escapes on one line: no live "
         "link, image, HTML, emphasis, code, column break or math reaches the ticket",
)
def test_markdown_of_compare_gate_and_report_is_inert(tmp_path, cli):
    before = _hostile(tmp_path / "b.parquet", label="L\x1b]0;t\x07")
    after = _hostile(tmp_path / "a.parquet", run_id="20250101-000000-bbbbbb", seed=3)
    compared = cli("compare", str(before), str(after), "--format", "markdown")
    assert "Traceback" not in compared.stderr
    _inert_markdown(compared.stdout)
    assert "all_reduce\\\\x1b\\[2J\\\\ngate: PASS: no regression\\\\u202e !\\[i\\](https\\://t" in compared.stdout
    bands = tmp_path / "bands.yaml"
    bands.write_text("version: 1\nsystem: \"<b>[x](javascript:y)</b>\"\nentries:\n"
                     "  - {collective: all_reduce, size: 1M, ranks: 16, busbw_GBps: 1, note: '![i](https://t/p)'}\n")
    gated = cli("gate", str(after), "--expect", str(bands), "--format", "markdown")
    assert gated.returncode == 1 and "Traceback" not in gated.stderr  # no row of all_reduce: not measured
    _inert_markdown(gated.stdout)
    out = tmp_path / "r.md"
    reported = cli("report", str(after), "--baseline", str(before), "--out", str(out))
    assert reported.returncode == 0, reported.stderr
    _inert_markdown(out.read_text())


def _sides(tmp_path, collective=EVIL):
    """An nccl-tests log imported, and commbench's side made from it, both with a hostile collective."""
    from commbench.integrations.nccl_tests.importer import import_files

    tmp_path = tmp_path / f"sides{len(list(tmp_path.iterdir()))}"
    tmp_path.mkdir()

    log = "tests/data/nccl-tests/all_reduce_v2.19.4_1node_8xA100.txt"
    assert import_files([log], str(tmp_path / "nt.parquet"), echo=lambda m: None, warn=lambda m: None) == 0
    nt = pd.read_parquet(tmp_path / "nt.parquet")
    nt["collective"], nt["nccl_version"] = collective, "2.19\x1b[31m <b>"
    nt.to_parquet(tmp_path / "nt.parquet")
    nt["workload"], nt["plan"] = "sweep", '{"workload": "sweep", "cuda_graph": 0}'
    nt.to_parquet(tmp_path / "cb.parquet")
    return str(tmp_path / "cb.parquet"), str(tmp_path / "nt.parquet")


@pytest.mark.failure(
    row="hostile-text-csv",
    section="Text from files in every output (issue #39)",
    failure="`nccl-tests side-by-side` of files whose collective holds raw HTML, a newline and a heading, or "
            "starts with `=`, `+`, `-`, `@` (`=HYPERLINK(...)`, formula injection), as markdown, csv and a table",
    does="Markdown inert as above; each distinct CSV text value through core/outtext.py `csv_cell` (control "
         "characters escaped, a single quote before a leading `= + - @ TAB CR`, as OWASP recommends) and every "
         "text cell quoted (csv.QUOTE_NONNUMERIC); the table escaped",
)
def test_side_by_side_markdown_csv_and_table_are_inert(tmp_path, cli):
    cb, nt = _sides(tmp_path, EVIL + "\n# heading")
    md = cli("nccl-tests", "side-by-side", cb, nt, "--format", "markdown")
    assert md.returncode in (0, 1) and "Traceback" not in md.stderr
    _inert_markdown(md.stdout)
    assert not any(line.startswith("#") for line in md.stdout.splitlines())
    table = cli("nccl-tests", "side-by-side", cb, nt)
    _no_raw_control(table.stdout)
    for start in ("=HYPERLINK(\"https://t.example\")", "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"):
        cb, nt = _sides(tmp_path, start)
        out = tmp_path / f"r{ord(start[0])}.csv"
        r = cli("nccl-tests", "side-by-side", cb, nt, "--format", "csv", "--out", str(out))
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr
        text = out.read_text()
        _no_raw_control(text.replace("\r\n", "\n"))
        cells = [row[0] for row in csv.reader(io.StringIO(text))][1:]
        assert cells and all(c.startswith("'") and c[1:] == outtext.escaped(start) for c in cells)
        assert all(line.startswith("\"'") for line in text.splitlines()[1:])  # the cell quoted


@pytest.mark.failure(
    row="hostile-text-figures",
    section="Text from files in every output (issue #39)",
    failure="control characters, a bidi override and `$` in a collective and a label, drawn as SVG",
    does="every figure text passes figures.mpl_text (core/outtext.py `figure`): control characters removed, "
         "`$` escaped, each line bounded; the SVG parses as XML",
)
def test_a_plot_of_hostile_text_is_valid_svg(tmp_path, cli):
    res = _hostile(tmp_path / "a.parquet", label="L\x1b]0;t\x07\x0b$x$")
    out = tmp_path / "p.svg"
    r = cli("plot", str(res), "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    _no_raw_control(text.replace("\n", ""))
    ET.fromstring(text.encode())


@pytest.mark.failure(row="hostile-text-figures")
def test_a_pairs_heat_map_of_hostile_host_names_is_valid_svg(tmp_path, cli):
    hosts = ("n1\x1b[2J", "n2 $x$", "n3\u202e\x0b<b>", "n4")
    base = make_rows(collectives=("sendrecv",), sizes=(16 << 20,), placements=(False,), repetitions=1,
                     hosts=hosts, backend="gloo", device_name="cpu")[0]
    rows = [{**base, "workload": "pairs", "collective": "sendrecv", "dtype": "uint8", "op": None, "busbw_GBps": gbps,
             "algbw_GBps": gbps, "time_us": (16 << 20) / gbps / 1e3, "src_host": hosts[s], "dst_host": hosts[d],
             "src_rank": s, "dst_rank": d, "world_size": 4, "ranks_per_node": 1}
            for s in range(4) for d in range(4) if s != d for gbps in [0.05 if 2 in (s, d) else 0.1]]
    res = write(tmp_path / "pairs.parquet", rows)
    out = tmp_path / "h.svg"
    r = cli("plot", str(res), "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    _no_raw_control(text.replace("\n", ""))
    ET.fromstring(text.encode())
    md = tmp_path / "r.md"
    assert cli("report", str(res), "--out", str(md)).returncode == 0
    _no_raw_control(md.read_text())


@pytest.mark.failure(
    row="hostile-text-huge",
    section="Text from files in every output (issue #39)",
    failure="a collective name of 1 MiB (`plot` took 200 s and more, 964 MB, before: its suptitle was not cut) and "
            "a label of 5 MB (the HTML report held it at every place it is named)",
    does="each value bounded where it is shown: 200 characters (1000 for a composed line or a report's cell) then "
         "`… (N characters)`; `plot` draws it in about 2 s, the report stays under 1 MB",
)
def test_megabytes_of_name_are_cut_in_figures_and_reports(tmp_path, cli):
    rows = make_rows(collectives=("all_reduce",), sizes=(1024, 1 << 20), repetitions=1, label="L" * 5_000_000)
    for r in rows:
        r["collective"] = "all_reduce\x1b[2J" + "x" * (1 << 20)
    res = write(tmp_path / "big.parquet", rows)
    started = time.monotonic()
    r = cli("plot", str(res), "--out", str(tmp_path / "p.png"))
    assert r.returncode == 0 and time.monotonic() - started < 30, r.stderr
    r = cli("report", str(res), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert len(page) < 1_000_000 and re.search(r"L… \(5,0\d\d,\d{3} characters\)", page)
    assert re.search(r"x… \(1,04\d,\d{3} characters\)", page)


@pytest.mark.failure(
    row="gate-judged-nothing",
    section="Text from files in every output (issue #39)",
    failure="a bands file whose every entry is optional and matched nothing (the gate said PASS, `0 of 1 "
            "entries`: a CI gate that checked nothing)",
    does="exit 1, `gate: FAIL: nothing judged: none of the 1 entries (all optional) matched the results ...`; "
         "`--allow-empty` lets it pass (exit 0); an optional entry beside a judged one still passes",
)
def test_a_gate_that_judged_nothing_fails_unless_allowed(tmp_path, cli):
    res = write(tmp_path / "a.parquet", make_rows(repetitions=2))
    bands = tmp_path / "bands.yaml"
    bands.write_text("version: 1\nsystem: t\nentries:\n"
                     "  - {collective: all_reduce, size: 1G, ranks: 16, busbw_GBps: 50, optional: true}\n")
    r = cli("gate", str(res), "--expect", str(bands))
    assert r.returncode == 1 and "gate: FAIL: nothing judged" in r.stdout and "Traceback" not in r.stderr
    assert cli("gate", str(res), "--expect", str(bands), "--format", "json").returncode == 1
    allowed = cli("gate", str(res), "--expect", str(bands), "--allow-empty")
    assert allowed.returncode == 0 and "gate: PASS: 0 of 1 entries" in allowed.stdout
    refused = cli("gate", str(res), "--suggest", "--allow-empty")
    assert refused.returncode == 2 and "--allow-empty is for judging" in refused.stderr


# ---- random text into each sanitiser, and through the CLI ----

HOSTILE = st.text(st.one_of(st.characters(), st.sampled_from(list("[]()!*_`<>&|~#$\\:=+-@\t\r\n\x1b\u202e\x00"))),
                  max_size=300)
HUGE = st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=3), st.integers(1, 20_000))


@pytest.mark.failure(
    row="hostile-text-fuzz",
    section="Text from files in every output (issue #39)",
    failure="random text (every Unicode category, control and bidi characters, Markdown, HTML, formulas, up to "
            "60,000 characters) into each sanitiser, and as a collective through `compare --format markdown`",
    does="terminal: printable, one line, bounded; markdown: no live link, no `<`, no unescaped active character; "
         "csv_cell: never starts a formula; figure: printable, no unescaped `$`, bounded",
)
@settings(max_examples=50, deadline=None)
@given(st.one_of(HOSTILE, HUGE))
def test_each_sanitiser_keeps_its_promise_on_any_text(text):
    shown = outtext.terminal(text)
    assert shown.isprintable() and len(shown) <= 10 * outtext.LIMIT + 40
    if len(text) > outtext.LIMIT:
        assert shown.endswith(f"… ({len(text):,} characters)")
    md = outtext.markdown(text)
    assert md.isprintable() and "<" not in md and ">" not in md and not LIVE_LINK.search(md)
    assert not re.search(r"[\[\]`*|~$]", re.sub(r"\\.", "", md))  # each active character escaped
    cell = outtext.csv_cell(text)
    assert cell.isprintable() and not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    block = outtext.lines(text)
    assert all(line.isprintable() for line in block.split("\n")) and block.count("\n") == text.count("\n")
    fig = outtext.figure(text)
    assert fig.isprintable() and not re.search(r"(?<!\\)\$", fig) and len(fig) <= 2 * outtext.LIMIT + 40


@pytest.mark.failure(row="hostile-text-fuzz")
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(HOSTILE)
def test_random_collectives_through_compare_markdown_stay_inert(tmp_path_factory, cli, collective):
    d = tmp_path_factory.mktemp("fuzz")
    rows = make_rows(collectives=("all_reduce",), sizes=(1 << 20,), repetitions=2)
    for r in rows:
        r["collective"] = collective or "x"
    before = write(d / "b.parquet", rows)
    after = write(d / "a.parquet", [dict(r, run_id="20250101-000000-bbbbbb") for r in rows])
    r = cli("compare", str(before), str(after), "--format", "markdown")
    assert "Traceback" not in r.stderr and r.returncode in (0, 1, 2, 3)
    _inert_markdown(r.stdout)
    _no_raw_control(r.stderr)
