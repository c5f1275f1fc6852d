"""The sweep's printed output (issue #19): help texts, 3 significant digits, the one-placement
table, the precision mark and tally, per-collective busbw with units, the median table after -R,
and reduce_scatter's gap to all_reduce (sweep and report). Rows here are built by hand; the
integration test tests/integration/test_sweep_output.py reads the same from real gloo ranks."""

from __future__ import annotations

import random
import re

import click
import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli.app import cli
from commbench.core import runsummary
from commbench.core.options import RunOptions
from commbench.core.stats import median_ci_halfwidth
from commbench.harness.closing import closing_lines, median_table
from commbench.harness.console import Cell, format_cell, format_row, placement_header, precision_mark
from commbench.harness.timing import StopRule


# ---------------------------------------------------------------- help texts


def _helps(group: click.Group, parent: click.Context):
    """Every command's help page, as --help renders it (built, not invoked: `lab rsh` passes its
    arguments through)."""
    for name, command in group.commands.items():
        ctx = click.Context(command, info_name=name, parent=parent)
        yield name, command.get_help(ctx)
        if isinstance(command, click.Group):
            yield from _helps(command, ctx)


def test_no_help_text_prints_a_doubled_percent():
    root = click.Context(cli, info_name="commbench")
    pages = dict(_helps(cli, root))
    assert len(pages) >= 10
    for name, text in pages.items():
        assert "%%" not in text, name  # click does not %-format help: "95%%" printed as it stands
    for command in ("sweep", "buckets", "zero", "pairs"):
        assert "(95% CI half-width)" in " ".join(pages[command].split()), command
    runner = CliRunner()  # and --help itself
    assert "(95% CI half-width)" in " ".join(runner.invoke(cli, ["sweep", "--help"]).output.split())


# ---------------------------------------------------------------- the table


def test_bandwidths_have_three_significant_digits():
    line = format_cell(Cell(283.1, 0.1184, 0.1213, 0))
    assert line.split() == ["283.1", "0.118", "0.121", "0"]  # 2 decimals read "0.12 0.12"
    small = format_cell(Cell(1234.0, 0.000379, 0.0000267, None)).split()
    assert small[1:] == ["0.000379", "2.67e-05", "N/A"]
    assert format_cell(Cell(10.0, 181.32, 12.345, 0)).split()[1:3] == ["181", "12.3"]
    assert format_cell(Cell(0.4567, 1.0, 1.0, 0)).split()[0] == "0.457"  # times below 1 us: 3 digits


def test_a_collective_with_one_placement_prints_one_half():
    header = placement_header((True,))
    assert "in-place" in header and "out-of-place" not in header
    assert header.splitlines()[1].split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw",
                                               "busbw", "#wrong"]
    row = format_row(1024, 256, "float", "sum", -1, None, Cell(100.0, 0.01, 0.02, 0), (True,))
    assert "n/a" not in row and row.split()[5:] == ["100.0", "0.0100", "0.0200", "0"]
    both = format_row(1024, 256, "float", "sum", -1, Cell(1.5, 1, 1, 0), Cell(2.5, 2, 2, 0))
    assert both.split()[5] == "1.50" and both.split()[9] == "2.50"
    # the header's columns end where the row's do (right-aligned, nccl-tests' shape)
    assert len(placement_header((False, True)).splitlines()[1]) == len(both)
    assert len(header.splitlines()[1]) == len(row)


# ---------------------------------------------------------------- precision


def _until_stopped(rule: StopRule, draw) -> list[float]:
    """StopRule's own loop (Session._until_precise without ranks): seconds per iteration."""
    samples: list[float] = []
    batch = rule.next_batch(samples)
    while batch:
        samples += [draw() for _ in range(batch)]
        batch = rule.next_batch(samples)
    return samples


