"""`commbench zero --ds-config` on the schedule path (2 gloo ranks): it runs the config's precision
unless -d says otherwise, lists every change it made to the config as the engine path does, and
its table fits 120 columns unless --wide (issue #40 parts 4 and 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.integration
CONFIG = Path(__file__).parents[1] / "data" / "ds_config" / "zero2_bucket5e8_fp16.json"
ARGS = [
    "--layers",
    "2",
    "--hidden",
    "64",
    "--vocab",
    "1000",
    "--nproc",
    "2",
    "--backend",
    "gloo",
    "-w",
    "1",
    "-n",
    "3",
    "--no-wire",
    "--progress",
    "off",
]


def _zero(tmp_path, *args):
    out = tmp_path / f"z{len(list(tmp_path.glob('*.parquet')))}.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", "zero", "--ds-config", str(CONFIG), *args, *ARGS, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, pd.read_parquet(out)


def _own_lines(stdout: str) -> list[str]:
    """zero's own lines: from its 'ZeRO schedules' header to the end of its table."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# ZeRO schedules"))
    end = next(i for i, line in enumerate(lines) if line.startswith("# Out of bounds"))
    return lines[start:end]


def test_the_configs_precision_and_its_changes_listed(tmp_path):
    stdout, df = _zero(tmp_path, "--stages", "2,3")
    assert set(df.dtype) == {"float16"}  # the config trains in fp16: no silent bfloat16
    own = _own_lines(stdout)
    assert "# config: zero_optimization.stage 2 -> 2, 3 (the stage asked for)" in own
    assert not any("precision" in line for line in own)
    assert max(len(line) for line in own) <= 120, max(own, key=len)
    stdout, df = _zero(tmp_path, "--stages", "2", "-d", "bf16", "--overlap", "off", "--wide")
    assert set(df.dtype) == {"bfloat16"}
    own = _own_lines(stdout)
    assert "# config: precision float16 -> bfloat16 (-d; the same bytes on the wire when both are 2-byte)" in own
    assert "# config: zero_optimization.overlap_comm true -> false (--overlap)" in own
    assert any("paper (xP)" in line for line in own)  # --wide: the statistics columns
