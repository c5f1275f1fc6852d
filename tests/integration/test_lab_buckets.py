"""Gradient buckets across two lab hosts at 1gbit (root): small buckets pay per-collective
latency, large ones reach the link."""

from __future__ import annotations

import sys
from functools import partial

import pandas as pd

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cu"
ENV = lab_env(PREFIX)


cb = partial(helpers.cb, env=ENV, timeout=600)  # python -m commbench in a subprocess (tests/helpers.py)


def test_bucket_knee_on_a_1gbit_link(tmp_path):
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.235.0.0/24")
    assert up.returncode == 0
    out = tmp_path / "buckets.parquet"
    try:
        res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "buckets", "--grad-bytes", "32M",
                 "-d", "float32", "--bucket-size", "3e3,1e5,1e6,1e7", "-n", "3", "-w", "1", "--out", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        cb("lab", "down")
    df = pd.read_parquet(out).sort_values("bucket_bytes")
    per_step = dict(zip(df.bucket_bytes, df.time_us))
    smallest, largest = df.iloc[0], df.iloc[-1]
    limit = 1e9 / 8 * (1500 - 52) / (1500 + 14) / 1e9
    print("\nbuckets on 2 lab hosts at 1gbit, 32 MiB float32 gradients: "
          + ", ".join(f"{b // 4:.0e} el: {t / 1e3:.0f} ms ({bw:.4f} GB/s)" for b, t, bw in
                      zip(df.bucket_bytes, df.time_us, df.busbw_GBps))
          + f"; payload limit {limit:.4f} GB/s")
    assert smallest.time_us >= 2 * largest.time_us, per_step
    assert largest.busbw_GBps >= 0.85 * limit
    assert set(df.world_size) == {2} and set(df.nnodes) == {2}
