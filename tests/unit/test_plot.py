"""commbench.analysis.report.plot: the figure's content (lines, ticks, titles, bands, reference line), line-rate
parsing, saving (PNG/SVG, never overwriting) and the `plot` command's bad input. Synthetic rows
written and read through the real results module; no processes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib.colors as mcolors
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from commbench.analysis.report import plot
from commbench.analysis.curves import curveplot
from commbench.cli.app import main
from commbench.core.errors import BadInput

from unit.synthetic import frame, make_rows, write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZES = [2 ** k for k in range(3, 35)]  # 8 B .. 16 GiB


def labelled_lines(ax):
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def legend_texts(fig):
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Run A: 2 collectives x 2 placements, 2 repetitions, MTU 1500. Run B: all_reduce in place, MTU 9000."""
    tmp = tmp_path_factory.mktemp("plot")
    rows = make_rows(collectives=("all_reduce", "all_gather"), sizes=SIZES, label="mtu1500", mtu=1500)
    rows += make_rows(collectives=("all_reduce",), sizes=SIZES, placements=(True,), label="mtu9000",
                      run_id="20250102-000000-bbbbbb", mtu=9000)
    return frame(rows, tmp)


@pytest.fixture(scope="module")
def figure(two_runs):
    return curveplot.build_figure(two_runs, "busbw", curveplot.parse_line_rate("400Gbps"), "400Gbps")


def test_one_line_per_collective_placement_and_run(figure):
    top, bottom = figure.axes[:2]
    names = sorted(ln.get_label() for ln in labelled_lines(top))
    assert names == sorted([
        "all_reduce in-place [mtu1500]", "all_reduce out-of-place [mtu1500]",
        "all_gather in-place [mtu1500]", "all_gather out-of-place [mtu1500]",
        "all_reduce in-place [mtu9000]"])
    for name in names:
        assert name in legend_texts(figure)
    assert "line rate 400Gbps" in legend_texts(figure)


def test_same_collective_same_colour_and_variants_differ_by_style(figure):
    lines = {ln.get_label(): ln for ln in labelled_lines(figure.axes[0])}
    ar = [ln for name, ln in lines.items() if name.startswith("all_reduce")]
    assert len({mcolors.to_hex(ln.get_color()) for ln in ar}) == 1
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in ar}) == 3
    assert mcolors.to_hex(lines["all_gather in-place [mtu1500]"].get_color()) != mcolors.to_hex(ar[0].get_color())


def test_x_axis_is_log2_with_human_size_labels_from_8_B_to_16_GiB(figure):
    top = figure.axes[0]
    assert top.get_xscale() == "log"
    labels = [t.get_text() for t in top.get_xticklabels()]
    for want in ("16 B", "1 KiB", "1 MiB", "1 GiB", "16 GiB"):
        assert want in labels
    assert len(labels) <= 16
    lo, hi = top.get_xlim()
    assert lo <= 8 and hi >= 16 * 2 ** 30
    assert top.get_xlabel() == "Message size"


def test_size_ticks_always_label_the_binary_thousands():
    for lo, hi in ((8, 2 ** 34), (1024, 2 ** 20), (8, 64 * 1024), (2 ** 20, 2 ** 31)):
        major, labels, minor = curveplot.size_ticks(lo, hi)
        assert all(np.log2(m).is_integer() for m in major)
        assert len(labels) <= 16 and minor[0] <= lo and minor[-1] >= hi
        for k in (10, 20, 30):
            if lo <= 2 ** k <= hi:
                assert 2 ** k in major
    assert curveplot.size_ticks(1024, 1024)[1] == ["512 B", "1 KiB", "2 KiB"]  # one size still gets context


