"""analysis/pointtable.py: large inputs aggregated by DuckDB over parquet give exactly what pandas gives.

Every test writes real result files (core/results.py's writer), runs the pandas path (read_results
and the frames) and the engine (forced, whatever the row count), and compares the answers whole:
compare's verdicts, p-values and notes, gate's entries, plot's lines and figure bytes, the report
page. Damaged files are refused with one line, as read_results refuses them.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from commbench.analysis.compare import compare
from commbench.analysis.compare import comparetext
from commbench.analysis.gate import gate
from commbench.analysis.gate.bands import parse_bands
from commbench.analysis.gate.bandsuggest import suggest
from commbench.analysis.points import pointtable, figurequery
from commbench.analysis.report import plot, report
from commbench.analysis.curves import curveplot
from commbench.core.errors import BadInput
from commbench.core.results import SCHEMA_VERSION, read_results

from unit.test_compare import curve, make_frame, write

BIG = (1 << 20, 4 << 20, 16 << 20)


def _pair(tmp_path, name, before_kw=None, after_kw=None):
    b = write(tmp_path / f"{name}-b.parquet", make_frame(seed=1, **(before_kw or {})))
    a = write(tmp_path / f"{name}-a.parquet", make_frame(busbw_of=curve(90.0), seed=2, **(after_kw or {})))
    return b, a


@pytest.mark.parametrize("reps,within,kw", [
    (7, False, {}),  # repetitions decide
    (3, False, {}),  # too few: inconclusive, needs -R
    (3, True, {}),  # the within-run test reads samples_us, from the engine only then
    (1, True, {}),  # one repetition a side
    (7, False, {"world": 1, "nnodes": 1}),  # one rank: algbw compared
    (2, True, {"world": 1, "nnodes": 1}),
])
def test_compare_in_the_engine_equals_pandas_exactly(tmp_path, reps, within, kw):
    b, a = _pair(tmp_path, "c", dict(reps=reps, **kw), dict(reps=reps, **kw))
    by_pandas = compare.compare_frames(read_results([b]), read_results([a]), allow_within_run=within)
    by_engine = compare.compare_paths([b], [a], allow_within_run=within)
    assert by_engine is not None and by_pandas.points
    assert by_engine.to_dict() == by_pandas.to_dict()
    assert comparetext.render_table(by_engine) == comparetext.render_table(by_pandas)


def test_compare_setup_differences_and_points_on_one_side(tmp_path):
    b = write(tmp_path / "b.parquet", make_frame(seed=1, mtu=1500, sizes=(1024, 1 << 20)))
    a = write(tmp_path / "a.parquet", make_frame(seed=2, mtu=9000, sizes=(1 << 20, 16 << 20),
                                                 torch_version="2.14.0"))
    by_pandas = compare.compare_frames(read_results([b]), read_results([a]))
    by_engine = compare.compare_paths([b], [a])
    assert by_engine.to_dict() == by_pandas.to_dict()
    assert by_engine.only_before and by_engine.only_after
    assert any("mtu" in d for d in by_engine.differences)
    assert any("torch_version" in w for w in by_engine.warnings)


def test_several_files_a_side_keep_their_row_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    for night in range(3):
        write(tmp_path / "b" / f"n{night}.parquet", make_frame(seed=10 + night, reps=3, run_id=f"r-b{night}"))
        write(tmp_path / "a" / f"n{night}.parquet", make_frame(seed=20 + night, reps=3, run_id=f"r-a{night}",
                                                               busbw_of=curve(95.0)))
    b, a = [tmp_path / "b"], [tmp_path / "a"]
    by_pandas = compare.compare_frames(read_results(b), read_results(a), allow_within_run=True)
    assert compare.compare_paths(b, a, allow_within_run=True).to_dict() == by_pandas.to_dict()


def test_gate_in_the_engine_equals_pandas_exactly(tmp_path):
    one = make_frame(seed=1, reps=5, sizes=BIG, settings=None)
    two = make_frame(seed=3, reps=4, sizes=BIG, dtype="bfloat16", settings="NCCL_ALGO=Ring")
    two.loc[3, "wrong"] = 2
    path = write(tmp_path / "run.parquet", pd.concat([one, two], ignore_index=True))
    text = suggest(make_frame(seed=9, reps=5, sizes=BIG), lower=0.03, upper=0.2, min_size=1 << 20,
                        system="x", max_band=0.5, allow_wide=True).text
    raw = yaml.safe_load(text)
    loose = dict(raw, entries=[{k: v for k, v in e.items() if k not in ("dtype", "settings")} for e in raw["entries"]])
    for bands in (parse_bands(text), parse_bands(yaml.safe_dump(loose))):
        by_pandas = gate.judge(bands, read_results([path]))
        by_engine = gate.gate_paths(bands, [path])
        assert by_engine.to_dict() == by_pandas.to_dict()
    assert any("rows of 2 settings match" in r.reason for r in by_engine.results)  # the loose bands match both


def test_plot_lines_and_figure_equal_pandas_exactly(tmp_path):
    b, a = _pair(tmp_path, "p", dict(reps=4, sizes=(8, 1024, 65536, 1 << 20)),
                 dict(reps=3, sizes=(8, 1024, 65536, 1 << 20), settings="MTU=9000", label="after"))
    paths = [b, a]
    df = read_results(paths, skip=plot.UNUSED_COLUMNS)
    q = figurequery.plot_source(paths, force=True)
    for column in ("busbw_GBps", "time_us"):
        mine = [curveplot.Line(**ln) for ln in figurequery.plot_lines(q, column)]
        theirs = curveplot.aggregate(df, column)
        assert [ln.key for ln in mine] == [ln.key for ln in theirs]
        for x, y in zip(mine, theirs):
            for name in ("sizes", "median", "lo", "hi", "reps", "wrong_sizes"):
                assert np.array_equal(getattr(x, name), getattr(y, name)), name
    drawn = curveplot.build_figure(figurequery.run_firsts(q, "busbw_GBps"),
                              lines_of=lambda c: [curveplot.Line(**ln) for ln in figurequery.plot_lines(q, c)])
    assert plot.figure_bytes(drawn) == plot.figure_bytes(curveplot.build_figure(df))


@pytest.mark.parametrize("with_baseline", [True, False])
def test_report_page_equals_pandas_exactly(tmp_path, monkeypatch, with_baseline):
    b, a = _pair(tmp_path, "r", dict(reps=5), dict(reps=5))
    pages = {}
    for rows in (0, 10 ** 12):  # always the engine, never
        monkeypatch.setattr(pointtable, "MIN_ROWS", rows)
        out = tmp_path / f"report-{rows}.html"
        report.write_report([a], [b] if with_baseline else None, out=out)
        pages[rows] = re.sub(r"Generated [^<]* by", "Generated by", out.read_text())
    assert pages[0] == pages[10 ** 12]
    assert ("Comparison with the baseline" in pages[0]) == with_baseline


def test_small_inputs_compare_in_the_one_aggregation_and_plot_with_pandas(tmp_path):
    b, a = _pair(tmp_path, "s")
    assert compare.compare_paths([b], [a]).points  # compare: one aggregation whatever the size
    assert figurequery.plot_source([b, a]) is None  # the figures: fewer than MIN_ROWS rows read by pandas (for now)


# ---- damaged input: refused with one line, as read_results refuses it ----


def test_a_file_that_is_not_parquet_is_refused(tmp_path):
    b, _ = _pair(tmp_path, "d")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(BadInput, match="junk.parquet is not a readable parquet file"):
        compare.compare_paths([b], [junk])


def test_a_newer_schema_version_is_refused(tmp_path):
    b, a = _pair(tmp_path, "v")
    table = pq.read_table(a)
    newer = table.set_column(table.schema.get_field_index("schema_version"), "schema_version",
                             pa.array([SCHEMA_VERSION + 1] * table.num_rows, pa.int32()))
    pq.write_table(newer, a)
    with pytest.raises(BadInput, match="newer than this commbench reads"):
        compare.compare_paths([b], [a])


def test_a_damaged_value_is_refused_like_pandas(tmp_path):
    frame = make_frame(seed=2)
    frame.loc[5, "busbw_GBps"] = -1.0
    b = write(tmp_path / "b.parquet", make_frame(seed=1))
    a = write(tmp_path / "a.parquet", frame)
    with pytest.raises(BadInput) as by_pandas:
        compare.compare_frames(read_results([b]), read_results([a]))
    with pytest.raises(BadInput) as by_engine:
        compare.compare_paths([b], [a])
    assert str(by_engine.value) == str(by_pandas.value)


def test_damaged_samples_are_refused_like_pandas(tmp_path):
    frame = make_frame(seed=2, reps=3)
    frame.at[2, "samples_us"] = np.array([1.0, float("nan"), 2.0])
    b = write(tmp_path / "b.parquet", make_frame(seed=1, reps=3))
    a = write(tmp_path / "a.parquet", frame)
    with pytest.raises(BadInput) as by_pandas:
        compare.compare_frames(read_results([b]), read_results([a]), allow_within_run=True)
    with pytest.raises(BadInput) as by_engine:
        compare.compare_paths([b], [a], allow_within_run=True)
    assert str(by_engine.value) == str(by_pandas.value)
    assert "\n" not in str(by_engine.value)


def test_a_path_with_a_quote_is_read(tmp_path):
    folder = tmp_path / "it's here"
    folder.mkdir()
    b, a = _pair(folder, "q")
    by_pandas = compare.compare_frames(read_results([b]), read_results([a]))
    assert compare.compare_paths([b], [a]).to_dict() == by_pandas.to_dict()


# ---- wire counters: compare's likely cause and the report's Wire section, in the engine too ----

def _wire_pair(tmp_path, before_at, after_at, strip=()):
    from unit.test_wire_analysis import rows_with_wire, strip_wire
    from unit.synthetic import write as write_rows

    b = write_rows(tmp_path / "wb.parquet", rows_with_wire(before_at, label="before", repetitions=3))
    a = write_rows(tmp_path / "wa.parquet", rows_with_wire(after_at, label="after", run_id="20250102-000000-bbbbbb",
                                                           seed=2, repetitions=3))
    for path in strip:
        strip_wire(b if path == "before" else a)
    return b, a


@pytest.mark.parametrize("case", ["new", "grown", "as_before", "before_unread"])
def test_compare_likely_cause_in_the_engine_equals_pandas(tmp_path, case):
    from unit.test_wire_analysis import DROPS, RETRANS, at_size

    few = ("cbnode1", "tcp", "RetransSegs", 45, "retransmit")
    many = ("cbnode1", "tcp", "RetransSegs", 1950, "retransmit")
    before_at, after_at, strip = {
        "new": (lambda row: (), at_size(1 << 20, DROPS, RETRANS), ()),
        "grown": (at_size(1 << 20, few), at_size(1 << 20, DROPS, many), ()),
        "as_before": (at_size(1 << 20, RETRANS), at_size(1 << 20, RETRANS), ()),
        "before_unread": (lambda row: (), at_size(1 << 20, DROPS, RETRANS), ("before",)),
    }[case]
    b, a = _wire_pair(tmp_path, before_at, after_at, strip)
    by_pandas = compare.compare_frames(read_results([b], columns=compare.READ_COLUMNS),
                                       read_results([a], columns=compare.READ_COLUMNS))
    by_engine = compare.compare_paths([b], [a])
    assert by_engine.to_dict() == by_pandas.to_dict()
    assert comparetext.render_table(by_engine) == comparetext.render_table(by_pandas)
    causes = [p.likely_cause for p in by_engine.points if p.likely_cause]
    assert bool(causes) == (case in ("new", "grown")), causes


def test_likely_cause_sums_the_wire_a_batch_at_a_time(tmp_path, monkeypatch):
    from commbench.analysis.wire import wireview

    from unit.test_wire_analysis import DROPS, RETRANS, at_size

    b, a = _wire_pair(tmp_path, at_size(1 << 20, RETRANS), at_size(1 << 20, DROPS, RETRANS, RETRANS))
    whole = compare.compare_paths([b], [a])
    monkeypatch.setattr(wireview, "SUM_BATCH", 1)  # each flagged row's counters summed on their own
    assert compare.compare_paths([b], [a]).to_dict() == whole.to_dict()
    assert whole.to_dict() == compare.compare_frames(read_results([b]), read_results([a])).to_dict()


@pytest.mark.parametrize("with_baseline", [True, False])
def test_report_page_with_wire_counters_equals_pandas_exactly(tmp_path, monkeypatch, with_baseline):
    from unit.test_wire_analysis import DROPS, RETRANS, at_size

    b, a = _wire_pair(tmp_path, lambda row: (), at_size(1 << 20, DROPS, RETRANS))
    pages = {}
    for rows in (0, 10 ** 12):  # always the engine, never
        monkeypatch.setattr(pointtable, "MIN_ROWS", rows)
        out = tmp_path / f"report-{rows}.html"
        report.write_report([a], [b] if with_baseline else None, out=out)
        pages[rows] = re.sub(r"Generated [^<]* by", "Generated by", out.read_text())
    assert pages[0] == pages[10 ** 12]
    assert "eth0 qdisc" in pages[0] and "Wire bytes per payload byte" in pages[0]
    assert ("likely cause: cbnode2 eth0 qdisc drops" in pages[0]) == with_baseline


def _late_rows(run_id: str, label: str, skew, seed: int = 1) -> list[dict]:
    """A run of 4 ranks on 2 hosts with per-rank skews: `skew(row)` per row (None: no skew)."""
    from unit.synthetic import make_rows

    rows = make_rows(hosts=("a", "b"), repetitions=2, run_id=run_id, label=label, seed=seed)
    for i, r in enumerate(rows):
        r["rank_skew_us"], r["rank_host"], r["world_size"] = skew(i, r), [0, 0, 1, 1], 4
        r["time_us"] = 22_000.0 if r["collective"] == "all_reduce" else r["time_us"]
        r["iters"] = 2 if i % 9 == 4 else 20  # a few rows of too few iterations: not judged
    return rows


@pytest.mark.parametrize("with_baseline", [True, False])
def test_report_page_with_late_arrivals_equals_pandas_exactly(tmp_path, monkeypatch, with_baseline):
    """A large report judges each run's late arrivals from its files' per-rank columns: the same
    "late arrivals" fact as the pages read into pandas, for the after side's runs and the baseline's."""
    from unit.synthetic import write as write_rows

    def slow_host(i, r):  # host b's ranks late at all_reduce, a row of another world size at all_gather
        return [10.0, 30.0, 20_100.0 + i, 20_200.0] if r["collective"] == "all_reduce" else [5.0, 6.0, 7.0]

    def straggler(i, r):  # rank 1 late at most points, a non-finite skew now and then
        return [0.0, 9_000.0 if i % 5 else 3.0, 4.0 + i % 3, math.inf if i % 11 == 3 else 8.0]

    after = [*_late_rows("run-late", "late", slow_host), *_late_rows("run-rank", "rank", straggler, seed=2),
             *_late_rows("run-quiet", "quiet", lambda i, r: [1.0, 2.0, 3.0, 4.0 + i], seed=3)]
    older = _late_rows("run-older", "older", lambda i, r: None, seed=4)  # no skews: no fact
    odd = _late_rows("run-odd", "odd", straggler, seed=6)
    for r in odd[:3]:  # its first rows' rank_host points past its hosts: its hosts come from the 4th row
        r["rank_host"] = [0, 0, 1, 7]
    a = write_rows(tmp_path / "late-a.parquet", after + older + odd)
    b = write_rows(tmp_path / "late-b.parquet", _late_rows("run-before", "before", straggler, seed=5))
    pages = {}
    for rows in (0, 10 ** 12):  # always the engine, never
        monkeypatch.setattr(pointtable, "MIN_ROWS", rows)
        monkeypatch.setattr(figurequery, "SKEW_BATCH", 7)  # each run's skews over several batches
        out = tmp_path / f"late-{rows}.html"
        report.write_report([a], [b] if with_baseline else None, out=out)
        pages[rows] = re.sub(r"Generated [^<]* by", "Generated by", out.read_text())
    assert pages[0] == pages[10 ** 12]
    late = re.findall(r"<th>late arrivals</th><td>([^<]*)</td>", pages[0])
    assert late[0].startswith("host b arrives late: all 2 of its ranks (2-3) at least +20.1 ms")
    assert late[1].startswith("rank 1 on host a arrives late: +8.99 ms median arrival skew over the other ranks at ")
    assert late[2].startswith("none: no rank or host stood out (")
    assert late[3].startswith("rank 1 on host a arrives late: +8.99 ms")  # run-odd
    assert len(late) == (5 if with_baseline else 4)  # run-older's file cannot say
    if with_baseline:
        assert late[4].startswith("rank 1 on host a arrives late: +8.99 ms")
