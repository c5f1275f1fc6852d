"""analysis/tune/predict.py on real parquet files (synthetic rows through the real ResultWriter):
exact at measured sizes, log-log between them, and every refusal in one line."""

from __future__ import annotations

import math

import pytest

from commbench.analysis.tune.predict import flag_size, load_curve, predict_us
from commbench.core.errors import BadInput
from unit.synthetic import make_rows, write

SIZES = (1024, 4096, 65536, 1 << 20)


def _rows(times: dict, world=2, dtype="float32", placements=(True, False), reps=(1.0, 1.2, 0.9), **kw):
    """Rows whose time_us is times[(collective, size)] * factor per repetition (and +50% in place)."""
    rows = make_rows(collectives=sorted({c for c, _ in times}), sizes=sorted({s for _, s in times}),
                     placements=placements, repetitions=len(reps), dtype=dtype, **kw)
    for r in rows:
        r["world_size"] = world
        r["time_us"] = times[(r["collective"], r["size_bytes"])] * reps[r["repetition"]] * (1.5 if r["in_place"] else 1)
    return rows


def _curve(tmp_path, rows, name="curve.parquet"):
    return load_curve([str(write(tmp_path / name, rows))])


@pytest.fixture
def curve(tmp_path):
    times = {("all_reduce", s): 10.0 + s / 1000 for s in SIZES}
    times.update({("all_gather", s): 5.0 + s / 2000 for s in SIZES})
    return _curve(tmp_path, _rows(times))


def test_exact_at_measured_sizes_median_out_of_place(curve):
    for s in SIZES:
        # the median of 1.0, 1.2, 0.9 is 1.0; the in-place rows (x1.5) are not used
        assert curve.time_us("all_reduce", s, 2, "float32") == pytest.approx(10.0 + s / 1000)
        assert curve.time_us("allgather", s, 2, "fp32") == pytest.approx(5.0 + s / 2000)


def test_between_sizes_in_log_space(curve):
    t0, t1 = 10.0 + 4096 / 1000, 10.0 + 65536 / 1000
    size = 16384  # halfway between 4K and 64K in log size
    expect = math.sqrt(t0 * t1)
    got = curve.time_us("all_reduce", size, 2, "float32")
    assert got == pytest.approx(expect)
    assert got != pytest.approx((t0 + t1) / 2)  # not linear
    w = (math.log(5000) - math.log(4096)) / (math.log(65536) - math.log(4096))
    between = math.exp(math.log(t0) + w * math.log(t1 / t0))
    assert curve.time_us("all_reduce", 5000, 2, "float32") == pytest.approx(between)


def test_in_place_only_collective_uses_what_was_measured(tmp_path):
    c = _curve(tmp_path, _rows({("all_reduce", 1024): 8.0, ("all_reduce", 4096): 16.0}, placements=(True,)))
    assert c.time_us("all_reduce", 4096, 2, "float32") == pytest.approx(24.0)


def test_predict_sums_calls(curve):
    comms = [("all_reduce", 1024, 3), ("all_gather", 1 << 20, 1), ("all_reduce", 65536, 0)]
    expect = 3 * (10 + 1.024) + (5 + (1 << 20) / 2000)
    assert predict_us(curve, comms, 2, "float32") == pytest.approx(expect)


def _refused(call) -> str:
    with pytest.raises(BadInput) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_refuses_collective_not_in_curve(curve):
    msg = _refused(lambda: curve.time_us("reduce_scatter", 4096, 2, "float32"))
    assert "no reduce_scatter" in msg and "--collective reduce_scatter" in msg


def test_refuses_size_outside_range_and_names_flags(curve):
    msg = _refused(lambda: curve.time_us("all_reduce", 3 << 20, 2, "float32"))
    assert "1 KiB..1 MiB" in msg and "-b 1K -e 4M" in msg
    msg = _refused(lambda: curve.time_us("all_reduce", 100, 2, "float32"))
    assert "-b 64 -e 1M" in msg


def test_refuses_other_world_size(curve):
    msg = _refused(lambda: curve.time_us("all_reduce", 4096, 16, "float32"))
    assert "at 2 ranks" in msg and "runs on 16" in msg


def test_refuses_other_dtype(curve):
    msg = _refused(lambda: predict_us(curve, [("all_reduce", 4096, 1)], 2, "bf16"))
    assert "float32" in msg and "-d bfloat16" in msg


def test_refuses_file_without_sweep_rows(tmp_path):
    rows = _rows({("all_reduce", 1024): 8.0})
    for r in rows:
        r["workload"] = "zero"
    msg = _refused(lambda: _curve(tmp_path, rows))
    assert "no sweep rows" in msg and "commbench sweep" in msg


def test_refuses_several_settings(tmp_path):
    rows = _rows({("all_reduce", 1024): 8.0, ("all_reduce", 2048): 9.0})
    for i, r in enumerate(rows):
        r["settings"] = f"NCCL_ALGO={'Ring' if i % 2 else 'Tree'}"
    assert "one setting" in _refused(lambda: _curve(tmp_path, rows))


def test_two_files_and_world_sizes(tmp_path):
    a = write(tmp_path / "a.parquet", _rows({("all_reduce", 1024): 8.0, ("all_reduce", 2048): 9.0}))
    b = write(tmp_path / "b.parquet", _rows({("all_reduce", 1024): 80.0, ("all_reduce", 2048): 90.0}, world=4,
                                             run_id="20250101-000000-bbbbbb"))
    c = load_curve([str(a), str(b)])
    assert c.time_us("all_reduce", 2048, 4, "float32") == pytest.approx(90.0)
    assert c.time_us("all_reduce", 2048, 2, "float32") == pytest.approx(9.0)
    assert "2, 4 ranks" in _refused(lambda: c.time_us("all_reduce", 2048, 8, "float32"))


def test_flag_size():
    assert [flag_size(n) for n in (8, 1024, 3 << 20, 1 << 30, 1000)] == ["8", "1K", "3M", "1G", "1000"]