def test_median_over_repetitions_and_a_min_max_band(two_runs, figure):
    top = figure.axes[0]
    line = next(ln for ln in labelled_lines(top) if ln.get_label() == "all_gather out-of-place [mtu1500]")
    d = two_runs[(two_runs.collective == "all_gather") & ~two_runs.in_place & (two_runs.label == "mtu1500")]
    want = d.groupby("size_bytes")["busbw_GBps"].median()
    np.testing.assert_allclose(line.get_xdata(), want.index.to_numpy(float))
    np.testing.assert_allclose(line.get_ydata(), want.to_numpy())
    assert d.groupby("size_bytes")["busbw_GBps"].nunique().max() == 2  # the reps do differ
    bands = [c for c in top.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 5  # one band per line: every line has 2 repetitions


def test_no_band_with_one_repetition(tmp_path):
    df = frame(make_rows(repetitions=1), tmp_path)
    fig = curveplot.build_figure(df)
    assert not [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert "min–max over repetitions" not in legend_texts(fig)


def test_latency_panel_shows_small_sizes_on_a_log_scale(figure):
    bottom = figure.axes[1]
    assert bottom.get_yscale() == "log"
    assert "64 KiB" in bottom.get_title(loc="left")
    for ln in labelled_lines(bottom):
        assert max(ln.get_xdata()) <= 64 * 1024
    assert len(labelled_lines(bottom)) == 5
    assert "Time" in bottom.get_ylabel()


def test_no_latency_panel_when_there_are_no_small_sizes(tmp_path):
    df = frame(make_rows(sizes=(1 << 20, 1 << 24)), tmp_path)
    fig = curveplot.build_figure(df)
    assert len(fig.axes) == 1 and "Bus bandwidth" in fig.axes[0].get_ylabel()


def test_titles_say_what_ran_where(figure):
    title = figure.axes[0].get_title(loc="left")
    for want in ("16 ranks", "2 nodes", "node[01-02]", "nccl", "NVIDIA H100", "MTU 1500", "MTU 9000", "eth0",
                 "ethernet", "400 Gbit/s link", "mtu1500", "mtu9000"):
        assert want in title
    suptitle = figure._suptitle.get_text()
    assert "Bus bandwidth" in suptitle and "all_reduce" in suptitle and "all_gather" in suptitle


def test_line_rate_is_a_horizontal_line_at_the_rate(figure):
    flat = [ln for ln in figure.axes[0].get_lines()
            if len(set(np.atleast_1d(ln.get_ydata()))) == 1 and np.atleast_1d(ln.get_ydata())[0] == 50.0]
    assert flat, "no line at 50 GB/s"
    assert figure.axes[0].get_ylim()[1] >= 50
    assert any("50 GB/s" in t.get_text() for t in figure.axes[0].texts)


@pytest.mark.parametrize("text, gbytes", [
    ("400Gbps", 50.0), ("400 Gb/s", 50.0), ("400Gbit/s", 50.0), ("100000Mbps", 12.5), ("50GB/s", 50.0),
    ("50 GBps", 50.0), ("1.6Tbps", 200.0), ("25gbps", 3.125), ("800 MB/s", 0.8), ("1e3Mbps", 0.125),
])
def test_line_rate_units(text, gbytes):
    assert curveplot.parse_line_rate(text) == pytest.approx(gbytes)


@pytest.mark.parametrize("text", ["", "400", "fast", "-5Gbps", "0Gbps", "400Gbpsx", "400 GiB/s", "nanGbps",
                                  "1e400Gbps", "400GBPS", "Gbps", "4 00Gbps"])
def test_bad_line_rates_are_bad_input_naming_the_value(text):
    with pytest.raises(BadInput, match="--line-rate") as err:
        curveplot.parse_line_rate(text)
    assert repr(text) in str(err.value)


def test_line_rate_with_the_time_metric_is_refused(two_runs):
    with pytest.raises(BadInput, match="--metric busbw or algbw"):
        curveplot.build_figure(two_runs, "time", 50.0)


def test_time_metric_uses_a_log_axis_and_time_values(two_runs):
    fig = curveplot.build_figure(two_runs, "time")
    top = fig.axes[0]
    assert top.get_yscale() == "log" and "Time" in top.get_ylabel()
    line = next(ln for ln in labelled_lines(top) if ln.get_label() == "all_reduce in-place [mtu9000]")
    d = two_runs[(two_runs.collective == "all_reduce") & (two_runs.label == "mtu9000")]
    np.testing.assert_allclose(line.get_ydata(), d.groupby("size_bytes")["time_us"].median().to_numpy())


def test_wrong_results_are_marked(tmp_path):
    fig = curveplot.build_figure(frame(make_rows(wrong=7), tmp_path))
    crosses = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "x"]
    assert crosses and all(max(ln.get_xdata()) == 1 << 24 for ln in crosses)
    assert "wrong results (#wrong > 0)" in legend_texts(fig)


def test_untrusted_label_text_cannot_break_or_restyle_the_figure(tmp_path):
    label = r"<script>alert(1)</script> $\frac{ 5$ cost"
    fig = curveplot.build_figure(frame(make_rows(label=label), tmp_path))
    assert plot.figure_bytes(fig, "png").startswith(PNG_MAGIC)  # drawn without a mathtext error
    assert any(r"\$\frac{ 5\$ cost" in t for t in [fig.axes[0].get_title(loc="left")])
    # the control: the same text handed to matplotlib raw does fail to draw
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    raw = Figure()
    FigureCanvasAgg(raw)
    raw.subplots().set_title(label)
    with pytest.raises(ValueError):
        plot.figure_bytes(raw, "png")


def test_one_collective_gets_a_colour_per_variant(tmp_path):
    df = frame(make_rows(collectives=("all_reduce",), placements=(True, False)), tmp_path)
    lines = labelled_lines(curveplot.build_figure(df).axes[0])
    assert len({mcolors.to_hex(ln.get_color()) for ln in lines}) == 2


@pytest.mark.failure(row="output-already-exists-every-output")
def test_save_png_and_svg_and_never_overwrite(tmp_path, figure):
    png = plot.save_figure(figure, tmp_path / "f.png")
    assert png.read_bytes().startswith(PNG_MAGIC)
    svg = plot.save_figure(figure, tmp_path / "f.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    before = png.read_bytes()
    with pytest.raises(BadInput, match=str(png)):
        plot.save_figure(figure, png)
    assert png.read_bytes() == before
    with pytest.raises(BadInput, match=r"\.png or \.svg"):
        plot.save_figure(figure, tmp_path / "f.jpg")


def test_plot_results_default_out_is_next_to_the_first_result(tmp_path):
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    [out] = plot.plot_results([res])
    assert out == tmp_path / "run.png" and out.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(BadInput, match="run.png already exists"):
        plot.plot_results([res])
    assert plot.default_out(tmp_path) == tmp_path.parent / (tmp_path.name + ".png")


def test_empty_results_are_bad_input(tmp_path):
    from commbench.core.results import ResultWriter

    ResultWriter(tmp_path / "empty.parquet").create()
    with pytest.raises(BadInput, match="no points"):
        plot.plot_results([tmp_path / "empty.parquet"], out=tmp_path / "e.png")
    assert not (tmp_path / "e.png").exists()


def test_plot_comparison_overlays_before_dashed_after_solid(tmp_path):
    before = frame(make_rows(label="before", mtu=1500, speed_gbps=200), tmp_path, "b.parquet")
    after = frame(make_rows(label="after", run_id="20250103-000000-cccccc", mtu=9000), tmp_path, "a.parquet")
    fig = curveplot.build_comparison_figure(before, after)
    lines = labelled_lines(fig.axes[0])
    assert len(lines) == 8  # 2 collectives x 2 placements x 2 sides
    for ln in lines:
        assert ln.get_linestyle() == ("--" if ln.get_label().endswith("[before]") else "-")
    colours = {}
    for ln in lines:
        colours.setdefault(ln.get_label().split()[0], set()).add(mcolors.to_hex(ln.get_color()))
    assert all(len(c) == 1 for c in colours.values()) and len(colours) == 2
    title = fig.axes[0].get_title(loc="left")
    assert "before: " in title and "MTU 1500" in title and "after: " in title and "MTU 9000" in title
    assert {"before (dashed)", "after (solid)"} <= set(legend_texts(fig))
    out = plot.plot_comparison(before, after, tmp_path / "cmp.svg")
    assert ET.parse(out).getroot().tag.endswith("svg")
    with pytest.raises(BadInput, match="already exists"):
        plot.plot_comparison(before, after, out)


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code, capsys.readouterr()


def test_plot_command_writes_the_file(tmp_path, capsys):
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    code, out = run_cli(["plot", str(res), "--out", str(tmp_path / "p.svg"), "--metric", "algbw",
                         "--line-rate", "100Gbps"], capsys)
    assert code == 0, out.err
    assert "p.svg" in out.out and ET.parse(tmp_path / "p.svg").getroot().tag.endswith("svg")


@pytest.mark.parametrize("extra, message", [
    (["--line-rate", "400"], "--line-rate '400' is not a rate"),
    (["--out", "{tmp}/p.gif"], "must end in .png or .svg"),
    (["--out", "{tmp}/run.parquet"], "must end in .png or .svg"),
    (["--metric", "speed"], "'speed' is not one of"),
])
def test_plot_command_bad_input_is_one_line_exit_2(tmp_path, capsys, extra, message):
    res = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    code, out = run_cli(["plot", str(res)] + [e.format(tmp=tmp_path) for e in extra], capsys)
    assert code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.err


# ---- settings (--env NAME=v1|v2): one line per setting ----


def settings_rows(settings=("GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"), slow=0.25, **kw):
    """One run measured once per setting (as sweep --env runs its grid): the later settings slower."""
    out = []
    for i, setting in enumerate(settings):
        for r in make_rows(label="", seed=i, **kw):
            r["settings"] = setting
            if i:
                r["busbw_GBps"] *= slow
                r["algbw_GBps"] *= slow
                r["time_us"] /= slow
            out.append(r)
    return out


def test_two_settings_draw_two_lines_per_collective_named_by_setting(tmp_path, capsys):
    res = write(tmp_path / "env.parquet", settings_rows(placements=(False,)))
    code, out = run_cli(["plot", str(res), "--out", str(tmp_path / "env.png")], capsys)
    assert code == 0, out.err
    assert (tmp_path / "env.png").read_bytes()[:8] == PNG_MAGIC
    fig = curveplot.build_figure(frame(settings_rows(placements=(False,)), tmp_path, "again.parquet"))
    top = fig.axes[0]
    names = sorted(ln.get_label() for ln in labelled_lines(top))
    assert names == ["all_gather GLOO_SOCKET_IFNAME=eth0", "all_gather GLOO_SOCKET_IFNAME=eth1",
                     "all_reduce GLOO_SOCKET_IFNAME=eth0", "all_reduce GLOO_SOCKET_IFNAME=eth1"]
    assert set(names) <= set(legend_texts(fig))
    lines = {ln.get_label(): ln for ln in labelled_lines(top)}
    fast, slow = (lines[f"all_reduce GLOO_SOCKET_IFNAME={i}"].get_ydata() for i in ("eth0", "eth1"))
    # each line is its own setting's median: eth1 was measured at a quarter of eth0's busbw
    assert np.allclose(np.asarray(slow) / np.asarray(fast), 0.25, rtol=0.2)
    # the same collective keeps its colour; its settings differ in line style and marker
    ar = [ln for name, ln in lines.items() if name.startswith("all_reduce")]
    assert len({mcolors.to_hex(ln.get_color()) for ln in ar}) == 1
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in ar}) == 2
    # the latency panel splits the same way
    assert len(labelled_lines(fig.axes[1])) == 4


