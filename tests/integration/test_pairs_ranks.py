"""`commbench pairs` with real local gloo ranks (no root): every directed link once, bidir rows,
the data check and its fault switch. Which local rank is slowest on loopback is noise, so these
tests assert the rows and the check, not a verdict (tests/integration/test_lab_pairs.py does)."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def run(tmp_path, *args, env=None):
    out = tmp_path / "p.parquet"
    proc = subprocess.run([sys.executable, "-m", "commbench", "pairs", "--out", str(out), "--size", "64K",
                           "-n", "3", "-w", "1", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    return proc, (pd.read_parquet(out) if out.exists() else None)


def test_three_ranks_measure_every_directed_link_once(tmp_path):
    proc, df = run(tmp_path, "--nproc", "3")
    assert proc.returncode in (0, 1), proc.stderr  # 1: loopback noise singled out a rank
    assert "Traceback" not in proc.stderr
    assert sorted(zip(df.src_rank, df.dst_rank)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert set(df.workload) == {"pairs"} and set(df.collective) == {"sendrecv"} and set(df.wrong) == {0}
    assert set(df.size_bytes) == {64 << 10} and (df.busbw_GBps == df.algbw_GBps).all()
    assert df.src_host.notna().all() and (df.src_host == df.dst_host).all()  # one machine
    assert "3 rounds of disjoint pairs" in proc.stdout and "Slowest links (4 of 6" in proc.stdout


def test_bidir_and_a_corrupted_transfer(tmp_path):
    proc, df = run(tmp_path, "--nproc", "2", "--mode", "bidir", env={"COMMBENCH_TEST_FAULT": "corrupt:1"})
    assert proc.returncode == 1, proc.stderr
    assert len(df) == 1 and df.collective.iloc[0] == "sendrecv_bidir" and df.wrong.iloc[0] == 1
    assert "arrived wrong" in proc.stderr and "Traceback" not in proc.stderr
    assert "No endpoint singled out: with two endpoints" in proc.stdout
