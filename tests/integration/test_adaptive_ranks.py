"""The adaptive iteration count with real gloo ranks: the runner follows StopRule exactly (each
point stops at the first check where its median is known to --precision, its --time-budget is
used or --max-iters is reached, never before --min-iters), and the stored iteration and warm-up
counts are the ones that ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.harness.timing import StopRule

pytestmark = pytest.mark.integration


def sweep(out: Path, *args: str) -> pd.DataFrame:
    proc = subprocess.run([sys.executable, "-m", "commbench", "sweep", "--collective", "all_reduce,all_gather",
                           "--sizes", "1K,4M", "--out", str(out), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return pd.read_parquet(out)


def replay(rule: StopRule, samples_s: list[float]) -> int:
    """Where StopRule, fed the stored per-iteration maxima batch by batch, says stop."""
    n = 0
    while (batch := rule.next_batch(samples_s[:n])) and n + batch <= len(samples_s):
        n += batch
    return n if not batch else -1  # -1: the rule wanted more than the run stored


@pytest.mark.parametrize("precision, min_iters", [(0.03, 10), (0.9, 12)])
def test_each_point_stops_where_the_rule_says(tmp_path, precision, min_iters):
    budget = 0.03
    df = sweep(tmp_path / "a.parquet", "--time-budget", str(budget), "--precision", str(precision),
               "--min-iters", str(min_iters))
    rule = StopRule(budget, min_iters, 2000, precision)
    for row in df.itertuples():
        samples_s = [s / 1e6 for s in row.samples_us]
        assert len(samples_s) == row.iters >= min_iters
        assert replay(rule, samples_s) == row.iters, (row.collective, row.size_bytes, row.iters)
        assert 2 <= row.warmup <= 5
    assert df[df.size_bytes == 1024].warmup.max() == 5  # a cheap point warms up fully (unless its first two stall)


def test_precision_zero_fills_the_budget_after_the_full_warm_up(tmp_path):
    fill = sweep(tmp_path / "fill.parquet", "--precision", "0", "--time-budget", "0.02")
    assert set(fill.warmup) == {5} and all(row.iters >= 10 for row in fill.itertuples())
