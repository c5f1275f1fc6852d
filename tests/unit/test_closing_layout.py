"""The sweep's closing lines after a layout run (issue #38): average and peak busbw per collective
count the groups' concurrent rows only, a line per group dimension, never the --solo rows."""

from __future__ import annotations

from commbench.core.options import RunOptions
from commbench.harness.closing import closing_lines


def row(dim: str | None, index: int | None, concurrent: bool | None, size: int, busbw: float) -> dict:
    return {"workload": "sweep", "collective": "all_reduce", "dtype": "float", "op": "sum", "root": -1,
            "size_bytes": size, "count": size // 4, "in_place": True, "repetition": 0, "wrong": 0,
            "time_us": 100.0, "algbw_GBps": busbw, "busbw_GBps": busbw, "group_dim": dim, "group_index": index,
            "group_ranks": {0: "0,2", 1: "1,3"}.get(index or 0) if dim else None, "concurrent": concurrent}


def bandwidth(lines: list[str]) -> list[str]:
    return [line for line in lines if "avg bus bandwidth" in line]


def test_solo_rows_are_left_out_and_each_dimension_has_its_line():
    rows = []
    for size in (65536, 131072):
        for index in (0, 1):
            rows.append(row("dp", index, True, size, 1.0 + index))  # concurrent: 1 and 2 GB/s
            rows.append(row("dp", index, False, size, 10.0))  # alone: far faster, must not count
            rows.append(row("tp", index, True, size, 4.0))
    lines = bandwidth(closing_lines(rows, RunOptions(workload="sweep")))
    assert lines == [
        "# all_reduce (dp, concurrent groups)  avg bus bandwidth 1.50 GB/s, peak 2.00 GB/s at 64 KiB, dp1 [1,3] "
        "(64 KiB..128 KiB: 4 points of 2 groups)",
        "# all_reduce (tp, concurrent groups)  avg bus bandwidth 4.00 GB/s, peak 4.00 GB/s at 64 KiB, tp0 [0,2] "
        "(64 KiB..128 KiB: 4 points of 2 groups)"], lines


def test_a_plain_sweep_s_lines_are_unchanged():
    rows = [row(None, None, None, 65536, 1.0), row(None, None, None, 131072, 3.0)]
    lines = closing_lines(rows, RunOptions(workload="sweep"))
    assert bandwidth(lines) == ["# all_reduce  avg bus bandwidth 2.00 GB/s, peak 3.00 GB/s at 128 KiB "
                                "(64 KiB..128 KiB: 2 points)"]
    assert "# Avg bus bandwidth    : 2.0000 GB/s" in lines


def test_the_precision_line_of_a_layout_run_says_groups_do_not_stop_and_marks_nothing():
    rows = [{**row("dp", i, True, 65536, 1.0), "samples_us": [100.0, 300.0, 100.0, 300.0, 200.0], "iters": 5,
             "stop": "time_budget"} for i in (0, 1)]
    plan = RunOptions(workload="sweep", iters=None, precision=0.03)
    lines = [line for line in closing_lines(rows, plan) if "Precision" in line or "±" in line]
    assert lines[0].startswith("# Precision: 0 of 2 points reached 3%"), lines
    assert lines[0].endswith("(parallel groups do not stop at the target: each fills the time budget, "
                             "docs/LAYOUTS.md)"), lines
    assert lines[1].startswith("# Worst: "), lines  # the live line of a layout run has no ±N% mark to explain