@pytest.mark.parametrize("case", ["steady", "heavy tail", "capped"])
def test_precision_says_what_the_stop_rule_decided(case):
    rng = random.Random(7)
    if case == "steady":  # 100 us +- 0.5%: reaches 3% at once
        rule, draw = StopRule(0.05, 10, 2000, 0.03), lambda: 100e-6 * (1 + rng.uniform(-0.005, 0.005))
    elif case == "heavy tail":  # the 64 B point: 283..7934 us, stops on the budget
        rule, draw = StopRule(0.05, 10, 2000, 0.03), lambda: rng.choice([283e-6, 400e-6, 7934e-6])
    else:  # noisy but fast: stops at --max-iters 40
        rule, draw = StopRule(10.0, 10, 40, 0.001), lambda: 100e-6 * rng.uniform(0.5, 2.0)
    s = _until_stopped(rule, draw)
    p = runsummary.point_precision([v * 1e6 for v in s], len(s), rule.precision, rule.max_iters)
    assert p.halfwidth == pytest.approx(median_ci_halfwidth(s))
    expected = {"steady": runsummary.REACHED, "heavy tail": runsummary.TIME_BUDGET,
                "capped": runsummary.MAX_ITERS}[case]
    assert p.why == expected, (case, len(s), p)
    if case == "heavy tail":
        assert sum(s) >= rule.time_budget and len(s) < 60 and p.halfwidth > 0.03
    if case == "capped":
        assert len(s) == 40


def _row(collective="all_reduce", size=1024, in_place=True, rep=0, time_us=100.0, busbw=1.0, samples=None,
         iters=None, **extra) -> dict:
    samples = samples if samples is not None else [time_us] * 20
    return {"collective": collective, "size_bytes": size, "count": size // 4, "in_place": in_place,
            "repetition": rep, "time_us": time_us, "algbw_GBps": busbw, "busbw_GBps": busbw, "dtype": "float32",
            "op": "sum", "root": -1, "workload": "sweep", "settings": None, "samples_us": samples,
            "iters": iters or len(samples), "wrong": 0, "backend": "gloo", **extra}


PLAN = {"iters": None, "precision": 0.03, "time_budget": 0.05, "max_iters": 2000}


def test_a_point_that_missed_its_precision_is_marked_and_counted():
    wide = [283.0, 300.0, 7934.0, 290.0, 5000.0, 310.0, 295.0, 6000.0, 288.0, 7000.0, 301.0, 4000.0, 299.0, 7500.0]
    rows = [_row(size=64, samples=wide, iters=14), _row(size=128), _row(size=256)]
    plan = RunOptions(precision=0.03, time_budget=0.05)
    mark = precision_mark(rows[:1], plan)
    assert mark == "  ~ >±100%"  # its times varied more than their median: capped (test_precision_display.py)
    assert precision_mark(rows[1:2], plan) == ""
    assert precision_mark(rows[:1], RunOptions(iters=14)) == ""  # a fixed count promised nothing
    lines = runsummary.precision_lines(rows, PLAN)
    assert lines[0].startswith("# Precision: 2 of 3 points reached 3% ")
    assert "1 stopped short: 1 at the time budget (0.05 s)" in lines[0]
    assert "all_reduce 64 B" in lines[1] and lines[1].startswith("# ~ ±N% in the table")
    assert runsummary.precision_lines(rows, {**PLAN, "iters": 14}) == []
    assert runsummary.precision_lines(rows, {**PLAN, "precision": 0}) == []
    capped = runsummary.precision_lines([_row(samples=wide, iters=14)], {**PLAN, "max_iters": 14})
    assert "1 at --max-iters 14" in capped[0]


# ---------------------------------------------------------------- busbw per collective, medians


def test_bus_bandwidth_is_per_collective_with_units():
    rows = [_row("all_reduce", s, True, r, busbw=b) for r in range(3) for s, b in ((1024, 0.10 + r * 0.01),
                                                                                  (2048, 0.20 - r * 0.01))]
    rows += [_row("all_gather", 1024, p, 0, busbw=b) for p, b in ((False, 0.05), (True, 0.07))]
    lines = runsummary.bandwidth_lines(runsummary.series_of(runsummary.point_medians(rows)))
    ar = next(line for line in lines if "all_reduce" in line)
    # avg over sizes of the medians over repetitions: (0.11 + 0.19) / 2
    assert re.search(r"avg bus bandwidth 0\.150 GB/s, peak 0\.190 GB/s ±0\.0% at 2 KiB \(1 KiB\.\.2 KiB: 2 points\)",
                     ar), ar
    ag = next(line for line in lines if "all_gather" in line)
    assert "avg bus bandwidth 0.0600 GB/s, peak 0.0700 GB/s ±0.0% at 1 KiB in place" in ag
    assert not any("Avg bus bandwidth" in line for line in lines)  # an average over two collectives means nothing
    one = runsummary.bandwidth_lines(runsummary.series_of(runsummary.point_medians(rows[:6])))
    assert one[-1] == "# Avg bus bandwidth    : 0.1500 GB/s"  # nccl-tests' line, with its unit


