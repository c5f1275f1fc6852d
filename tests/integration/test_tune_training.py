"""tune never changes training silently (issue #40 part 4), through the real CLI with 2 gloo ranks
on tests/data/ds_config's ZeRO-2 config (train_batch_size 32, gradient_accumulation_steps 8, fp16,
overlap_comm true): the written config keeps the user's batch and accumulation unless
--allow-batch-change, and then the change is the first line of the recommendation; the user's
config is measured; every candidate is measured with the config's overlap_comm; tune's own report
fits 120 columns."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.workloads.zeroschedule import in_flight
from test_tune import table_rows

pytestmark = pytest.mark.integration
CONFIG = Path(__file__).parents[1] / "data" / "ds_config" / "zero2_bucket5e8_fp16.json"
SHAPE = ["--layers", "2", "--hidden", "64", "--vocab", "1000"]
LEAN = ["--nproc", "2", "--backend", "gloo", "-w", "1", "-n", "3", "--no-wire", "--progress", "off"]


def _tune(tmp_path, *args):
    shutil.copy(CONFIG, tmp_path / "ds.json")
    out = tmp_path / "o"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "tune",
            "--ds-config",
            str(tmp_path / "ds.json"),
            *SHAPE,
            "--dtypes",
            "fp16",
            "--out",
            str(out),
            *args,
            *LEAN,
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, out


def report(stdout: str) -> list[str]:
    """tune's own lines: after the last child run's closing '# Results:' line."""
    lines = stdout.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("# Results:"))
    return lines[last + 1 :]


def test_batch_kept_users_config_measured_overlap_as_configured(tmp_path):
    proc, out = _tune(tmp_path, "--top", "1")
    user = json.loads(CONFIG.read_text())
    written = json.loads((out / "ds.tuned.json").read_text())
    assert written["train_batch_size"] == user["train_batch_size"] == 32
    assert written["gradient_accumulation_steps"] == user["gradient_accumulation_steps"] == 8
    assert written["train_micro_batch_size_per_gpu"] == 4
    rows = table_rows(proc.stdout)
    assert {r["grad_accum"] for r in rows} == {8}
    (mine,) = [r for r in rows if "(yours)" in r["flags"]]
    assert (mine["stage"], mine["reduce_bucket"], mine["grad_accum"], mine["dtype"]) == (2, 5e8, 8, "float16")
    assert mine["measured"] is not None
    # overlap_comm true in the config: every measured step kept as many reductions in flight as DeepSpeed does
    for path in out.glob("*.zero-*.parquet"):
        step = pd.read_parquet(path).query("collective == 'zero_step'")
        stage = int(step.zero_stage.iloc[0])
        assert step.overlap.eq(in_flight(stage, True)).all(), (path, stage, step.overlap.tolist())
    lines = report(proc.stdout)
    assert lines[0].startswith("# winner: ZeRO-"), lines[:3]
    assert not any("CHANGES TRAINING" in line for line in lines)
    assert lines[1].startswith(("# measured:", "# no measured candidate beats your config"))
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)


def test_an_allowed_batch_change_is_the_first_line(tmp_path):
    # ZeRO-1 reduces once per step: at 16 micro-batches a step it sends about a sixteenth of ZeRO-2's
    # per-micro-batch reductions at 8, far past --min-gain, so it wins, and changes the global batch
    proc, out = _tune(tmp_path, "--stages", "1", "--grad-accum", "16", "--allow-batch-change", "--top", "1")
    lines = report(proc.stdout)
    assert lines[0].startswith("# CHANGES TRAINING"), lines[:3]
    assert "gradient_accumulation_steps 8 -> 16" in lines[0] and "train_batch_size 32 -> 64" in lines[0]
    assert lines[1].startswith("# winner: ZeRO-1") and "gradient_accumulation_steps 16" in lines[1]
    written = json.loads((out / "ds.tuned.json").read_text())
    assert (written["train_batch_size"], written["gradient_accumulation_steps"]) == (64, 16)
