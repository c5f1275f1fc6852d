"""ZeRO step schedules: volumes against the ZeRO paper, bucketing, scaling, and CLI refusals."""

import pytest

from commbench.cli.app import main
from commbench.core.vocab import volume_factor
from commbench.workloads.zeroschedule import MODELS, PAPER_VOLUME, module_sizes, scaled, step_schedule


def volume(schedule, world):
    return sum(c.numel * volume_factor(c.op, world) for c in schedule)


# What DeepSpeed 0.19.8 issues per optimizer step, in P (docs/DEEPSPEED.md: measured with its
# comms logger): all-reduce counts 2(n-1)/n of its message, the other collectives (n-1)/n.
@pytest.mark.parametrize("world", [2, 8, 64])
@pytest.mark.parametrize("stage, micro, multi_rank, volume_p", [
    (0, 1, True, 2), (0, 8, True, 2),
    (1, 1, True, 3), (1, 8, True, 3), (1, 1, False, 2),
    (2, 1, True, 3), (2, 8, True, 17), (2, 8, False, 9),
    (3, 1, True, 3), (3, 8, True, 24),
])
def test_volume_per_rank_is_what_deepspeed_issues(stage, micro, multi_rank, volume_p, world):
    modules = module_sizes(*MODELS["1.3b"])
    p = sum(modules)
    sched = step_schedule(stage, modules, 500_000_000, 50_000_000, micro, multi_rank)
    assert volume(sched, world) == pytest.approx(volume_p * p * (world - 1) / world)


def test_the_paper_volumes_are_reached_where_deepspeed_can():
    """2P / 2P / 3P per micro-batch: stages 0 and 3 always, stage 1 with reduce-to-owner."""
    modules, world = module_sizes(*MODELS["gpt2-125m"]), 4
    p = sum(modules) * (world - 1) / world
    assert volume(step_schedule(0, modules, 500_000_000, 50_000_000), world) == pytest.approx(PAPER_VOLUME[0] * p)
    one = step_schedule(1, modules, 500_000_000, 50_000_000, 1, False)
    assert volume(one, world) == pytest.approx(PAPER_VOLUME[1] * p)
    assert volume(step_schedule(3, modules, 500_000_000, 50_000_000), world) == pytest.approx(PAPER_VOLUME[3] * p)


def test_the_1_3b_shape_has_1_3b_parameters():
    assert 1.3e9 < sum(module_sizes(*MODELS["1.3b"])) < 1.45e9
    assert 1.2e8 < sum(module_sizes(*MODELS["gpt2-125m"])) < 1.7e8


def test_buckets_count_elements():
    modules = [1000, 2000, 3000]
    sched = step_schedule(2, modules, reduce_bucket=2500, prefetch_bucket=10)
    # gradients all-reduced per bucket of reduce_bucket_size elements, then one all-gather
    assert [(c.op, c.numel) for c in sched] == [("all_reduce", 2500), ("all_reduce", 2500), ("all_reduce", 1000),
                                                ("all_gather", 6000)]
    owners = step_schedule(2, modules, reduce_bucket=2500, prefetch_bucket=10, multi_rank_allreduce=False)
    assert [c.op for c in owners] == ["reduce", "reduce", "reduce", "all_gather"]


def test_stage3_gathers_forward_and_backward_grouped_by_prefetch():
    sched = step_schedule(3, [100, 100, 300], reduce_bucket=10**9, prefetch_bucket=250)
    fwd = [c.numel for c in sched if c.phase == "forward"]
    bwd = [c.numel for c in sched if c.phase == "backward" and c.op == "all_gather"]
    assert fwd == [200, 300] and bwd == [300, 200]
    assert [c.op for c in sched if c.op == "reduce_scatter"] == ["reduce_scatter"]


def test_scaling_keeps_the_structure_and_splits_evenly():
    sched = step_schedule(3, module_sizes(2, 64, 256), 10**6, 5000)
    small = scaled(sched, 0.1, itemsize=4, world=3)
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
@pytest.mark.failure(row="model-larger-than-memory-zero")
def test_bad_zero_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        main(["zero", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err
