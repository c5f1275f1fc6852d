"""tune's pure parts: the >25% miss flag with planted numbers, the ranking, the merge patch and the
winning config, the memory fit, same-schedule candidates merged."""

from __future__ import annotations

import pytest

from commbench.analysis.tune import tuneview
from commbench.analysis.tune.tuneview import Row
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.integrations.deepspeed import config as dsconfig
from commbench.workloads import tune as work


def _row(pred, meas=None, g=1, stage=2, full=None):
    return Row(stage, 500_000_000, 500_000_000, g, "bfloat16", pred, full, meas)


@pytest.mark.parametrize("pred, meas, flagged", [
    (100.0, 125.0, False), (100.0, 125.1, True), (100.0, 75.0, False), (100.0, 74.9, True),
    (100.0, None, False), (100.0, 300.0, True)])
def test_miss_flag_over_25_percent(pred, meas, flagged):
    r = _row(pred, meas)
    assert r.flagged is flagged
    line = tuneview.table([r], True, 0.5)[1]
    assert ("MISS>25%" in line) is flagged
    if meas is not None:
        assert f"{meas / pred:.2f}" in line


def test_flagged_rows_stay_in_the_table():
    rows = [_row(100, 300, full=100), _row(200, 210, full=200), _row(300, full=300)]
    lines = tuneview.table(rows, True, 1)
    assert len(lines) == 4 and sum("MISS>25%" in line for line in lines) == 1


def test_ranked_per_micro_batch_full_scale_when_every_row_has_it():
    a, b = _row(100, g=1, full=1000), _row(150, g=4, full=3000)
    order, full = tuneview.ranked([a, b])
    assert full and order == [b, a]  # 3000/4 < 1000
    c = _row(50, g=1, full=None)
    order, full = tuneview.ranked([a, b, c])
    assert not full and order == [b, c, a]  # by the scaled figure: 37.5, 50, 100


def test_winner_is_the_best_measured():
    a, b, c = _row(100, 400, full=1), _row(200, 250, full=2), _row(300, full=3)
    user = Row(1, 500_000_000, 500_000_000, 1, "bfloat16", 0.0)
    assert tuneview.winner([a, b, c], user) is b


def _cand(stage, dtype, g, meas, yours=False):
    return Row(stage, 500_000_000, 500_000_000, g, dtype, 1.0, None, meas, yours)


def test_winner_the_smallest_change_within_min_gain():
    user = Row(2, 500_000_000, 500_000_000, 8, "float16", 0.0)
    bf16 = _cand(0, "bfloat16", 32, 32_000)  # 1,000 us a micro-batch: the fastest, 3 changes
    fp16 = _cand(0, "float16", 32, 32_640)  # 2.0% slower, 2 changes (the same schedule as bf16)
    mine = _cand(2, "float16", 8, 8_800, yours=True)  # 1,100 us: 10% slower, no change
    rows = [bf16, fp16, mine]
    assert tuneview.winner(rows, user, 0.05) is fp16  # a precision change is not worth 2%
    assert tuneview.winner(rows, user, 0.0) is bf16  # --min-gain 0: the fastest, whatever it changes
    assert tuneview.winner(rows, user, 0.10) is mine  # 10% is within --min-gain 10%: keep yours
    lines = tuneview.verdict_lines(rows, fp16, user, 0.05)
    assert lines[0] == "# measured: 7% less communication per micro-batch than your config (1.02 ms vs 1.10 ms)"
    assert "the fastest measured (rank 1) is 2.0% faster but changes 3 of your settings, the winner 2" in lines[1]
    assert tuneview.verdict_lines(rows, mine, user, 0.10)[0].startswith("# no measured candidate beats your config")


def test_winner_none_measured_is_the_best_predicted():
    a, b = _row(100), _row(200)
    assert tuneview.winner([a, b], Row(2, 1, 1, 1, "bfloat16", 0.0)) is a