def test_repetitions_end_with_one_median_table():
    rows = [_row("all_reduce", 1024, True, r, time_us=t, busbw=1e3 / t) for r, t in enumerate((100.0, 300.0, 200.0))]
    rows += [_row("reduce_scatter", 1024, p, r, time_us=t, busbw=0.5e3 / t) for r, t in enumerate((400.0, 500.0, 600.0))
             for p in (False, True)]
    plan = RunOptions(repetitions=3, iters=20)
    lines = closing_lines(rows, plan)
    titles = [line for line in lines if line.startswith("# Median over 3 repetitions: ")]
    assert titles == ["# Median over 3 repetitions: all_reduce", "# Median over 3 repetitions: reduce_scatter"]
    i = lines.index(titles[0])
    assert "out-of-place" not in lines[i + 1] and "in-place" in lines[i + 1]
    ar = lines[i + 4].split()
    assert ar[:5] == ["1024", "256", "float", "sum", "-1"]
    assert ar[5:] == ["200.0", "100.0..300.0", "5.00", "5.00"]  # median time, range, median busbw
    rs = lines[lines.index(titles[1]) + 4].split()
    assert len(rs) == 5 + 2 * 4 and rs[5:7] == ["500.0", "400.0..600.0"]
    assert median_table(runsummary.series_of(runsummary.point_medians(rows)), 1) == []
    assert "# Out of bounds values : 0 OK" in lines


def test_a_zero_run_s_median_table_names_each_stage_and_accumulation_above_1():
    rows = [_row("zero_step", 64 << 20, True, r, time_us=t * g, busbw=1e3 / t, workload="zero", zero_stage=stage,
                 bucket_bytes=1 << 30, grad_accum=g)
            for g in (1, 4) for stage, base in ((1, 100.0), (3, 200.0))
            for r, t in enumerate((base, base * 3, base * 2))]
    lines = closing_lines(rows, RunOptions(workload="zero", repetitions=3, iters=20))
    i = lines.index("# Median over 3 repetitions: zero_step (zero)")
    body = lines[i + 3:i + 7]
    assert [line.split("  ")[1].strip() for line in body] == [
        "ZeRO-1, buckets of 1 GiB", "ZeRO-3, buckets of 1 GiB",
        "ZeRO-1, buckets of 1 GiB, GAS 4", "ZeRO-3, buckets of 1 GiB, GAS 4"]
    assert body[3].split()[-4:] == ["1600.0", "800.0..2400.0", "2.50", "2.50"]  # median, range, busbw
    peak = next(line for line in lines if "avg bus bandwidth" in line)
    assert "peak 5.00 GB/s ±0.0% at ZeRO-1, buckets of 1 GiB (ZeRO-1..3, buckets of 1 GiB, GAS 1..4: 4 points)" in peak
    pairs = closing_lines(rows, RunOptions(workload="pairs", iters=20))
    assert not any(line.startswith("# Median over") for line in pairs)


def test_links_between_ranks_of_one_host_are_points_of_their_own():
    """pairs on one host (local ranks): each direction is its own point, not one median of both."""
    rows = [_row("sendrecv", 64 << 20, False, 0, time_us=t, busbw=b, workload="pairs", src_host="vm", dst_host="vm",
                 src_rank=s, dst_rank=d) for s, d, t, b in ((0, 1, 100.0, 2.88), (1, 0, 110.0, 2.58))]
    closing = closing_lines(rows, RunOptions(workload="pairs", iters=20))
    line = next(text for text in closing if "avg bus bandwidth" in text)
    assert "avg bus bandwidth 2.73 GB/s, peak 2.88 GB/s ±0.0% at 64 MiB (64 MiB: 2 points)" in line
    one = next(line for line in closing_lines(rows[:1], RunOptions(workload="pairs", iters=20)) if "avg bus" in line)
    assert one.endswith("(64 MiB: 1 point)")


def test_out_of_bounds_counts_what_the_check_found():
    lines = closing_lines([_row(wrong=3), _row(size=2048, wrong=0)], RunOptions(iters=20))
    assert "# Out of bounds values : 3 FAILED" in lines
    lines = closing_lines([_row(wrong=None)], RunOptions(iters=20, check=False))
    assert "# Out of bounds values : not checked (--no-check)" in lines
    # with --check on (the default), a workload that checks nothing says so (issue #40: zero said only 'not checked')
    lines = closing_lines([_row(wrong=None, workload="zero")], RunOptions(workload="zero", iters=20))
    assert "# Out of bounds values : not checked (zero does not check its collectives' outputs; sweep does)" in lines


