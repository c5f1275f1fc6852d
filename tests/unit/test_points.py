"""analysis/points/points.py: the rows a curve is drawn from and their medians, one query for rows in
memory and for files, checked against a pandas oracle written here."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commbench.analysis.points import pointtable, figurequery, points
from commbench.analysis.curves import curvetables
from commbench.analysis.wire import wireview
from commbench.core.errors import BadInput


def _rows(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Rows of two runs, two settings, some damaged: NaN and infinite values, a zero size, wrong
    checked on some rows only, a few buckets rows, labels and dtypes missing on some."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1024, 4096, 65536, 0], n, p=[0.3, 0.3, 0.35, 0.05])
    busbw = rng.uniform(1, 10, n)
    busbw[rng.random(n) < 0.05] = np.nan
    busbw[rng.random(n) < 0.02] = 0.0  # the door refuses infinities; a zero is drawn
    algbw = busbw * 0.9
    algbw[rng.random(n) < 0.05] = np.nan
    workload = np.where(rng.random(n) < 0.1, "buckets", "sweep")
    time = rng.uniform(0, 100, n)
    time[rng.random(n) < 0.05] = 0.0  # drawn for bandwidth, not for time
    return pd.DataFrame({
        "collective": rng.choice(["all_reduce", "reduce_scatter", "all_gather"], n),
        "size_bytes": sizes.astype("int64"),
        "busbw_GBps": busbw, "algbw_GBps": algbw, "time_us": time,
        "run_id": rng.choice(["r1", "r2"], n),
        "label": pd.Series(rng.choice(["a", None], n), dtype=object),
        "dtype": pd.Series(rng.choice(["float32", "bfloat16", None], n), dtype=object),
        "in_place": pd.Series(rng.choice([True, False], n), dtype=object),
        "settings": pd.Series(rng.choice(["MTU=1500", "MTU=9000", None], n), dtype=object),
        "workload": workload,
        "bucket_bytes": pd.Series([int(b) if w == "buckets" else None
                                   for w, b in zip(workload, rng.choice([1 << 20, 1 << 22], n))], dtype=object),
        "wrong": pd.Series([None if r < 0.3 else int(r > 0.9) for r in rng.random(n)], dtype=object),
        "world_size": 4, "backend": "gloo", "schema_version": 2,
    })


def _oracle(df: pd.DataFrame, column: str = "busbw_GBps") -> pd.DataFrame:
    """The rules of points.py written in pandas, to check the SQL against."""
    d = df.copy()
    d["label"], d["dtype"] = d["label"].fillna(""), d["dtype"].fillna("?")
    d["settings"], d["in_place"] = d["settings"].fillna(""), d["in_place"].fillna(False).astype(bool)
    d[points.GROUP] = ""  # no layout run here (its group labels: tests/unit/test_layout_views.py)
    buckets = d["workload"].eq("buckets") & d["bucket_bytes"].notna()
    d.loc[buckets, "collective"] = d.loc[buckets, "collective"] + points.BUCKETS_SUFFIX
    d.loc[buckets, "size_bytes"] = pd.to_numeric(d.loc[buckets, "bucket_bytes"]).astype("int64")
    v = d[column].astype(float)
    d = d[np.isfinite(v) & (d["size_bytes"] > 0) & ((v > 0) if column == "time_us" else True)]
    d = d.assign(wrong=pd.to_numeric(d["wrong"]))
    g = d.groupby([*points.LINE_KEYS, "size_bytes"], sort=False)
    return g.agg(busbw=("busbw_GBps", "median"), algbw=("algbw_GBps", "median"), time=("time_us", "median"),
                 reps=("busbw_GBps", "size"), wrong=("wrong", lambda s: s.sum() if s.notna().any() else None),
                 unchecked=("wrong", lambda s: int(s.isna().sum()))).reset_index()


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert len(got) == len(want)
    for name in want.columns:
        for g, w in zip(got[name].tolist(), want[name].tolist()):
            if isinstance(w, float) and not isinstance(g, str):
                assert (g is None or math.isnan(g)) if math.isnan(w) else g == pytest.approx(w, rel=1e-12), name
            else:
                assert g == w, (name, g, w)


def _plain(rows: list[dict]) -> list[dict]:
    """NaN as None, so that equal tables compare equal."""
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


def test_medians_of_rows_in_memory_equal_the_pandas_oracle():
    df = _rows()
    got = points.medians(df)
    want = _oracle(df)
    _same(got[list(want.columns)], want)
    assert " in buckets" in " ".join(got["collective"]), "the buckets rows are drawn"


def test_a_frame_and_its_file_give_the_same_points_and_lines(tmp_path):
    df = _rows(seed=3)
    path = tmp_path / "r.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    on_disk = pointtable.Query(pointtable.open_source([path]), "plotted")
    _same(points.medians(on_disk), points.medians(df))
    for column in ("busbw_GBps", "time_us"):
        mine, theirs = figurequery.frame_lines(df, column), figurequery.plot_lines(on_disk, column)
        assert [ln["key"] for ln in mine] == [ln["key"] for ln in theirs]
        for a, b in zip(mine, theirs):
            for field in ("sizes", "median", "lo", "hi", "reps", "wrong_sizes"):
                np.testing.assert_array_equal(a[field], b[field])
    assert _plain(curvetables.peak_rows(df)) == _plain(curvetables.peak_rows(on_disk))
    assert curvetables.collective_gaps(df) == curvetables.collective_gaps(on_disk)


def test_a_time_curve_keeps_only_positive_times_and_each_run_starts_at_its_first_drawn_row():
    df = _rows(seed=5)
    got = points.medians(df, column="time_us")
    _same(got[["time", "reps"]], _oracle(df, "time_us")[["time", "reps"]])
    firsts = points.first_rows(points.rows_of(df), "busbw_GBps")
    drawn = np.isfinite(df["busbw_GBps"]) & (df["size_bytes"] > 0) & df["workload"].eq("sweep")
    assert firsts == sorted(int(df[drawn & (df["run_id"] == r)].index[0]) for r in ("r1", "r2"))


def test_a_buckets_row_is_its_collective_in_buckets_at_its_bucket_size():
    df = pd.DataFrame({"collective": ["all_reduce"] * 2, "size_bytes": [100, 100], "busbw_GBps": [2.0, 4.0],
                       "workload": ["buckets", "sweep"], "bucket_bytes": [1 << 20, None], "schema_version": 2})
    got = points.medians(df)
    assert list(zip(got["collective"], got["size_bytes"])) == [("all_reduce in buckets", 1 << 20),
                                                              ("all_reduce", 100)]
    assert list(got["run_id"]) == ["", ""] and list(got["dtype"]) == ["", ""]  # no such column: ""


@pytest.mark.parametrize("frame, message", [
    (pd.DataFrame(), "the results hold no points (an empty or interrupted run): nothing to plot"),
    (pd.DataFrame({"collective": ["x"], "busbw_GBps": [1.0]}),
     "the results have no column size_bytes: pass files written by commbench"),
])
def test_a_frame_that_cannot_be_drawn_says_why(frame, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        points.medians(frame)


def test_the_wire_payload_table_takes_each_points_median_of_finite_ratios():
    df = pd.DataFrame({"collective": ["all_reduce"] * 4 + ["all_gather"], "size_bytes": [8, 8, 8, 1024, 8],
                       "run_id": ["r"] * 5, "busbw_GBps": 1.0, "wire_per_payload": [1.0, 3.0, np.nan, 2.5, np.nan]})
    got = points.ratio_medians(df)
    assert got.to_dict("list") == {"collective": ["all_reduce", "all_reduce"], "run_id": ["r", "r"],
                                   "size_bytes": [8, 1024], "wire_per_payload": [2.0, 2.5]}
    assert wireview.payload_rows(df) == [["all_reduce", "r", "2", "2.250", "2.000..2.500", "2.500 (1 KiB)"]]
