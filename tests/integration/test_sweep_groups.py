"""sweep --layout/--group/--split/--solo (issue #38; docs/LAYOUTS.md): every group of a dimension at
once on real gloo ranks, a row per group and kind of pass, the live line naming the slowest group
and the contention factor; bad input in one line, exit 2; the contention statistics alone."""

from __future__ import annotations

import glob

import numpy as np
import pandas as pd
import pytest
from helpers import cb, clean_env

from commbench.cli.app import main
from commbench.core.contention import aggregate_bps, contention
from commbench.core.layout import GroupWork, group_work
from commbench.harness.collectives import BY_NAME
from commbench.harness.plan import SweepPlan
from commbench.workloads.groupsweep import kept_sizes, shared_points, total_points

pytestmark = pytest.mark.integration  # real gloo ranks (moved from tests/unit)

POINT = ("sweep", "--nproc", "4", "--backend", "gloo", "-b", "64K", "-e", "64K", "-n", "3", "-w", "1",
         "--progress", "off", "--bind", "none")


def _rows(out) -> pd.DataFrame:
    return pd.read_parquet(glob.glob(str(out / "*.parquet"))[0])


def test_every_dp_and_tp_group_at_once_and_alone(tmp_path):
    # rank 3 enters every call 5 ms late: named per group, by its global rank (late at 2 points or more)
    proc = cb(*POINT, "-b", "32K", "--layout", "tp=2,dp=2", "--group", "dp,tp", "--solo", "--out", str(tmp_path),
              env=clean_env(COMMBENCH_TEST_FAULT="delay:3:5"), timeout=120, check=True)
    rows = _rows(tmp_path)
    groups = {(r.group_dim, r.group_index, r.group_ranks) for r in rows.itertuples()}
    # Megatron's order, tp fastest: tp groups are neighbours, dp groups one tp apart
    assert groups == {("dp", 0, "0,2"), ("dp", 1, "1,3"), ("tp", 0, "0,1"), ("tp", 1, "2,3")}
    assert sorted(rows.groupby(["group_dim", "group_index", "size_bytes"]).concurrent.apply(sorted).map(tuple)) == [
        (False, True)] * 8
    assert (rows.world_size == 2).all() and (rows.wrong == 0).all() and (rows.iters == 6).all()
    assert rows.rank_time_us.map(len).eq(2).all()
    assert rows[rows.concurrent].contention.between(0, 100).all() and rows[~rows.concurrent].contention.isna().all()
    lines = [line for line in proc.stdout.splitlines() if "contention" in line and not line.startswith("#")]
    assert len(lines) == 4 and all("Mann-Whitney p=" in line for line in lines), proc.stdout
    # both dimensions at once: a rank in a dp and a tp group times each in a thread of its own
    assert "Groups starting: dp all_reduce, 2 groups of 2 ranks; tp all_reduce, 2 groups of 2 ranks, all at once" \
        in proc.stdout
    assert "# dp group 1 [1,3]: rank 3 on host" in proc.stdout and "# tp group 1 [2,3]: rank 3 on host" in proc.stdout
    assert "dp group 0" not in proc.stdout and "tp group 0" not in proc.stdout
    assert "# dp: the slowest group at 2 points: dp" in proc.stdout
    assert "; median contention by group 0: " in proc.stdout


