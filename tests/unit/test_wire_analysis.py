"""The `wire` column in compare and report: the likely cause of a point whose trouble counters were
0 before and moved after, the reports' "Wire" section, and files from before the counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commbench.analysis.compare import compare as cmp
from commbench.analysis.compare import comparetext
from commbench.analysis.report import markdown, report
from commbench.analysis.wire import wireview
from commbench.cli.app import main
from commbench.core import wire
from commbench.core.results import read_results

from unit.synthetic import BUS_FACTOR, make_rows, write

HOSTS = ("cbnode1", "cbnode2")
SIZES = (65536, 1 << 20)
DROPS = ("cbnode2", "eth0 qdisc", "drops", 1815, "drop")
RETRANS = ("cbnode2", "tcp", "RetransSegs", 2736, "retransmit")
WIRE_COLUMNS = ["wire", "wire_per_payload", "wire_trouble"]
EVIL = "<script>alert(1)</script>"


def entry(bus_bytes: float, trouble=()) -> dict:
    """One host's entry as harness/wireprobe.py fills it: one rank, 1.046 wire bytes per bus byte."""
    counters = {"eth0": {"tx_bytes": int(bus_bytes * 1.046)}, "tcp": {"OutSegs": 100}}
    for _, where, counter, delta, _ in trouble:
        counters.setdefault(where, {})[counter] = delta
    return {"counters": counters, "trouble": [[w, c, d, k] for _, w, c, d, k in trouble],
            "out_bytes": int(bus_bytes * 1.046), "in_bytes": int(bus_bytes * 1.046), "ranks": 1, "cost_ms": 0.4}


def rows_with_wire(trouble_at=lambda row: (), read=True, **kw) -> list[dict]:
    """make_rows' rows with the wire columns core/wire.py builds (`trouble_at(row)`: the trouble
    counters that moved at that row, as (host, where, counter, delta, kind)); read=False: --no-wire."""
    kw = {"collectives": ("all_reduce",), "placements": (True,), "sizes": SIZES, "repetitions": 2,
          "hosts": HOSTS, **kw}
    rows = make_rows(**kw)
    for r in rows:
        bus = r["size_bytes"] * BUS_FACTOR[r["collective"]] * (r["warmup"] + r["iters"])
        found = trouble_at(r)
        per_host = {h: entry(bus, [t for t in found if t[0] == h]) for h in r["hosts"]} if read else None
        r.update(wire.columns(per_host, bus))
    return rows


def at_size(size: int, *found):
    return lambda row: found if row["size_bytes"] == size else ()


def strip_wire(path: Path) -> Path:
    """The file as commbench wrote it before the counters: no wire columns at all."""
    table = pq.read_table(path)
    pq.write_table(table.drop(WIRE_COLUMNS), path)
    return path


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code, capsys.readouterr()


def point_at(c, size: int):
    return next(p for p in c.points if p.key["size_bytes"] == size)


@pytest.fixture
def files(tmp_path):
    """before: clean everywhere; after: drops and retransmits at 1 MiB only."""
    before = write(tmp_path / "before.parquet", rows_with_wire(label="before"))
    after = write(tmp_path / "after.parquet", rows_with_wire(at_size(1 << 20, DROPS, RETRANS), label="after",
                                                             run_id="20250102-000000-bbbbbb", seed=2))
    return before, after


# ---- compare ----


def test_compare_names_the_counters_of_a_point_that_went_clean_to_trouble(files):
    before, after = (read_results([f], columns=cmp.READ_COLUMNS) for f in files)
    assert "wire" in before.columns and "wire_trouble" in after.columns
    c = cmp.compare_frames(before, after)
    hit = point_at(c, 1 << 20)
    # two repetitions, each +1,815 drops and +2,736 retransmits: summed, in core/wire.py's order
    assert hit.likely_cause == ("cbnode2 eth0 qdisc drops +3,630, cbnode2 tcp RetransSegs +5,472 "
                                "(trouble counters were 0 before)")
    assert point_at(c, 65536).likely_cause is None  # clean on both sides
    table = comparetext.render_table(c, wide=True)
    line = next(ln for ln in table.splitlines() if "1 MiB" in ln)
    assert "likely cause: cbnode2 eth0 qdisc drops +3,630, cbnode2 tcp RetransSegs +5,472" in line
    assert "likely cause" not in next(ln for ln in table.splitlines() if "64 KiB" in ln)
    assert "wire: trouble counters moved at 1 point where they were 0 (or 10x smaller) before" in table
    md_row = next(ln for ln in comparetext.render_markdown(c).splitlines()
                  if ln.startswith("| all_reduce") and "1 MiB" in ln)
    assert "likely cause: cbnode2 eth0 qdisc drops +3,630" in md_row
    doc = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    causes = {p["key"]["size_bytes"]: p["likely_cause"] for p in doc["points"]}
    assert causes[1 << 20].startswith("cbnode2 eth0 qdisc drops +3,630") and causes[65536] is None


