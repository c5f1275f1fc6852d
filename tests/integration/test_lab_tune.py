"""`commbench tune --launcher lab` on two lab hosts (root): the curve and every measured candidate
run as one rank per host over the shaped lab link, as a DeepSpeed job on two nodes would. The
model: 4.65M parameters (9.3 MB of fp16 gradients), measured at full size (scale 1).

Accuracy, at 1gbit: ZeRO-0..2 x reduce_bucket_size 1e6, 3e6, 1e7 (7 candidates, all measured),
each within 40% of its prediction (the benchmark, benchmarks/tune_lab.py, holds them to 25%).
ZeRO-3 is left out here: gloo's reduce_scatter stalls at random when called in a sweep's timing
loop (2 MB: 18-54 ms a call from one run to the next, where all_reduce takes 17 ms) but not inside
a step's sequence (~17 ms), so a gloo curve describes ZeRO-3 steps badly; tune flags them
MISS>25% (docs/TUNING.md), which this test is not about.

The recommendation against the link rate: a ZeRO-2 config with reduce_bucket_size 5e4 (93
all-reduce buckets a step). Larger buckets send the same bytes in fewer calls and so save the
fixed cost of a call (0.3 ms on a quiet machine, over 1 ms on a loaded one) 92 times a step: at
1gbit 17-44% of the step, at 100mbit (the same bytes take ten times as long) 2-7%. So the measured
steps say "raise reduce_bucket_size" at 1gbit and "keep your config" at 100mbit, under the default
--min-gain 10%. The test reads the measured steps back from the zero runs' parquet files and
asserts that each rate's recommendation is the one those numbers give (the 100mbit run predicts from
the 1gbit run's curve: every candidate is measured, and only the measured steps decide)."""

from __future__ import annotations

import json
import statistics
from functools import partial

import pandas as pd
import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env, run_commbench
from test_tune import table_rows

pytestmark = NEEDS_LAB

PREFIX = "cz"
ENV = lab_env(PREFIX)
SUBNET = "10.247.0.0/24"
SHAPE = ["--layers", "2", "--hidden", "256", "--vocab", "6000"]  # 4.65M parameters: 9.3 MB in fp16
CONFIG = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 50000}, "fp16": {"enabled": True},
          "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
LEAN = ["--launcher", "lab", "--backend", "gloo", "-w", "1", "-n", "5", "--no-wire", "--progress", "off"]
MIN_GAIN = 0.10  # tune's default --min-gain


cb = partial(helpers.cb, env=ENV, timeout=900)  # python -m commbench in a subprocess (tests/helpers.py)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--subnet", SUBNET)
    assert up.returncode == 0, up.stdout + up.stderr
    d = tmp_path_factory.mktemp("labtune")
    (d / "ds.json").write_text(json.dumps(CONFIG))
    (d / "ds1e6.json").write_text(json.dumps({**CONFIG, "zero_optimization": {"stage": 2, "reduce_bucket_size": 1e6}}))
    yield d
    cb("lab", "down")


def tune(d, rate: str, name: str, stages: str, buckets: str, config: str = "ds.json", curve=None):
    assert cb("lab", "set", "--rate", rate).returncode == 0
    out = d / name
    given = ["--curve", str(curve)] if curve else []
    proc = cb("tune", "--ds-config", str(d / config), *SHAPE, "--stages", stages, "--reduce-buckets", buckets,
              "--grad-accum", "1", "--dtypes", "fp16", "--top", "8", "--out", str(out), *given, *LEAN)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc, out


def measured_steps(out) -> dict[tuple[int, float], float]:
    """(stage, reduce_bucket_size) -> median zero_step time, read back from each measured
    candidate's file (the bucket from the run's bytes per bucket: fp16, 2 bytes an element)."""
    steps = {}
    for path in out.glob("*.zero-*.parquet"):
        df = pd.read_parquet(path)
        step = df[df.collective == "zero_step"]
        assert step.launcher.eq("lab").all() and step.nnodes.eq(2).all() and step.overlap.eq(1).all()
        assert list(step.hosts.iloc[0]) == [f"{PREFIX}node1", f"{PREFIX}node2"]
        key = (int(step.zero_stage.iloc[0]), float(step.bucket_bytes.iloc[0]) / 2)
        steps[key] = statistics.median(step.time_us)
    return steps


