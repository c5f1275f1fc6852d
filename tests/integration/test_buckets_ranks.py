"""`commbench buckets` with real gloo ranks: rows, bucket counts, the check, the fault switch."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def run(tmp_path, *args, env=None):
    out = tmp_path / "b.parquet"
    proc = subprocess.run([sys.executable, "-m", "commbench", "buckets", "--out", str(out), "-n", "3", "-w", "1",
                           *args], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    return proc, (pd.read_parquet(out) if out.exists() else None)


@pytest.mark.parametrize("op, overlap, factor", [("all_reduce", 1, 1.0), ("reduce_scatter", 2, 0.5)])
def test_one_row_per_bucket_size_with_the_step_s_collectives(tmp_path, op, overlap, factor):
    proc, df = run(tmp_path, "--grad-bytes", "256K", "-d", "float32", "--bucket-size", "1e3,1e4,1e6",
                   "--op", op, "--overlap", str(overlap))
    assert proc.returncode == 0, proc.stderr
    assert list(df.workload.unique()) == ["buckets"] and list(df.collective.unique()) == [op]
    total = (256 << 10) // 4
    assert list(df.bucket_bytes) == [1000 * 4, 10_000 * 4, total * 4]
    assert list(df.n_collectives) == [math.ceil(total / 1000), math.ceil(total / 10_000), 1]
    assert set(df.size_bytes) == {total * 4} and set(df.overlap) == {overlap} and set(df.wrong) == {0}
    for _, r in df.iterrows():
        algbw = r.size_bytes / (r.time_us * 1e-6) / 1e9
        assert r.algbw_GBps == pytest.approx(algbw) and r.busbw_GBps == pytest.approx(algbw * factor)
    # many small buckets pay the per-collective latency many times
    assert df.time_us.iloc[0] > df.time_us.iloc[-1]
    assert "collectives" in proc.stdout and "#wrong" in proc.stdout


def test_params_set_the_gradient_bytes(tmp_path):
    proc, df = run(tmp_path, "--params", "100K", "-d", "bf16", "--bucket-size", "5e4")
    assert proc.returncode == 0, proc.stderr
    assert set(df.size_bytes) == {200_000} and list(df.n_collectives) == [2] and set(df.dtype) == {"bfloat16"}


def test_a_corrupted_bucket_is_wrong_and_fails_the_run(tmp_path):
    proc, df = run(tmp_path, "--grad-bytes", "64K", "--bucket-size", "1e3", env={"COMMBENCH_TEST_FAULT": "corrupt:1"})
    assert proc.returncode == 1 and (df.wrong > 0).all()
    assert "wrong" in proc.stderr and "Traceback" not in proc.stderr


def test_repetitions_end_with_a_median_line_per_bucket(tmp_path):
    proc, df = run(tmp_path, "--grad-bytes", "256K", "-d", "float32", "--bucket-size", "1e3,1e5", "-R", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("# repetition")] == [f"# repetition {r}/3" for r in (1, 2, 3)]
    i = lines.index("# Median over 3 repetitions: all_reduce (buckets)")
    assert lines[i + 1].split()[:3] == ["#", "point", "time"]
    for line, bucket in zip(lines[i + 3:i + 5], (4_000, 262_144)):
        label, _, rest = line.strip().partition("   ")
        assert label.startswith("buckets of "), line
        time_text, spread, _, busbw = rest.split()
        g = df[df.bucket_bytes == bucket]
        assert len(g) == 3
        assert float(time_text) == pytest.approx(g.time_us.median(), rel=5e-3, abs=0.1)
        lo, hi = map(float, spread.split(".."))
        assert (lo, hi) == (pytest.approx(g.time_us.min(), rel=5e-3, abs=0.1),
                            pytest.approx(g.time_us.max(), rel=5e-3, abs=0.1))
        assert float(busbw) == pytest.approx(g.busbw_GBps.median(), rel=5e-3)