def test_the_cause_changes_no_verdict_and_no_exit_code(files, tmp_path, capsys):
    with_wire = cmp.compare_frames(*(read_results([f]) for f in files))
    stripped = [strip_wire(Path(shutil.copy(f, tmp_path / f"old{i}.parquet"))) for i, f in enumerate(files)]
    without = cmp.compare_frames(*(read_results([f]) for f in stripped))
    assert [p.verdict for p in with_wire.points] == [p.verdict for p in without.points]
    assert [p.note for p in with_wire.points] == [p.note for p in without.points]
    assert with_wire.exit_code() == without.exit_code()
    code_with, out = run_cli(["compare", str(files[0]), str(files[1])], capsys)
    assert "likely cause: cbnode2 eth0 qdisc drops +3,630" in out.out
    code_without, out = run_cli(["compare", str(stripped[0]), str(stripped[1])], capsys)
    assert "likely cause" not in out.out and code_with == code_without == with_wire.exit_code()


def test_a_counter_that_moved_as_much_before_is_no_lead_but_a_new_one_is(tmp_path, capsys):
    before = write(tmp_path / "b.parquet", rows_with_wire(at_size(1 << 20, RETRANS), label="before"))
    same = write(tmp_path / "s.parquet", rows_with_wire(at_size(1 << 20, RETRANS), label="after", seed=2))
    c = cmp.compare_frames(read_results([before]), read_results([same]))
    assert all(p.likely_cause is None for p in c.points)
    code, out = run_cli(["compare", str(before), str(same), "--format", "json"], capsys)
    assert code in (0, 1, 3) and all(p["likely_cause"] is None for p in json.loads(out.out)["points"])
    # the same retransmissions and drops that were 0 before: the drops are named, the retransmissions not
    after = write(tmp_path / "a.parquet", rows_with_wire(at_size(1 << 20, DROPS, RETRANS), label="after", seed=2))
    c = cmp.compare_frames(read_results([before]), read_results([after]))
    assert point_at(c, 1 << 20).likely_cause == "cbnode2 eth0 qdisc drops +3,630 (trouble counters were 0 before)"


def test_a_few_spurious_retransmissions_before_do_not_hide_thousands_after(tmp_path):
    """A clean lab's sweep counted 45 TCP retransmissions at one point (a CPU stall's spurious timeout);
    after a tiny tbf queue, thousands, and new qdisc drops: both named, the grown one with its before."""
    few = ("cbnode1", "tcp", "RetransSegs", 45, "retransmit")
    many = ("cbnode1", "tcp", "RetransSegs", 1950, "retransmit")
    before = write(tmp_path / "b.parquet", rows_with_wire(at_size(1 << 20, few), label="before"))
    after = write(tmp_path / "a.parquet", rows_with_wire(at_size(1 << 20, DROPS, many), label="after", seed=2))
    c = cmp.compare_frames(read_results([before]), read_results([after]))
    assert point_at(c, 1 << 20).likely_cause == ("cbnode2 eth0 qdisc drops +3,630, cbnode1 tcp RetransSegs +3,900 "
                                                 "(+90 before) (the others were 0 before)")
    # 9x as many a row is not GROWTH (10x): no lead from that counter alone
    nine = ("cbnode1", "tcp", "RetransSegs", 405, "retransmit")
    after = write(tmp_path / "n.parquet", rows_with_wire(at_size(1 << 20, nine), label="after", seed=2))
    assert all(p.likely_cause is None for p in cmp.compare_frames(read_results([before]), read_results([after])).points)


def test_no_cause_when_before_read_no_counters(tmp_path, capsys):
    trouble = at_size(1 << 20, DROPS)
    no_wire = write(tmp_path / "nowire.parquet", rows_with_wire(read=False, label="before"))
    old = strip_wire(write(tmp_path / "old.parquet", rows_with_wire(label="before")))
    after = write(tmp_path / "a.parquet", rows_with_wire(trouble, label="after", seed=2))
    assert "wire" not in pq.read_schema(old).names and read_results([old])["wire"].isna().all()  # read as missing
    for before in (no_wire, old):
        c = cmp.compare_frames(read_results([before], columns=cmp.READ_COLUMNS), read_results([after]))
        assert c.points and all(p.likely_cause is None for p in c.points)
        code, out = run_cli(["compare", str(before), str(after), "--format", "markdown"], capsys)
        assert code in (0, 1, 3) and "likely cause" not in out.out and "### commbench compare" in out.out
    # and the other way round: after without counters names nothing either
    c = cmp.compare_frames(read_results([after]), read_results([old]))
    assert c.points and all(p.likely_cause is None for p in c.points)


def test_a_long_cause_names_four_counters_and_counts_the_rest():
    found = [(wire.Trouble("h", "eth0", f"c{i}", 10 - i, "error"), 1) for i in range(6)]
    text = wireview.cause_text([(t, None) for t, _ in found])
    assert text == "h eth0 c0 +10, h eth0 c1 +9, h eth0 c2 +8, h eth0 c3 +7, +2 more (trouble counters were 0 before)"
    grown = wireview.cause_text([(found[0][0], 1)])
    assert grown == "h eth0 c0 +10 (+1 before)"