def test_settings_and_runs_both_in_the_legend(tmp_path):
    rows = settings_rows(collectives=("all_reduce",), placements=(True,))
    for r in rows:
        r["label"] = "a"
    other = settings_rows(collectives=("all_reduce",), placements=(True,), run_id="20250102-000000-bbbbbb")
    for r in other:
        r["label"] = "b"
    fig = curveplot.build_figure(frame(rows + other, tmp_path))
    assert sorted(ln.get_label() for ln in labelled_lines(fig.axes[0])) == [
        "all_reduce GLOO_SOCKET_IFNAME=eth0 [a]", "all_reduce GLOO_SOCKET_IFNAME=eth0 [b]",
        "all_reduce GLOO_SOCKET_IFNAME=eth1 [a]", "all_reduce GLOO_SOCKET_IFNAME=eth1 [b]"]


def test_a_file_without_a_settings_column_draws_as_before(tmp_path):
    """Rows of an older file (no settings column; an --mtu axis only in the mtu column): one line
    per collective and placement, named as before; rows with one setting draw the same."""
    rows = make_rows(collectives=("all_reduce",), label="", mtu=1500) + make_rows(
        collectives=("all_reduce",), label="", mtu=9000, seed=2)
    old = frame(rows, tmp_path, "old.parquet")
    assert "settings" not in old.columns or old["settings"].isna().all()
    old = old.drop(columns=["settings"], errors="ignore")
    names = sorted(ln.get_label() for ln in labelled_lines(curveplot.build_figure(old).axes[0]))
    assert names == ["all_reduce in-place", "all_reduce out-of-place"]
    for r in rows:
        r["settings"] = "MTU=9000"
    one = frame(rows, tmp_path, "one.parquet")
    assert sorted(ln.get_label() for ln in labelled_lines(curveplot.build_figure(one).axes[0])) == names


