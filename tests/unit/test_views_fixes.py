"""Issue #19's rough edges in plot, compare, report, buckets and zero views, each as the user met it:
`--line-rate 1gbit`, a second plot of the same file (--force), compare's empty latency panel, the
report's caption / headroom / missing baseline metadata, `compare X X`, the buckets axis in elements
and time per step, and the one-column ZeRO heat map. Synthetic rows written and read back through
the real results module; the commands run in-process through the real CLI."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from matplotlib.patches import Rectangle

from commbench.analysis.compare import compare as cmp
from commbench.analysis.report import reportparts
from commbench.analysis.curves import curveplot
from commbench.analysis.tune import zerogrid
from commbench.cli.app import main
from commbench.core.errors import BadInput
from commbench.core.units import parse_rate

from unit.synthetic import frame, make_rows, write

BIG = (256 << 10, 1 << 20, 4 << 20)  # no size <= 64 KiB: no latency panel
MIXED = (1024, 65536, 1 << 20, 4 << 20)


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code, capsys.readouterr()


# ---- 1. one rate parser: tc's units next to the spellings plot always took ----


@pytest.mark.parametrize("text, bits", [
    ("1gbit", 1e9), ("800mbit", 8e8), ("1.5GBIT", 1.5e9), ("100kbit", 1e5), ("2tbit", 2e12),  # tc's units
    ("400Gbps", 4e11), ("25gbps", 2.5e10), ("100000Mbps", 1e11), ("400Gbit/s", 4e11),  # bits, as before
    ("50GB/s", 4e11), ("50 GBps", 4e11), ("800 MB/s", 6.4e9),  # bytes, as before
])
def test_one_rate_parser_reads_tc_units_and_the_old_spellings(text, bits):
    assert parse_rate(text, "--line-rate") == pytest.approx(bits)


def test_plot_takes_the_lab_s_rate_unit(tmp_path, capsys):
    res = write(tmp_path / "run.parquet", make_rows(sizes=BIG, repetitions=1))
    code, out = run_cli(["plot", str(res), "--line-rate", "1gbit", "--out", str(tmp_path / "p.png")], capsys)
    assert code == 0, out.err
    assert curveplot.parse_line_rate("1gbit") == pytest.approx(0.125)  # GB/s
    fig = curveplot.build_figure(frame(make_rows(sizes=BIG, repetitions=1), tmp_path, "f.parquet"), "busbw",
                            curveplot.parse_line_rate("1gbit"), "1gbit")
    assert any(np.allclose(ln.get_ydata(), 0.125) for ln in fig.axes[0].get_lines())


def test_tc_text_keeps_the_lab_s_rules_and_says_what_bps_means_to_tc():
    assert parse_rate("1gbit", tc=True) == 1e9
    for bad in ("1 gbit", "1e9bit", "0mbit", "1gb", "400Gbps"):
        with pytest.raises(BadInput, match="not a tc rate"):
            parse_rate(bad, tc=True)
    with pytest.raises(BadInput, match=r"tc reads 'bps' as bytes per second.*8gbit"):
        parse_rate("1gbps", "--rate", tc=True)


@pytest.mark.parametrize("text", ["fast", "400", "1e400gbit", "0gbit", "400 GiB/s", "gbit"])
def test_a_bad_rate_names_the_flag_and_the_value(text):
    with pytest.raises(BadInput, match=re.escape(f"--line-rate {text!r}")):
        parse_rate(text, "--line-rate")


# ---- 2. plot --force, report --force ----


def test_a_second_plot_of_the_same_file_needs_force_and_the_refusal_says_so(tmp_path, capsys):
    res = write(tmp_path / "run.parquet", make_rows(sizes=BIG, repetitions=1))
    target = tmp_path / "run.png"
    assert run_cli(["plot", str(res)], capsys)[0] == 0 and target.exists()
    target.write_bytes(b"old")
    code, out = run_cli(["plot", str(res)], capsys)
    assert code == 2 and "--force" in out.err and "never overwrites" in out.err and target.read_bytes() == b"old"
    code, out = run_cli(["plot", str(res), "--force"], capsys)
    assert code == 0, out.err
    assert target.read_bytes().startswith(b"\x89PNG")
    code, out = run_cli(["plot", str(res), "--out", str(res), "--force"], capsys)  # never an input
    assert code == 2 and "Traceback" not in out.err


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_report_force_replaces_the_report(tmp_path, capsys, suffix, undrawn):
    res = write(tmp_path / "run.parquet", make_rows(sizes=BIG, repetitions=1))
    target = tmp_path / f"r{suffix}"
    assert run_cli(["report", str(res), "--out", str(target)], capsys)[0] == 0
    target.write_text("old")
    code, out = run_cli(["report", str(res), "--out", str(target)], capsys)
    assert code == 2 and "--force" in out.err and target.read_text() == "old"
    code, out = run_cli(["report", str(res), "--out", str(target), "--force"], capsys)
    assert code == 0, out.err
    assert target.read_text() != "old"


# ---- 3. compare's figure: a latency panel only when there are small sizes ----


def _sides(tmp_path, sizes):
    n = len(sizes)
    before = frame(make_rows(sizes=sizes, run_id="20250101-000000-aaaaaa"), tmp_path, f"b{n}.parquet")
    after = frame(make_rows(sizes=sizes, run_id="20250102-000000-bbbbbb", seed=3), tmp_path, f"a{n}.parquet")
    return before, after


def test_the_comparison_figure_has_no_empty_latency_panel(tmp_path):
    fig = curveplot.build_comparison_figure(*_sides(tmp_path, BIG))
    assert len(fig.axes) == 1 and not curveplot.has_latency_panel(fig)
    assert not any("no sizes" in t.get_text() for ax in fig.axes for t in ax.texts)
    fig = curveplot.build_comparison_figure(*_sides(tmp_path, MIXED))
    assert len(fig.axes) == 2 and curveplot.has_latency_panel(fig)


# ---- 4. the report: captions of the panels there are, headroom, the baseline's runs ----


def _captions(html: str) -> list[str]:
    return re.findall(r"<figcaption>(.*?)</figcaption>", html)


def test_report_captions_name_only_the_panels_drawn(tmp_path, capsys, undrawn):
    for sizes, bottom in ((BIG, False), (MIXED, True)):
        before = write(tmp_path / f"b{len(sizes)}.parquet", make_rows(sizes=sizes, run_id="20250101-000000-aaaaaa"))
        after = write(tmp_path / f"a{len(sizes)}.parquet", make_rows(sizes=sizes, run_id="20250102-000000-bbbbbb"))
        out = tmp_path / f"r{len(sizes)}.html"
        code, got = run_cli(["report", str(after), "--baseline", str(before), "--out", str(out)], capsys)
        assert code == 0, got.err
        captions = _captions(out.read_text())
        assert len(captions) == 2
        assert all(("Bottom:" in c or "below, the time" in c) == bottom for c in captions), captions


def test_curves_clear_the_top_frame(tmp_path):
    df = frame(make_rows(sizes=BIG, repetitions=2), tmp_path)
    for fig in (curveplot.build_figure(df), curveplot.build_comparison_figure(*_sides(tmp_path, BIG))):
        top = fig.axes[0]
        highest = max(float(np.nanmax(ln.get_ydata())) for ln in top.get_lines())
        assert top.get_ylim()[1] >= 1.08 * max(highest, float(top.dataLim.y1))


def test_the_report_shows_the_baseline_s_run_metadata(tmp_path, capsys, undrawn):
    before = write(tmp_path / "b.parquet", make_rows(sizes=BIG, run_id="20250101-000000-aaaaaa", mtu=1500,
                                                       hosts=("old01", "old02")))
    after = write(tmp_path / "a.parquet", make_rows(sizes=BIG, run_id="20250102-000000-bbbbbb"))
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    for out in (html, md):
        code, got = run_cli(["report", str(after), "--baseline", str(before), "--out", str(out)], capsys)
        assert code == 0, got.err
    page = html.read_text()
    runs = page[page.index('<section id="baseline-runs">'):]
    assert reportparts.BASELINE_RUNS in runs and "20250101-000000-aaaaaa" in runs and "old01" in runs
    assert 'href="#baseline-runs"' in page
    text = md.read_text()
    section = text[text.index(f"## {reportparts.BASELINE_RUNS}"):]
    assert "### 20250101-000000-aaaaaa" in section and "old01" in section and "| MTU | 1500 |" in section
    assert text.rstrip().splitlines()[-1].startswith("_commbench")  # the footer stays last


# ---- 5. compare X X ----


def test_compare_of_a_run_with_itself_warns_in_every_output(tmp_path, capsys):
    res = write(tmp_path / "run.parquet", make_rows(sizes=BIG))
    copy = tmp_path / "copy.parquet"
    shutil.copy(res, copy)
    for other in (res, copy):  # the same file, and the same run in another file
        code, out = run_cli(["compare", str(res), str(other)], capsys)
        warned = [ln for ln in out.err.splitlines() if cmp.SAME_RUN in ln]
        assert len(warned) == 1 and "20250101-000000-abcdef" in warned[0] and code == 3, out.err
        assert cmp.SAME_RUN in out.out
    code, out = run_cli(["compare", str(res), str(copy), "--format", "json"], capsys)
    assert any(w.startswith(cmp.SAME_RUN) for w in json.loads(out.out)["warnings"])
    code, out = run_cli(["compare", str(res), str(copy), "--format", "markdown"], capsys)
    assert cmp.SAME_RUN in out.out


def test_compare_of_one_file_warns_on_the_large_input_path_too(tmp_path, capsys, monkeypatch):
    from commbench.analysis.points import pointtable

    monkeypatch.setattr(pointtable, "MIN_ROWS", 1)  # every input is "large": aggregated by DuckDB
    res = write(tmp_path / "run.parquet", make_rows(sizes=BIG))
    code, out = run_cli(["compare", str(res), str(res)], capsys)
    warned = [ln for ln in out.err.splitlines() if cmp.SAME_RUN in ln]
    # The engine reads run_id too, so it names the run, as the pandas path does; only one warning.
    assert len(warned) == 1 and "same run (20250101-000000-abcdef)" in warned[0] and code == 3, out.err


def test_two_different_runs_get_no_same_run_warning(tmp_path):
    c = cmp.compare_frames(*_sides(tmp_path, BIG))
    assert not any("same" in w for w in c.warnings)
    shared = cmp.same_run_warning({"r1", "r2"}, {"r2", "r3"})
    assert shared.startswith("before and after share 1 run (r2)")


# ---- 6. buckets in elements, time per step; the one-column ZeRO grid ----


def buckets_rows(buckets=(100_000, 1_000_000, 4_000_000), dtype="bfloat16", itemsize=2):
    rows = []
    for rep in range(2):
        for i, elems in enumerate(buckets):
            r = make_rows(collectives=("all_reduce",), sizes=(16 << 20,), placements=(True,), repetitions=1,
                          dtype=dtype, seed=rep + i)[0]
            r.update(workload="buckets", bucket_bytes=elems * itemsize, repetition=rep, n_collectives=8)
            rows.append(r)
    return rows


def test_buckets_are_drawn_against_bucket_size_in_elements(tmp_path):
    df = frame(buckets_rows(), tmp_path)
    fig = curveplot.build_figure(df)
    top = fig.axes[0]
    assert "vs bucket size" in fig._suptitle.get_text() and "message size" not in fig._suptitle.get_text()
    assert "in elements" in top.get_xlabel()
    labels = [t.get_text() for t in top.get_xticklabels()]
    assert labels == ["1e5\n(195.3 KiB)", "1e6\n(1.9 MiB)", "4e6\n(7.6 MiB)"]
    timed = curveplot.build_figure(df, "time")
    assert timed.axes[0].get_ylabel() == "Time per step (µs)" and "Time per step" in timed._suptitle.get_text()
    assert "per operation" not in timed.axes[0].get_ylabel()
    assert "bucket size" in curveplot.curves_caption(fig)


def zero_rows(buckets=(500_000_000,)):
    rows = []
    for bucket in buckets:
        for stage in (0, 1, 2):
            r = make_rows(collectives=("all_reduce",), sizes=(32 << 20,), placements=(True,), repetitions=1,
                          dtype="bfloat16", seed=stage)[0]
            r.update(collective="zero_step", workload="zero", zero_stage=stage, bucket_bytes=bucket * 2,
                     n_collectives=3, time_us=1000.0 * (stage + 1) * (1 + bucket / 1e9))
            rows.append(r)
    return rows


def _boxes(ax):
    return [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]


def test_a_one_column_zero_grid_boxes_no_cell(tmp_path):
    fig = zerogrid.build_figure(frame(zero_rows(), tmp_path, "one.parquet"))
    assert _boxes(fig.axes[0]) == [] and "box" not in fig.axes[0].get_title("left")
    fig = zerogrid.build_figure(frame(zero_rows((1_000_000, 500_000_000)), tmp_path, "two.parquet"))
    assert len(_boxes(fig.axes[0])) == 3 and "box: shortest step" in fig.axes[0].get_title("left")