def test_pipeline_stages_send_to_their_neighbours(tmp_path):
    # rank 3, pipeline 1's second stage, corrupts what it received: that group's #wrong, exit 1
    proc = cb(*POINT, "--layout", "pp=2,dp=2", "--group", "pp", "--out", str(tmp_path),
              env=clean_env(COMMBENCH_TEST_FAULT="corrupt:3"), timeout=120)
    rows = _rows(tmp_path)
    assert proc.returncode == 1 and "#wrong 1" in proc.stdout, proc.stdout + proc.stderr
    assert list(rows.group_ranks) == ["0,2", "1,3"] and (rows.collective == "sendrecv").all()
    assert list(rows.wrong) == [0, 1] and rows.concurrent.all() and rows.contention.isna().all()
    assert "pp sendrecv, 2 groups of 2 ranks, all at once" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--layout", "tp=3"], "tp=3 = 3 ranks, but the world size is 4"),
    (["--layout", "xx=4"], "unknown dimension 'xx' in --layout"),
    (["--layout", "tp=2,dp=2", "--group", "pp"], "--group names pp, which --layout tp=2,dp=2 does not have"),
    (["--layout", "tp=4,dp=1", "--group", "dp"], "too few for all_reduce"),
    (["--split", "DIV 3"], "leaves rank 3 in a group of its own"),
    (["--split", "MOD 0"], "divides by 0"),
    (["--group", "dp"], "--group needs --layout"),
    (["--solo"], "--solo measures groups alone, and there are none"),
    (["--layout", "tp=2,dp=2", "--split", "MOD 2"], "give one of them"),
    (["--layout", "tp=2,dp=2", "--group", "dp:broadcast", "-r", "2"], "pick one below 2"),
    (["--layout", "tp=2,dp=2", "--collective", "all_gather"], "the collectives come from --group"),
])
def test_bad_layouts_are_one_line_exit_2(tmp_path, capsys, monkeypatch, args, message):
    # a launcher's variables, and an interface an earlier in-process --iface left set (its warning is a line)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "GLOO_SOCKET_IFNAME",
                "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as info:
        main(["sweep", "--nproc", "4", "--backend", "gloo", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err


def test_split_groups_run_the_sweeps_collectives():
    works = group_work(4, ["all_reduce", "all_gather"], split="AND 0x1")
    assert [(w.dim, w.collective, w.groups) for w in works] == [
        ("split", "all_reduce", ((0, 2), (1, 3))), ("split", "all_gather", ((0, 2), (1, 3)))]
    assert group_work(4, ["all_reduce"]) == ()
    # a split's rows call each group by its color, as nccl-tests' logs do (OR 1: colors 1 and 3)
    split = group_work(4, ["all_reduce"], split="OR 1")[0]
    assert split.groups == ((0, 1), (2, 3)) and (split.label(0), split.label(1)) == (1, 3)
    assert group_work(8, ["all_reduce"], "tp=2,pp=2,dp=auto")[0].groups == ((0, 2), (1, 3), (4, 6), (5, 7))
    # --order dp-tp: dp fastest, so dp groups are neighbours
    assert group_work(4, ["all_reduce"], "tp=2,dp=2", order="dp-tp", group="dp")[0].groups == ((0, 1), (2, 3))


def test_contention_factor_its_interval_and_verdict():
    rng = np.random.default_rng(1)
    solo = 1e-3 * (1 + 0.02 * rng.random(50))
    slowed = contention(2 * solo, solo)  # every group at once: twice the time, half the busbw
    assert slowed.factor == pytest.approx(0.5, rel=0.05) and slowed.verdict == "contended"
    assert slowed.low is not None and slowed.high is not None and slowed.low < slowed.factor < slowed.high
    assert slowed.p_value < 1e-6 and "contention 0.50 [" in slowed.text()
    same = contention(solo[::-1], solo)
    assert same.verdict == "unchanged" and same.factor == pytest.approx(1)
    few = contention([2e-3, 2.1e-3], [1e-3, 1.1e-3])  # too few iterations for an interval or a verdict
    assert few.low is None and few.verdict == "inconclusive"
    assert aggregate_bps(1000, [1e-3, 2e-3]) == pytest.approx(1.5e6)


def test_dimensions_run_together_placement_by_placement():
    plan = SweepPlan(sizes=[64, 1024, 4096], dtype="float32")
    works = [GroupWork("tp", "all_reduce", ((0, 1), (2, 3))), GroupWork("cp", "all_gather", ((0, 2), (1, 3))),
             GroupWork("pp", "sendrecv", ((0, 2), (1, 3)))]
    points = shared_points(plan, works)
    # all_reduce runs in place only, send/recv out of place only: their first placements run together
    assert points[:2] == [(64, ((0, True), (1, False), (2, False))), (64, ((1, True),))]
    assert len(points) == 6 and total_points(plan, works) == sum(len(a) for _, a in points) == 12
    # a split's groups of 4 and 2 ranks measure the sizes both keep, in lockstep (16-byte chunks)
    assert kept_sizes(SweepPlan(sizes=[32, 64, 128], dtype="float32"), BY_NAME["all_gather"], {4, 2}) == [64, 128]
