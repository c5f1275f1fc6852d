"""zero --grad-accum with real gloo ranks: every value measured and carried by the rows, overlap_comm
kept in flight, a prediction from a real sweep; and --engine deepspeed --validate --grad-accum 4
against the real DeepSpeed engine (number and size of the reductions) for the offload config: the
other user config runs at its own GAS 8 in test_zero_engine_cli.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.analysis.tune.predict import load_curve
from commbench.workloads.zero import ZeroPlan, ZeroWorkload
from commbench.workloads.zeroschedule import curve_comms

pytestmark = pytest.mark.integration
DATA = Path(__file__).parent.parent / "data" / "ds_config"
SHAPE = ["--layers", "2", "--hidden", "64", "--vocab", "256"]  # P = 132 480 elements, 265 kB of bf16


def commbench(*args, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_grad_accum_axis_overlap_and_prediction_from_a_real_sweep(tmp_path):
    curve = tmp_path / "curve.parquet"
    commbench("sweep", "--collective", "all_reduce,all_gather,reduce_scatter", "-d", "bfloat16",
              "-b", "128K", "-e", "512K", "-w", "1", "-n", "3", "--out", str(curve))
    out = tmp_path / "zero.parquet"
    text = commbench("zero", *SHAPE, "--stages", "2,3", "--grad-accum", "1,4", "--overlap", "on", "--scale", "1",
                     "--curve", str(curve), "-w", "1", "-n", "3", "--wide", "--out", str(out))
    df = pd.read_parquet(out)
    assert sorted(zip(df.zero_stage, df.grad_accum)) == [(2, 1), (2, 4), (3, 1), (3, 4)]
    rows = df.set_index(["zero_stage", "grad_accum"])
    assert rows.overlap[(2, 4)] == 2 and rows.overlap[(3, 4)] == 3  # double-buffered IPG; 3 reduce events
    # stage 2 all-reduces every micro-batch, then one all-gather; stage 3 gathers twice and
    # reduce-scatters once per micro-batch
    assert rows.n_collectives[(2, 1)] == 2 and rows.n_collectives[(2, 4)] == 5
    assert rows.n_collectives[(3, 4)] == 4 * rows.n_collectives[(3, 1)]
    assert rows.bytes_per_rank[(2, 4)] == pytest.approx(3 * rows.bytes_per_rank[(2, 1)], rel=0.01)  # 9P vs 3P
    loaded = load_curve([str(curve)])
    plan = ZeroPlan(stages=[2, 3], layers=2, hidden=64, vocab=256)
    w = ZeroWorkload(plan)
    for stage, g in rows.index:
        line = next(ln for ln in text.splitlines() if re.match(rf"\s+{stage}\s+5e\+08\s+{g}\s", ln))
        predicted, ratio = (float(v) for v in line.split()[-2:])
        want = sum(loaded.time_us(op, size, 2, "bfloat16") * n
                   for op, size, n in curve_comms(w.full_schedule(stage, None, g), 2, 2))
        assert predicted == pytest.approx(want, abs=1)
        assert ratio == pytest.approx(rows.time_us[(stage, g)] / want, rel=0.01)
    # scaled: the full model's bytes per rank stand beside the scaled ones, per GAS value
    text = commbench("zero", *SHAPE, "--stages", "2", "--grad-accum", "1,4", "--scale", "0.5", "-w", "1", "-n", "3",
                     "--wide", "--out", str(tmp_path / "scaled.parquet"))
    full = {int(m[1]): m[2] for m in re.finditer(r"^\s+2\s+5e\+08\s+(\d+)\s.*?KiB\s+(\S+ \w+)\s+\d+P=", text, re.M)}
    # 3P and 9P (x (n-1)/n = 1/2) of the full 265 kB, twice the scaled run's 194.1 / 582.2 KiB
    assert full == {1: "388.1 KiB", 4: "1.1 MiB"}, text[-2000:]


@pytest.mark.parametrize("config", ["zero2_offload_fp16.json"])
def test_engine_issues_the_reductions_the_schedule_says_at_grad_accum_4(tmp_path, config):
    out = tmp_path / "engine.parquet"
    text = commbench("zero", "--engine", "deepspeed", "--validate", "--grad-accum", "4", "--ds-config",
                     str(DATA / config), "--stages", "0,1,2,3", "--steps", "1", "--out", str(out), timeout=900)
    assert "DIFFERS" not in text
    # both configs say 8; the run says it uses 4, and the engine really ran 4 micro-batches
    assert "gradient_accumulation_steps 8 -> 4" in text
    per_step = {(int(m[1]), m[2]): (m[3], m[4]) for m in re.finditer(
        r"validate stage (\d) (\w+)\s+per step: schedule (\d+) x [\d.]+ kB, DeepSpeed (\d+) x [\d.]+ kB "
        r"\(4 micro-batch", text)}
    assert per_step == {(0, "all_reduce"): ("1", "1"), (1, "all_reduce"): ("1", "1"),
                        (2, "all_reduce"): ("4", "4"), (3, "reduce_scatter"): ("4", "4")}, text[-3000:]
    df = pd.read_parquet(out)
    assert set(df.grad_accum) == {4}
