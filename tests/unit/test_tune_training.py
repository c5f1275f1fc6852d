"""tune never changes training silently (issue #40 part 4): the user's batch and accumulation are
kept unless --allow-batch-change, a change to training is the recommendation's first line, the
user's own config is always a candidate, memory is checked against the accelerator's (or
--memory-per-rank), never RAM / ranks; tables fit 120 columns unless --wide."""

from __future__ import annotations

import json

import pytest

from commbench.core import units

from commbench.analysis.tune import tuneview
from commbench.analysis.tune.tuneview import Row
from commbench.workloads import tune as work

USER_DOC = {
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8,
    "fp16": {"enabled": True},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8},
}


def _plan(**kw):
    base = dict(
        layers=2,
        hidden=64,
        vocab=1000,
        model="m",
        ds_config="x.json",
        world=2,
        backend="gloo",
        stages=[1],
        reduce_buckets=[20_000],
        allgather_buckets=[500_000_000],
        grad_accums=[8],
        dtypes=["bfloat16"],
        prefetch_bucket=50_000_000,
        multi_rank_allreduce=True,
        scale=1.0,
        out="o",
        run_id="r",
    )
    base.update(kw)
    return work.TunePlan(**base)


def test_the_users_config_is_a_candidate_whatever_the_grid():
    user = Row(2, 200_000, 500_000_000, 8, "float16", 0.0)
    rows = work.candidates(_plan(), user)  # --stages 1 --reduce-buckets 2e4 --dtypes bf16 leave it out
    assert sum(r.setting() == user.setting() for r in rows) == 1 and len(rows) == 2


def test_the_users_config_left_out_only_by_memory_and_said_so():
    user = Row(0, 200_000, 500_000_000, 8, "float16", 0.0)
    params = _plan().params
    budget = int(work.state_bytes_per_rank(params, 1, 2, 2))  # stage 1 fits, stage 0 does not
    plan = _plan(memory=budget)
    assert all(r.setting() != user.setting() for r in work.candidates(plan, user))
    reason = work.unmeasured(plan, user)
    assert reason.startswith("your config was NOT measured: its ZeRO-0 model states need")
    assert "--memory-per-rank" in reason


def test_memory_not_checked_on_cpu_ranks():
    assert work.memory_budget("gloo") is None
    assert work.fitting_stages(10**12, 2, 2, None, [0, 1, 2, 3], "huge") == [0, 1, 2, 3]
    (note,) = work.left_out(10**12, 2, 2, None, [0, 1, 2, 3], [0, 1, 2, 3])
    assert note.startswith("memory per rank not checked") and "--memory-per-rank" in note


def test_candidates_measured_with_the_configs_overlap(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(
        work,
        "child",
        lambda args, what, launcher: seen.append(args) or (_ for _ in ()).throw(work.RuntimeFailure("stop")),
    )
    with pytest.raises(work.RuntimeFailure):
        work.measure(_plan(out=str(tmp_path)), Row(2, 20_000, 500_000_000, 1, "bfloat16", 0.0), 1)
    # no --overlap: the child zero run takes overlap_comm from --ds-config (DeepSpeed's default where unset)
    assert "--overlap" not in seen[0] and "--ds-config" in seen[0]


def test_a_batch_change_is_the_first_line():
    user = Row(2, 500_000_000, 500_000_000, 8, "float16", 0.0)
    mine = Row(2, 500_000_000, 500_000_000, 8, "float16", 1.0, None, 8_000.0, True)
    more = Row(2, 500_000_000, 500_000_000, 32, "float16", 1.0, None, 16_000.0)
    rows = [more, mine]
    new = tuneview.apply_setting(USER_DOC, more, 8, "float16")
    lines = tuneview.recommendation(rows, more, user, 0.1, (USER_DOC, new), "ds.json")
    assert lines[0].startswith("# CHANGES TRAINING")
    assert "gradient_accumulation_steps 8 -> 32" in lines[0] and "train_batch_size 32 -> 128" in lines[0]
    assert lines[1].startswith("# winner: ZeRO-2") and lines[2].startswith("# measured: 50% less communication")


def test_no_change_to_training_no_warning_and_the_winner_first():
    user = Row(2, 500_000_000, 500_000_000, 8, "float16", 0.0)
    mine = Row(2, 500_000_000, 500_000_000, 8, "float16", 1.0, None, 8_000.0, True)
    bucket = Row(2, 50_000_000, 500_000_000, 8, "float16", 1.0, None, 4_000.0)
    new = tuneview.apply_setting(USER_DOC, bucket, 8, "float16")
    assert new["train_batch_size"] == 32 and new["gradient_accumulation_steps"] == 8
    lines = tuneview.recommendation([bucket, mine], bucket, user, 0.1, (USER_DOC, new), "ds.json")
    assert lines[0].startswith("# winner:") and not any("CHANGES TRAINING" in line for line in lines)
    # a precision change is a change to training too
    bf16 = tuneview.apply_setting(USER_DOC, Row(2, 500_000_000, 500_000_000, 8, "bfloat16", 1.0), 8, "float16")
    assert "precision fp16 -> bf16" in tuneview.training_change(USER_DOC, bf16)


def test_without_the_flag_another_accumulation_is_refused(cli, tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps(USER_DOC))
    proc = cli(
        "tune",
        "--ds-config",
        str(tmp_path / "ds.json"),
        "--layers",
        "2",
        "--hidden",
        "64",
        "--grad-accum",
        "8,16",
        "--out",
        str(tmp_path / "o"),
        "--backend",
        "gloo",
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--allow-batch-change" in proc.stderr and "(yours: 8)" in proc.stderr


@pytest.mark.parametrize(
    "us, text",
    [
        (850.4, "850 us"),
        (9_999.0, "10.00 ms"),
        (4_496.0, "4.50 ms"),
        (12_345.0, "12.3 ms"),
        (1_500_000.0, "1.50 s"),
        (12_300_000.0, "12.3 s"),
        (356_000.0, "356 ms"),
        (1_234_000_000.0, "1,234 s"),
        (None, "n/a"),
        (float("nan"), "n/a"),
    ],
)
def test_times_in_human_units(us, text):
    """One time format for tune, zero, replay and the straggler findings (core/units.py)."""
    assert units.format_us(us) == text


def test_table_fits_120_columns_unless_wide():
    rows = [
        Row(3, 500_000_000, 500_000_000, 32, "bfloat16", 98_765_432.0, 123_456_789.0, 200_000_000.0, True),
        Row(0, 5, 500_000_000, 1, "float16", 1.0, None, None),
    ]
    narrow = tuneview.table(rows, False, 0.00123)
    assert max(len(line) for line in narrow) <= 120 and "MISS>25%  (yours)" in narrow[1]
    wide = tuneview.table(rows, False, 0.00123, wide=True)
    assert "full-scale pred." in wide[0] and "allgather_bucket" in wide[0] and "123 s" in wide[1]


def test_a_lower_stage_says_what_it_costs_in_memory():
    user = Row(2, 500_000_000, 500_000_000, 8, "float16", 0.0)
    best = Row(0, 500_000_000, 500_000_000, 8, "float16", 0.0)
    line = work.stage_memory(_plan(), best, user)
    assert line.startswith("ZeRO-2 -> ZeRO-0: model states") and "NOT checked on CPU ranks" in line
    assert "within --memory-per-rank 80 GiB" in work.stage_memory(_plan(memory=80 << 30), best, user)
    assert work.stage_memory(_plan(), user, best) is None  # a higher stage holds less