def test_row_flags_read_the_json_when_the_flag_column_is_missing(files):
    df = read_results([files[1]])
    read, trouble = wireview.row_flags(df.drop(columns=["wire_trouble"]))
    flag_read, flag_trouble = wireview.row_flags(df)
    assert read.all() and flag_read.all()
    assert trouble.tolist() == flag_trouble.tolist() == (df["size_bytes"] == 1 << 20).tolist()
    none_read, none_trouble = wireview.row_flags(df.drop(columns=WIRE_COLUMNS))
    assert not none_read.any() and not none_trouble.any()


# ---- report ----


def test_report_wire_section_names_the_counters_that_moved(files, tmp_path, undrawn):
    df = read_results([files[1]])
    page = report.build_html(df, [str(files[1])])
    assert '<section id="wire"><h2>Wire</h2>' in page and '<a href="#wire">Wire</a>' in page
    section = page[page.index('<section id="wire">'):page.index("</section>", page.index('<section id="wire">'))]
    assert ("<tr><td>cbnode2</td><td>eth0 qdisc</td><td>drops</td><td>drop</td>"
            '<td class="num bad">+3,630</td><td>2 of 4</td></tr>') in section
    assert "<td>tcp</td><td>RetransSegs</td><td>retransmit</td>" in section and "+5,472" in section
    assert "Counters were read during all 4 points." in section
    assert "No error, drop" not in section
    # wire bytes per payload byte: 1.046 at every point (one rank a host)
    assert "<td>all_reduce</td>" in section and '<td class="num">1.046</td>' in section
    assert "1.046 (1 MiB)" in section
    text = markdown.build_markdown(df, None, [str(files[1])])
    md_section = text[text.index("## Wire"):text.index("## Runs")]
    assert "| cbnode2 | eth0 qdisc | drops | drop | +3,630 | 2 of 4 |" in md_section
    assert "| cbnode2 | tcp | RetransSegs | retransmit | +5,472 | 2 of 4 |" in md_section
    assert "|---|---|---|---|---:|---|" in md_section and "1.046 (1 MiB)" in md_section


def test_report_says_when_nothing_moved_and_when_no_counters_were_read(files, tmp_path, undrawn):
    clean = read_results([files[0]])
    page = report.build_html(clean, ["before.parquet"])
    assert "No link, error, drop, retransmit, pause or congestion counter moved during 4 points." in page
    assert "Trouble counters that moved" not in page and "Wire bytes per payload byte" in page
    assert "No link, error, drop, retransmit, pause or congestion counter moved during 4 points." in (
        markdown.build_markdown(clean, None))
    for df in (read_results([write(tmp_path / "nowire.parquet", rows_with_wire(read=False))]),
               read_results([strip_wire(write(tmp_path / "old.parquet", rows_with_wire()))])):
        page = report.build_html(df, ["x.parquet"])
        assert "No counters were read (results from before counters, or --no-wire)." in page
        assert "Wire bytes per payload byte" not in page and "summed delta" not in page
        assert wireview.NOT_READ_TEXT in markdown.build_markdown(df, None)


def test_report_of_old_files_writes_html_and_markdown_with_a_baseline(files, tmp_path, capsys, undrawn):
    old = strip_wire(write(tmp_path / "old.parquet", rows_with_wire(label="old")))
    for out in ("r.html", "r.md"):
        code, res = run_cli(["report", str(old), "--baseline", str(files[0]), "--out", str(tmp_path / out)], capsys)
        assert code == 0, res.err
        assert "No counters were read" in (tmp_path / out).read_text()
    # a baseline that was clean, new results with trouble: the comparison carries the cause
    code, res = run_cli(["report", str(files[1]), "--baseline", str(files[0]), "--out", str(tmp_path / "c.html")],
                        capsys)
    assert code == 0, res.err
    html_text = (tmp_path / "c.html").read_text()
    comparison = html_text[html_text.index('<section id="comparison">'):html_text.index('<section id="wire">')]
    assert "likely cause: cbnode2 eth0 qdisc drops +3,630, cbnode2 tcp RetransSegs +5,472" in comparison


def test_wire_values_from_the_file_are_escaped(tmp_path, undrawn):
    evil = (EVIL, "eth0 | [x](y)", "drops", 7, "drop")
    df = read_results([write(tmp_path / "evil.parquet", rows_with_wire(at_size(1 << 20, evil),
                                                                      hosts=(EVIL, "cbnode2")))])
    page = report.build_html(df, ["evil.parquet"])
    assert EVIL not in page and "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in page
    text = markdown.build_markdown(df, None)
    assert EVIL not in text and "&lt;script&gt;" in text and "eth0 \\| \\[x\\](y)" in text
