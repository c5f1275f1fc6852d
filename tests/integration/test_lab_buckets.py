"""Gradient buckets across two lab hosts at 1gbit (root): small buckets pay per-collective
latency, large ones reach the link."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, veth, tc)"),
    pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                       reason="iproute2 (ip, tc) is not installed: apt-get install iproute2"),
]

PREFIX = "cu"
ENV = {**os.environ, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{PREFIX}"}


def cb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], env=ENV, capture_output=True, text=True,
                          timeout=600)


def test_bucket_knee_on_a_1gbit_link(tmp_path):
    cb("lab", "down")
    assert cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.235.0.0/24").returncode == 0
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
    print(f"\nbuckets on 2 lab hosts at 1gbit, 32 MiB float32 gradients: "
          + ", ".join(f"{b // 4:.0e} el: {t / 1e3:.0f} ms ({bw:.4f} GB/s)" for b, t, bw in
                      zip(df.bucket_bytes, df.time_us, df.busbw_GBps))
          + f"; payload limit {limit:.4f} GB/s")
    assert smallest.time_us >= 2 * largest.time_us, per_step
    assert largest.busbw_GBps >= 0.85 * limit
    assert set(df.world_size) == {2} and set(df.nnodes) == {2}
