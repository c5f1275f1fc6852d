"""`commbench zero --engine deepspeed --validate` with 2 real gloo ranks and the users' configs:
DeepSpeed's comms-logger rows are stored, and commbench's schedule matches what the engine
issued within 10% per op type for every stage. The other user config runs the same command at
--grad-accum 4 in test_zero_grad_accum.py: each config is validated once, at one GAS each (the
engine run costs about 18 s a config on a 2-core machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install deepspeed)")
DATA = Path(__file__).parent.parent / "data" / "ds_config"


@pytest.mark.parametrize("config", ["zero2_bucket5e8_fp16.json"])
def test_engine_rows_and_schedule_validation(tmp_path, config):
    out = tmp_path / "engine.parquet"
    proc = subprocess.run([sys.executable, "-m", "commbench", "zero", "--engine", "deepspeed", "--validate",
                           "--ds-config", str(DATA / config), "--stages", "0,1,2,3", "--steps", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "DIFFERS" not in proc.stdout
    for stage in (0, 1, 2, 3):
        assert f"validate stage {stage}" in proc.stdout
    # the fixtures ask for fp16: on this CPU the run says what it changed, in one line each
    assert "# config:" in proc.stdout
    df = pd.read_parquet(out)
    assert set(df.workload) == {"deepspeed"} and sorted(df.zero_stage.unique()) == [0, 1, 2, 3]
    steps = df[df.collective == "deepspeed_step"].set_index("zero_stage")
    assert (steps.time_us > 0).all() and (steps.bytes_per_rank > 0).all()
    logged = df[df.collective != "deepspeed_step"]
    assert {"all_reduce"} <= set(logged[logged.zero_stage == 0].collective)
    assert {"all_gather", "reduce_scatter"} <= set(logged[logged.zero_stage == 3].collective)
    # gradient_accumulation_steps 8 in both configs: stage 2 reduces after every micro-batch
    assert steps.bytes_per_rank[2] > 4 * steps.bytes_per_rank[1]
