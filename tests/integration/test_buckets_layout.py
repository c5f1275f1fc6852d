"""buckets --layout tp=2 (issue #38; docs/LAYOUTS.md): on 4 real gloo ranks both data-parallel groups
reduce their share of the gradients (--grad-bytes / tp) at once, a row per group with its dp columns
and its own #wrong (a rank that corrupts its output marks its group only)."""

from __future__ import annotations

import glob

import pandas as pd
import pytest
from helpers import cb, clean_env

pytestmark = pytest.mark.integration  # real gloo ranks (moved from tests/unit)

BUCKETS = ("buckets", "--nproc", "4", "--backend", "gloo", "--grad-bytes", "1M", "--bucket-size", "65536", "-n", "2",
           "-w", "1", "--progress", "off", "--bind", "none")


def test_both_dp_groups_reduce_half_the_gradients_at_once(tmp_path):
    proc = cb(*BUCKETS, "--layout", "tp=2", "--op", "reduce_scatter", "--out", str(tmp_path),
              env=clean_env(COMMBENCH_TEST_FAULT="corrupt:3"), timeout=120)
    rows = pd.read_parquet(glob.glob(str(tmp_path / "*.parquet"))[0])
    assert proc.returncode == 1, proc.stdout + proc.stderr  # rank 3's wrong output: exit 1, as a plain run
    assert list(rows.group_ranks) == ["0,2", "1,3"] and (rows.group_dim == "dp").all() and rows.concurrent.all()
    assert list(rows.wrong) == [0, 1]  # rank 3 is in dp group 1 only
    assert (rows.world_size == 2).all() and (rows.size_bytes == 512 * 1024).all()  # 1 MiB / tp, bfloat16
    assert (rows.collective == "reduce_scatter").all() and "dp1 [1,3]" in proc.stdout