def test_merge_patch_and_winning_config():
    user = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}, "bf16": {"enabled": True},
            "train_batch_size": 16, "gradient_accumulation_steps": 2}
    best = Row(3, 50_000_000, 500_000_000, 4, "bfloat16", 1.0)
    new = tuneview.apply_setting(user, best, 2, "bfloat16")
    assert tuneview.merge_patch(user, new) == {"zero_optimization": {"stage": 3, "reduce_bucket_size": 50_000_000},
                                               "gradient_accumulation_steps": 4, "train_batch_size": 32}
    dsconfig.parse(new)  # DeepSpeed would accept it
    assert user["zero_optimization"]["stage"] == 2  # the user's document is not changed
    fp32 = tuneview.apply_setting({}, Row(0, 500_000_000, 500_000_000, 1, "float16", 1.0), 1, "float32")
    assert tuneview.merge_patch({}, fp32) == {"fp16": {"enabled": True}}
    assert tuneview.merge_patch({"a": 1, "b": {"c": 2}}, {"b": {"c": 2}}) == {"a": None}


def test_state_bytes_and_fit():
    p = 1_000_000
    assert work.state_bytes_per_rank(p, 0, 4, 2) == 16 * p
    assert work.state_bytes_per_rank(p, 3, 4, 2) == 4 * p
    assert work.state_bytes_per_rank(p, 2, 4, 2) == 2 * p + 14 * p / 4
    assert work.fitting_stages(p, 4, 2, 10 * p, [0, 1, 2, 3], "m") == [1, 2, 3]
    (note,) = work.left_out(p, 4, 2, 10 * p, [0, 1, 2, 3], [1, 2, 3])
    assert note.startswith("ZeRO-0 left out") and "--memory-per-rank" in note
    with pytest.raises(BadInput) as info:
        work.fitting_stages(p, 4, 2, p, [0, 1, 2, 3], "m")
    assert "fits no ZeRO stage" in str(info.value) and "--memory-per-rank" in str(info.value)


def _plan(**kw):
    base = dict(layers=2, hidden=64, vocab=1000, model="m", ds_config="x.json", world=2, backend="gloo",
                stages=[0, 2], reduce_buckets=[20_000, 300_000, 2_000_000], allgather_buckets=[100, 500_000_000],
                grad_accums=[1], dtypes=["bfloat16"], prefetch_bucket=50_000_000, multi_rank_allreduce=True,
                scale=1.0, out="o", run_id="r")
    base.update(kw)
    return work.TunePlan(**base)


def test_same_schedule_candidates_merged_nearest_the_user():
    user = Row(2, 200_000, 500_000_000, 1, "bfloat16", 0.0)
    rows = work.candidates(_plan(), user)
    # stage 0 ignores reduce_bucket_size; allgather_bucket_size never changes the schedule;
    # 3e5 and 2e6 are both one bucket for this 228k-parameter model: 3e5 is nearer the user's 2e5;
    # the user's own 2e5 (two buckets) is a candidate though the grid does not hold it
    got = sorted((r.stage, r.reduce_bucket, r.allgather_bucket) for r in rows)
    assert got == [(0, 300_000, 500_000_000), (2, 20_000, 500_000_000), (2, 200_000, 500_000_000),
                   (2, 300_000, 500_000_000)]


def test_scaled_prediction_terms_shrink():
    plan = _plan()
    row = Row(2, 20_000, 500_000_000, 1, "bfloat16", 0.0)
    full, half = work.comms(plan, row, 1), work.comms(plan, row, 0.5)
    assert sum(s * n for _, s, n in half) < sum(s * n for _, s, n in full)
    assert [op for op, _, _ in half] == [op for op, _, _ in full]


@pytest.mark.parametrize("model, expected", [
    ("1.3b", ["--model", "1.3b", "--vocab", "1000"]),  # named as the user asked, not custom-2x64
    ("custom-2x64", ["--layers", "2", "--hidden", "64", "--vocab", "1000"]),
])
def test_a_candidates_zero_run_names_the_model_as_the_user_did(model, expected, monkeypatch, tmp_path):
    seen = []

    def child(args, what, launcher):
        seen.append(args)
        raise RuntimeFailure("stop here")  # the run itself is test_tune.py's (integration)

    monkeypatch.setattr(work, "child", child)
    with pytest.raises(RuntimeFailure):
        work.measure(_plan(model=model, out=str(tmp_path)), Row(2, 20_000, 500_000_000, 1, "bfloat16", 0.0), 1)
    args = seen[0]
    start = args.index("--ds-config") + 2
    assert args[start:start + len(expected)] == expected
    assert ("--layers" in args) is model.startswith("custom")