# ---------------------------------------------------------------- reduce_scatter vs all_reduce


def _gap_points(backend="gloo"):
    ar = {1 << 20: 0.02, 1 << 22: 0.10, 1 << 24: 0.12}
    rs = {1 << 20: 0.015, 1 << 22: 0.05, 1 << 24: 0.048}
    return ([{"collective": "all_reduce", "size_bytes": s, "busbw": b, "backend": backend} for s, b in ar.items()]
            + [{"collective": "reduce_scatter", "size_bytes": s, "busbw": b, "backend": backend}
               for s, b in rs.items()])


def test_reduce_scatter_gap_is_stated_where_both_were_measured():
    gap = runsummary.reduce_scatter_gap(_gap_points())
    # only the sizes where all_reduce reaches half its peak (4M, 16M): geomean of 0.5 and 0.4
    assert gap.sizes == (1 << 22, 1 << 24) and gap.ratio == pytest.approx((0.5 * 0.4) ** 0.5)
    text = gap.sentence()
    assert text.startswith("reduce_scatter busbw is 0.45x all_reduce's at 4 MiB..16 MiB (2 sizes")
    assert "all_reduce of the whole input" in text and "0.5x at best" in text
    nccl = runsummary.reduce_scatter_gap(_gap_points("nccl")).sentence()
    assert "gloo" not in nccl  # the reason is gloo's
    assert runsummary.reduce_scatter_gap([p for p in _gap_points() if p["collective"] == "all_reduce"]) is None
    # sizes rounded to the ranks (nccl-tests' counts) still pair up
    odd = [dict(p, size_bytes=p["size_bytes"] - 12) if p["collective"] == "reduce_scatter" else p
           for p in _gap_points()]
    assert runsummary.reduce_scatter_gap(odd).ratio == pytest.approx(gap.ratio)


def test_the_sweep_and_the_report_state_the_gap():
    rows = [_row(c, s, True, 0, busbw=b, time_us=100.0)
            for c, sizes in (("all_reduce", {1 << 22: 0.10, 1 << 24: 0.12}),
                             ("reduce_scatter", {1 << 22: 0.05, 1 << 24: 0.048}))
            for s, b in sizes.items()]
    lines = closing_lines(rows, RunOptions(iters=20))
    assert any(line.startswith("# reduce_scatter busbw is 0.45x all_reduce's") for line in lines)
    assert not any("reduce_scatter busbw is" in line for line in closing_lines(rows[:2], RunOptions(iters=20)))
    from commbench.analysis.curves.curvetables import collective_gaps

    df = pd.DataFrame([dict(r, run_id="r1", label="", samples_us=None) for r in rows])
    gaps = collective_gaps(df)
    assert len(gaps) == 1 and gaps[0].startswith("reduce_scatter busbw is 0.45x all_reduce's at 4 MiB..16 MiB")
    assert collective_gaps(df[df.collective == "all_reduce"]) == []
    two = pd.concat([df, df.assign(run_id="r2")])
    assert [g.count("run r") for g in collective_gaps(two)] == [1, 1]


def test_many_halfwidths_at_once_equal_the_one_at_a_time():
    rng = random.Random(3)
    samples = [[rng.lognormvariate(0, 1) for _ in range(rng.choice([1, 5, 6, 14, 60]))] for _ in range(300)]
    samples += [[1.0, float("nan")] * 4, [], None, [0.0] * 8]
    widths = runsummary.halfwidths(samples)
    for values, width in zip(samples[:300], widths):
        assert width == median_ci_halfwidth(values)  # exactly: the same order statistics
    assert [str(w) for w in widths[300:]] == ["nan", "nan", "nan", "inf"]


def test_the_html_and_markdown_reports_state_the_gap(tmp_path, undrawn):
    from commbench.analysis.report import markdown, report
    from unit.synthetic import frame, make_rows

    rows = make_rows(collectives=("all_reduce", "reduce_scatter"), sizes=(1 << 20, 1 << 22, 1 << 24))
    df = frame(rows, tmp_path)
    assert "reduce_scatter busbw is" in report.build_html(df, ["run.parquet"])
    md = markdown.build_markdown(df, None, ["run.parquet"])
    assert any(line.startswith("reduce_scatter busbw is") for line in md.splitlines())
    no_rs = frame(make_rows(collectives=("all_reduce",), sizes=(1 << 20,)), tmp_path, "x.parquet")
    assert "reduce_scatter busbw is" not in markdown.build_markdown(no_rs, None, ["run.parquet"])