def test_a_setting_beside_rows_without_one_is_named(tmp_path):
    rows = settings_rows(settings=("NCCL_ALGO=Ring NCCL_PROTO=LL",), collectives=("all_reduce",), placements=(True,))
    rows += make_rows(collectives=("all_reduce",), placements=(True,), label="")
    names = sorted(ln.get_label() for ln in labelled_lines(curveplot.build_figure(frame(rows, tmp_path)).axes[0]))
    assert names == ["all_reduce (no setting)", "all_reduce NCCL_ALGO=Ring NCCL_PROTO=LL"]


def test_overlay_keeps_settings_apart(tmp_path):
    before = frame(settings_rows(collectives=("all_reduce",), placements=(True,)), tmp_path, "b.parquet")
    after = frame(settings_rows(collectives=("all_reduce",), placements=(True,), slow=0.5), tmp_path, "a.parquet")
    fig = curveplot.build_comparison_figure(before, after)
    assert sorted(ln.get_label() for ln in labelled_lines(fig.axes[0])) == [
        "all_reduce GLOO_SOCKET_IFNAME=eth0 [after]", "all_reduce GLOO_SOCKET_IFNAME=eth0 [before]",
        "all_reduce GLOO_SOCKET_IFNAME=eth1 [after]", "all_reduce GLOO_SOCKET_IFNAME=eth1 [before]"]
    one = [ln for ln in labelled_lines(fig.axes[0]) if "eth0" in ln.get_label()]
    other = [ln for ln in labelled_lines(fig.axes[0]) if "eth1" in ln.get_label()]
    # one collective: its settings differ in colour as well as marker
    assert {mcolors.to_hex(ln.get_color()) for ln in one}.isdisjoint(mcolors.to_hex(ln.get_color()) for ln in other)
