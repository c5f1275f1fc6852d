"""commbench.harness.plan: the size grid, the points of a sweep, validation and the stored plan."""

from pathlib import Path

import pytest

from commbench.harness.collectives import BY_NAME
from commbench.core.errors import BadInput
from commbench.core.results import make_run_id
from commbench.harness.plan import Point, SweepPlan, size_grid, validate
from commbench.core.units import parse_size

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt"


def fixture_sizes() -> list[int]:
    return [int(line.split()[0]) for line in FIXTURE.read_text().splitlines()
            if line.split() and line.split()[0].isdigit()]


def test_size_grid_is_the_nccl_tests_grid():
    # The fixture ran with: minBytes 8 maxBytes 134217728 step: 2(factor)
    grid = size_grid(8, parse_size("128M"), 2)
    assert len(grid) == 25
    assert grid == fixture_sizes()
    assert grid[0] == 8 and grid[-1] == 134217728


def test_size_grid_other_factors_and_bounds():
    assert size_grid(1, 100, 4) == [1, 4, 16, 64]
    assert size_grid(1024, 1024, 2) == [1024]
    assert size_grid(3, 30, 3) == [3, 9, 27]
    # A factor that does not grow a small size still advances by at least one byte.
    assert size_grid(1, 3, 1.5) == [1, 2, 3]


def test_size_grid_step_bytes_mode():
    assert size_grid(1024, 4096, 1, 1024) == [1024, 2048, 3072, 4096]
    assert size_grid(100, 350, 1, 100) == [100, 200, 300]
    # with a factor above 1 the step in bytes is not used, as in nccl-tests
    assert size_grid(8, 64, 2, 1000) == [8, 16, 32, 64]


def test_size_grid_rejects_min_above_max():
    with pytest.raises(BadInput, match="--min-bytes 2048 is larger than --max-bytes 1024"):
        size_grid(2048, 1024, 2)


@pytest.mark.parametrize("factor, step", [(0.5, None), (1, None), (1, 0), (0, None), (-2, None)])
def test_size_grid_rejects_bad_factor(factor, step):
    with pytest.raises(BadInput, match="--step-factor"):
        size_grid(8, 1024, factor, step)


def test_points_round_like_nccl_tests_and_drop_zero_and_duplicates():
    plan = SweepPlan(collectives=["all_gather"], sizes=[4, 16, 48, 960, 1000, 1001, 1007, 1008, 1023, 4096])
    grid = plan.points(BY_NAME["all_gather"], world=3)
    sizes = [pts[0].size_bytes for _, pts in grid]
    # 4 and 16 B round to 0 elements on 3 ranks; 48 B is the smallest; 960..1007 all round to 960 B,
    # 1008 and 1023 to 1008 B (count 1023 // 4 = 255 -> (255 // 12) * 4 = 84 per rank).
    assert sizes == [48, 960, 1008, 4080]
    assert [pts[0].requested_bytes for _, pts in grid] == [48, 960, 1008, 4096]
    lay, pts = grid[1]
    assert (lay.count, lay.send_numel, lay.recv_numel) == (80, 80, 240)
    assert pts == [Point("all_gather", 960, 960, 80, False), Point("all_gather", 960, 960, 80, True)]


def test_points_all_reduce_keeps_every_size_and_only_in_place():
    plan = SweepPlan(collectives=["all_reduce"], sizes=size_grid(8, 1024, 2), dtype="float16")
    grid = plan.points(BY_NAME["all_reduce"], world=8)
    assert [pts[0].size_bytes for _, pts in grid] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert [pts[0].count for _, pts in grid] == [4, 8, 16, 32, 64, 128, 256, 512]
    assert all([p.in_place for p in pts] == [True] for _, pts in grid)


def test_points_drop_sizes_below_one_element():
    plan = SweepPlan(collectives=["broadcast"], sizes=[1, 2, 3, 4, 8], dtype="float32")
    assert [pts[0].size_bytes for _, pts in plan.points(BY_NAME["broadcast"], 2)] == [4, 8]


@pytest.mark.parametrize("placement, name, flags", [
    ("both", "all_reduce", [True]), ("both", "all_gather", [False, True]), ("both", "reduce_scatter", [False, True]),
    ("both", "all_to_all", [False]), ("both", "broadcast", [True]), ("both", "reduce", [True]),
    ("both", "sendrecv", [False]), ("out", "all_gather", [False]), ("in", "all_gather", [True]),
    ("in", "all_to_all", []), ("out", "all_reduce", []),
])
def test_placements_for(placement, name, flags):
    plan = SweepPlan(collectives=[name], sizes=[1024], placement=placement)
    assert plan.placements_for(BY_NAME[name]) == flags


def test_validate_accepts_a_good_plan():
    validate(SweepPlan(collectives=["all_reduce", "all_gather", "broadcast"], sizes=[8, 1024], root=3), 4)


@pytest.mark.parametrize("root, world", [(4, 4), (-1, 4), (1, 1)])
def test_validate_rejects_root_out_of_range(root, world):
    plan = SweepPlan(collectives=["broadcast"], sizes=[1024], root=root)
    with pytest.raises(BadInput, match=rf"--root {root} is not a rank of this run \(0\.\.{world - 1}\)"):
        validate(plan, world)


def test_validate_rejects_sizes_that_all_round_to_zero():
    plan = SweepPlan(collectives=["all_reduce", "all_gather"], sizes=[8, 16, 32], dtype="float32")
    with pytest.raises(BadInput, match=r"all_gather on 4 ranks: raise --max-bytes to at least 64"):
        validate(plan, 4)
    validate(SweepPlan(collectives=["all_gather"], sizes=[8, 64]), 4)  # one size is enough


def test_validate_rejects_sendrecv_alone_on_one_rank_and_no_ranks():
    with pytest.raises(BadInput, match="sendrecv needs at least 2 ranks"):
        validate(SweepPlan(collectives=["sendrecv"], sizes=[1024]), 1)
    with pytest.raises(BadInput, match="world size 0"):
        validate(SweepPlan(collectives=["all_reduce"], sizes=[1024]), 0)


def test_sweep_plan_json_round_trip():
    plan = SweepPlan(collectives=["all_reduce", "all_to_all"], sizes=[8, 4096, 1 << 30], dtype="bfloat16", op="max",
                     root=1, placement="in", warmup=2, iters=None, time_budget=0.05, repetitions=3, check=False,
                     label="mtu9000-after", out="/tmp/x.parquet", run_id="20250101-000000-abcdef",
                     extra={"bucket_bytes": [1, 2], "note": "é"})
    text = plan.to_json()
    again = SweepPlan.from_json(text)
    assert again == plan
    assert again.to_json() == text
    assert SweepPlan.from_json(SweepPlan(collectives=["reduce"], sizes=[4], iters=7).to_json()).iters == 7


def test_make_run_id_shape():
    import datetime as dt
    import re

    rid = make_run_id(dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc))
    assert re.fullmatch(r"20250304-050607-[0-9a-f]{6}", rid)
