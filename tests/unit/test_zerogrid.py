"""The ZeRO stage x bucket grid: medians per cell, the shortest step per stage, the heat map in
`plot` (alone, or beside the curves) and the section in `report` (HTML and Markdown).
Synthetic `commbench zero` rows through the real results module; no processes."""

from __future__ import annotations

import numpy as np
import pytest

from commbench.analysis.report import plot
from commbench.analysis.report import report
from commbench.analysis.tune import zerogrid
from commbench.cli.app import main
from commbench.core.errors import BadInput

from unit.synthetic import frame, make_rows, write

PNG = b"\x89PNG\r\n\x1a\n"


def run(argv) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code
BUCKETS = (10**6, 5 * 10**7, 5 * 10**8)
# step time (ms) per (stage, bucket): stage 1 best at 5e8, stage 3 best at 5e7
TIMES = {(0, BUCKETS[0]): 60, (0, BUCKETS[1]): 61, (0, BUCKETS[2]): 59,
         (1, BUCKETS[0]): 240, (1, BUCKETS[1]): 150, (1, BUCKETS[2]): 130,
         (3, BUCKETS[0]): 310, (3, BUCKETS[1]): 160, (3, BUCKETS[2]): 190}


def zero_rows(run_id="20260101-000000-zzzzzz", label="zero-grid", repetitions=2, skip=()):
    base = make_rows(collectives=("all_reduce",), sizes=(1 << 20,), placements=(True,), repetitions=1,
                     run_id=run_id, label=label)[0]
    rows = []
    for rep in range(repetitions):
        for (stage, bucket), ms in TIMES.items():
            if (stage, bucket) in skip:
                continue
            t_us = ms * 1e3 * (1 + 0.02 * rep)
            moved = 48 << 20
            rows.append({**base, "collective": "zero_step", "dtype": "bfloat16", "workload": "zero",
                         "zero_stage": stage, "bucket_bytes": bucket * 2, "size_bytes": 32 << 20,
                         "repetition": rep, "time_us": t_us, "algbw_GBps": (32 << 20) / t_us / 1e3,
                         "busbw_GBps": moved / t_us / 1e3, "n_collectives": max(1, (16 << 20) // bucket),
                         "bytes_per_rank": moved, "wrong": None})
    return rows


def test_grid_holds_medians_per_stage_and_bucket(tmp_path):
    [g] = zerogrid.grids(frame(zero_rows(), tmp_path))
    assert g.stages == [0, 1, 3] and g.bucket_elems == list(BUCKETS) and g.bucket_bytes == [2 * b for b in BUCKETS]
    assert g.time_ms[1, 0] == pytest.approx(240 * 1.01)  # median of 240 and 244.8
    assert g.busbw[2, 1] == pytest.approx(np.median([(48 << 20) / (160e3 * f) / 1e3 for f in (1, 1.02)]))
    assert g.reps.tolist() == [[2, 2, 2]] * 3
    assert g.best_bucket() == {0: 5 * 10**8, 1: 5 * 10**8, 3: 5 * 10**7}


def test_a_run_of_several_accumulations_or_settings_has_a_grid_for_each(tmp_path):
    """--grad-accum 1,4 (and --env axes): a cell's median never mixes two of them (it did: 4
    repetitions of a mix were one cell)."""
    rows = [{**r, "grad_accum": g, "time_us": r["time_us"] * g} for g in (1, 4) for r in zero_rows()]
    one, four = zerogrid.grids(frame(rows, tmp_path))
    assert (one.name, four.name) == ("zero-grid [GAS 1]", "zero-grid [GAS 4]")
    assert one.reps.tolist() == four.reps.tolist() == [[2, 2, 2]] * 3
    assert one.time_ms[1, 0] == pytest.approx(240 * 1.01) and four.time_ms[1, 0] == pytest.approx(4 * 240 * 1.01)
    settings = [{**r, "settings": s} for s in ("NCCL_ALGO=Ring", "NCCL_ALGO=Tree") for r in zero_rows()]
    assert [g.name for g in zerogrid.grids(frame(settings, tmp_path / "s"))] == [
        "zero-grid [NCCL_ALGO=Ring]", "zero-grid [NCCL_ALGO=Tree]"]
    [plain] = zerogrid.grids(frame([{**r, "grad_accum": 1} for r in zero_rows()], tmp_path / "p"))
    assert plain.name == "zero-grid"  # one accumulation: nothing to tell apart


def test_a_cell_not_measured_is_nan_and_never_best(tmp_path):
    [g] = zerogrid.grids(frame(zero_rows(skip={(3, BUCKETS[1])}), tmp_path))
    assert np.isnan(g.time_ms[2, 1])
    assert g.best_bucket()[3] == 5 * 10**8
    assert not any(r[0] == "3" and r[1] == "5e7" for r in zerogrid.table_rows(g))


def test_table_marks_the_shortest_step_of_each_stage(tmp_path):
    [g] = zerogrid.grids(frame(zero_rows(), tmp_path))
    rows = zerogrid.table_rows(g)
    assert [(r[0], r[1]) for r in rows if r[-1] == "shortest"] == [("0", "5e8"), ("1", "5e8"), ("3", "5e7")]
    assert rows[0][:3] == ["0", "1e6", "1.9 MiB"]


def test_no_zero_rows_is_bad_input_naming_the_command(tmp_path):
    with pytest.raises(BadInput, match="commbench zero --bucket-size"):
        zerogrid.grids(frame(make_rows(), tmp_path))


def test_heat_map_annotates_every_cell_and_boxes_the_best(tmp_path):
    fig = zerogrid.build_figure(frame(zero_rows(), tmp_path))
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 9 and "131.3 ms\n0.383 GB/s" in texts
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 0", "stage 1", "stage 3"]
    assert len(ax.patches) == 3  # one box per stage


def test_plot_of_zero_rows_alone_is_the_heat_map(tmp_path):
    res = write(tmp_path / "z.parquet", zero_rows())
    assert run(["plot", str(res)]) == 0
    assert (tmp_path / "z.png").read_bytes().startswith(PNG) and not (tmp_path / "z-zero.png").exists()


def test_plot_of_curves_and_zero_rows_writes_the_heat_map_beside(tmp_path, capsys):
    res = write(tmp_path / "mixed.parquet", make_rows(repetitions=1) + zero_rows())
    assert run(["plot", str(res)]) == 0
    assert (tmp_path / "mixed.png").exists() and (tmp_path / "mixed-zero.png").read_bytes().startswith(PNG)
    assert "mixed-zero.png" in capsys.readouterr().out
    curves, grid = plot.split_zero(frame(make_rows(repetitions=1) + zero_rows(), tmp_path / "x"))
    assert set(curves.workload) == {"sweep"} and set(grid.workload) == {"zero"}


def test_plot_refuses_before_drawing_when_the_heat_map_file_exists(tmp_path, capsys):
    res = write(tmp_path / "mixed.parquet", make_rows(repetitions=1) + zero_rows())
    (tmp_path / "mixed-zero.png").write_bytes(b"keep")
    assert run(["plot", str(res)]) == 2
    assert "mixed-zero.png already exists" in capsys.readouterr().err
    assert not (tmp_path / "mixed.png").exists() and (tmp_path / "mixed-zero.png").read_bytes() == b"keep"


def test_html_report_has_the_zero_section_and_no_curves_for_zero_only(tmp_path):
    page = report.build_html(frame(zero_rows(), tmp_path))
    assert 'id="zero"' in page and "ZeRO stages x bucket sizes" in page and "data:image/png;base64," in page
    assert 'id="curves"' not in page and 'id="peaks"' not in page and 'id="runs"' in page
    assert page.count("<td>shortest</td>") == 3


def test_html_report_of_mixed_results_has_both(tmp_path):
    page = report.build_html(frame(make_rows(repetitions=1) + zero_rows(), tmp_path))
    assert 'id="zero"' in page and 'id="curves"' in page
    assert "zero_step" not in page.split('id="peaks"')[1].split("</section>")[0]


def test_markdown_report_writes_the_heat_map_png(tmp_path):
    res = write(tmp_path / "z.parquet", zero_rows())
    assert run(["report", str(res), "--out", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "![ZeRO stage x bucket size heat map](r-zero.png)" in text and "## Bandwidth" not in text
    assert (tmp_path / "r-zero.png").read_bytes().startswith(PNG) and not (tmp_path / "r.png").exists()


@pytest.mark.parametrize("argv, words", [
    (["zero", "--bucket-size", ","], ["--bucket-size is empty", "1e6,5e7,5e8"]),
    (["zero", "--bucket-size", "0"], ["--bucket-size", "out of range"]),
    (["zero", "--bucket-size", "lots"], ["--bucket-size", "not a count"]),
    (["zero", "--engine", "deepspeed", "--bucket-size", "1e6"], ["--bucket-size", "--ds-config"]),
])
def test_zero_bucket_size_bad_input_is_one_line_exit_2(argv, words, capsys):
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
