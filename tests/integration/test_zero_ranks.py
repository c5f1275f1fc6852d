"""`commbench zero` with real gloo ranks: a 1.3B-shaped schedule at a scale that fits here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from commbench.core.units import format_size

pytestmark = pytest.mark.integration
DATA = Path(__file__).parent.parent / "data" / "ds_config"


def test_1_3b_schedule_per_stage_has_the_paper_volumes(tmp_path):
    out = tmp_path / "zero.parquet"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "commbench", "zero", "--model", "1.3b", "-n", "3", "-w", "1",
                           "--wide", "--out", str(out)], capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 60, f"the default 1.3B schedule took {elapsed:.0f} s"
    df = pd.read_parquet(out).set_index("zero_stage")
    assert list(df.index) == [0, 1, 2, 3] and set(df.workload) == {"zero"}
    scale = float(df.scale.iloc[0])
    assert 0 < scale < 0.05
    # what DeepSpeed 0.19.8 issues (2P, 3P, 3P, 3P) next to the paper's (2P, 2P, 2P, 3P)
    for stage, volume_p in {0: 2, 1: 3, 2: 3, 3: 3}.items():
        row = df.loc[stage]
        paper_p = {0: 2, 1: 2, 2: 2, 3: 3}[stage]
        assert row.bytes_per_rank / row.paper_bytes_per_rank == pytest.approx(volume_p / paper_p, rel=0.01)
        ops = json.loads(row.ops)
        assert sum(o["count"] for o in ops.values()) == row.n_collectives
    assert df.paper_bytes_per_rank[3] / df.paper_bytes_per_rank[1] == pytest.approx(1.5, rel=0.01)
    assert set(json.loads(df.ops[3])) == {"all_gather", "reduce_scatter"}
    assert set(json.loads(df.ops[0])) == {"all_reduce"}
    assert "paper" in proc.stdout and "3P=" in proc.stdout  # --wide: the full table (default: 120 columns)
    # the scaled model's bytes, and beside them the full model's (issue #19: "2P = 32 MiB" alone read as 1.3b's)
    lines = proc.stdout.splitlines()
    assert "full model" in next(ln for ln in lines if "bytes/rank/step" in ln)
    for stage in range(4):
        line = next(ln for ln in lines if re.match(rf"\s+{stage}\s+5e\+08", ln))
        assert format_size(df.bytes_per_rank[stage] / scale) in line, line
    assert "full size (1.3b: 1.41B parameters, 2.6 GiB of bfloat16)" in proc.stdout


def test_a_ds_config_sets_the_stage_and_buckets(tmp_path):
    out = tmp_path / "zero.parquet"
    proc = subprocess.run([sys.executable, "-m", "commbench", "zero", "--ds-config",
                           str(DATA / "zero2_bucket5e8_fp16.json"), "--model", "gpt2-125m", "-n", "2", "-w", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_parquet(out)
    assert list(df.zero_stage) == [2]
    assert set(df.bucket_bytes) == {int(5e8) * 2}
    # the fixture accumulates 8 micro-batches: stage 2 reduces after each, (2 x 8 + 1) P
    row = df.iloc[0]
    assert row.bytes_per_rank / row.paper_bytes_per_rank == pytest.approx(17 / 16, rel=0.01)


def test_a_bucket_grid_runs_every_stage_with_every_bucket_and_draws_the_heat_map(tmp_path):
    out = tmp_path / "grid.parquet"
    proc = subprocess.run([sys.executable, "-m", "commbench", "zero", "--model", "gpt2-125m", "--stages", "1,3",
                           "--bucket-size", "1e6,5e8", "-n", "2", "-w", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_parquet(out)
    cells = {(int(r.zero_stage), int(r.bucket_bytes) // 2): r for r in df.itertuples()}  # bf16: 2 bytes
    assert set(cells) == {(1, 10**6), (1, 5 * 10**8), (3, 10**6), (3, 5 * 10**8)}
    # small buckets: many more collectives for the same bytes per rank
    for stage in (1, 3):
        small, large = cells[(stage, 10**6)], cells[(stage, 5 * 10**8)]
        assert small.n_collectives > 10 * large.n_collectives
        assert small.bytes_per_rank == pytest.approx(large.bytes_per_rank, rel=0.01)
    plot = subprocess.run([sys.executable, "-m", "commbench", "plot", str(out)], capture_output=True, text=True)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "grid.png").read_bytes().startswith(b"\x89PNG")
    report = subprocess.run([sys.executable, "-m", "commbench", "report", str(out), "--out", str(tmp_path / "r.md")],
                            capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## ZeRO stages x bucket sizes" in text and "](r-zero.png)" in text
    assert (tmp_path / "r-zero.png").exists() and not (tmp_path / "r.png").exists()
    assert text.count("| 1 | 1e6 |") == 1 and text.count("| 3 | 5e8 |") == 1