def winner(stdout: str) -> tuple[int, float]:
    line = next(x for x in stdout.splitlines() if x.startswith("# winner:"))
    return int(line.split("ZeRO-")[1].split(",")[0]), float(line.split("reduce_bucket_size ")[1].split(",")[0])


def test_seven_settings_predicted_within_40_percent(lab):
    proc, out = tune(lab, "1gbit", "accuracy", "0,1,2", "1e6,3e6,1e7", "ds1e6.json")
    rows = table_rows(proc.stdout)
    assert len(rows) == 7 and all(r["measured"] is not None for r in rows), proc.stdout[-3000:]
    # stage 0 reduces in DeepSpeed's fixed 5e8 buckets: one candidate
    assert {(r["stage"], r["reduce_bucket"]) for r in rows} == {(0, 1e6)} | {(s, b) for s in (1, 2)
                                                                              for b in (1e6, 3e6, 1e7)}
    for r in rows:
        assert abs(r["ratio"] - 1) <= 0.40, (r, proc.stdout[-3000:])
    assert [(r["stage"], r["reduce_bucket"]) for r in rows if "(yours)" in r["flags"]] == [(2, 1e6)]
    assert "ranks 2 (2 node(s) x 1)" in proc.stdout  # every run was one rank per lab host
    assert len(measured_steps(out)) == 7


def test_recommendation_follows_the_measured_steps_at_each_rate(lab):
    runs = {"1gbit": tune(lab, "1gbit", "fast", "2", "5e4,1e6,1e7")}
    # At 100mbit tune predicts from the 1gbit run's curve instead of measuring one of its own (23 s of
    # 9.3 MB points at 100mbit): with --top 8 every candidate is measured, and the recommendation is made
    # from the measured steps alone (analysis/tune/tuneview.py winner), which is what this test holds; how well a
    # lab curve predicts the steps is test_seven_settings_predicted_within_40_percent's question.
    curve = next((lab / "fast").glob("*.curve-float16.parquet"))
    runs["100mbit"] = tune(lab, "100mbit", "slow", "2", "5e4,1e6,1e7", curve=curve)
    verdicts = {}
    for rate, (proc, out) in runs.items():
        steps = measured_steps(out)
        mine, best = steps[(2, 5e4)], min(steps.values())
        gain = 1 - best / mine
        picked = winner(proc.stdout)
        if gain >= MIN_GAIN:  # a larger bucket buys --min-gain: the fastest measured wins
            assert steps[picked] == best, (rate, steps, proc.stdout[-2500:])
        else:  # nothing buys it: keep the config
            assert picked == (2, 5e4), (rate, steps, proc.stdout[-2500:])
            assert "no measured candidate beats your config" in proc.stdout
        verdicts[rate] = (picked, round(gain, 3))
    # and the physics: the calls' fixed cost is a large share of the step at 1gbit, a small one at 100mbit
    assert verdicts["1gbit"][0] in ((2, 1e6), (2, 1e7)) and verdicts["100mbit"][0] == (2, 5e4), verdicts
    assert json.loads((lab / "slow" / "ds.tuned.json").read_text()) == CONFIG  # kept as it was
    assert json.loads((lab / "fast" / "ds.tuned.json").read_text())["zero_optimization"]["reduce_bucket_size"] in (
        1_000_000, 10_000_000)


def test_lab_launcher_refusals(lab):
    for flags, word in ((["--nproc", "2"], "--nproc"), (["--iface", "eth0"], "--iface")):
        proc = cb("tune", "--ds-config", str(lab / "ds.json"), *SHAPE, "--out", str(lab / "r"), *LEAN, *flags)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and word in proc.stderr and "lab" in proc.stderr
    assert not (lab / "r").exists()
    # no lab up (another prefix): one line naming the command that starts one
    proc = run_commbench(lab_env("cy"), "tune", "--ds-config", str(lab / "ds.json"), *SHAPE, "--out",
                         str(lab / "r"), *LEAN)
    assert proc.returncode == 2 and proc.stderr.strip() == "commbench: no lab is up: start one with " \
        "'commbench lab up --nodes 2'", proc.stderr
