"""ZeRO step schedules: volumes against the ZeRO paper, bucketing, scaling, and CLI refusals."""

import pytest

from commbench.cli import main
from commbench.workloads.zero import (MODELS, PAPER_VOLUME, module_sizes, scaled, step_schedule,
                                      volume_factor)


def volume(schedule, world):
    return sum(c.numel * volume_factor(c.op, world) for c in schedule)


@pytest.mark.parametrize("world", [2, 8, 64])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_volume_per_rank_is_the_zero_paper_s(stage, world):
    modules = module_sizes(*MODELS["1.3b"])
    p = sum(modules)
    sched = step_schedule(stage, modules, 500_000_000, 500_000_000, 50_000_000)
    assert volume(sched, world) == pytest.approx(PAPER_VOLUME[stage] * p * (world - 1) / world)


def test_the_1_3b_shape_has_1_3b_parameters():
    assert 1.3e9 < sum(module_sizes(*MODELS["1.3b"])) < 1.45e9
    assert 1.2e8 < sum(module_sizes(*MODELS["gpt2-125m"])) < 1.7e8


def test_buckets_count_elements():
    modules = [1000, 2000, 3000]
    sched = step_schedule(2, modules, reduce_bucket=2500, allgather_bucket=4000, prefetch_bucket=10)
    assert [(c.op, c.numel) for c in sched] == [("reduce", 2500), ("reduce", 2500), ("reduce", 1000),
                                                ("all_gather", 4000), ("all_gather", 2000)]


def test_stage3_gathers_forward_and_backward_grouped_by_prefetch():
    sched = step_schedule(3, [100, 100, 300], reduce_bucket=10**9, allgather_bucket=10**9, prefetch_bucket=250)
    fwd = [c.numel for c in sched if c.phase == "forward"]
    bwd = [c.numel for c in sched if c.phase == "backward" and c.op == "all_gather"]
    assert fwd == [200, 300] and bwd == [300, 200]
    assert [c.op for c in sched if c.op == "reduce_scatter"] == ["reduce_scatter"]


def test_scaling_keeps_the_structure_and_splits_evenly():
    sched = step_schedule(3, module_sizes(2, 64, 256), 10**6, 10**6, 5000)
    small = scaled(sched, 0.1, world=3)
    assert [c.op for c in small] == [c.op for c in sched]
    assert all(c.numel % 12 == 0 and c.numel >= 12 for c in small)


@pytest.mark.parametrize("args, message", [
    (["--model", "13b"], "unknown --model"),
    (["--layers", "4"], "go together"),
    (["--stages", "4"], "ZeRO stages are 0, 1, 2 and 3"),
    (["--stages", "a"], "not a list of stages"),
    (["--scale", "2"], "must be in (0, 1]"),
    (["--scale", "x"], "not a number"),
    (["--ds-config", "/nonexistent/ds.json"], "does not exist"),
    (["--scale", "1", "--model", "7b"], "lower --scale"),
])
def test_bad_zero_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        main(["zero", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err
