"""zero --layout tp=2 (issue #38; docs/LAYOUTS.md): on 4 real gloo ranks both data-parallel groups
run the ZeRO step at once, each over the parameters it holds (P / tp), a row per group with its
dp columns; with --solo each alone too; bad layouts refused before any rank starts."""

from __future__ import annotations

import glob

import pandas as pd
import pytest
from helpers import cb

from commbench.core.errors import BadInput
from commbench.core.layout import data_parallel
from commbench.workloads.zero import ZeroPlan, ZeroWorkload

pytestmark = pytest.mark.integration  # real gloo ranks (moved from tests/unit)

ZERO = ("zero", "--nproc", "4", "--backend", "gloo", "--stages", "1", "--scale", "0.001", "-n", "2", "-w", "1",
        "--progress", "off", "--bind", "none")


def _rows(out) -> pd.DataFrame:
    return pd.read_parquet(glob.glob(str(out / "*.parquet"))[0])


def test_both_dp_groups_run_the_step_at_once_over_p_over_tp(tmp_path):
    proc = cb(*ZERO, "--layout", "tp=2", "--solo", "--out", str(tmp_path / "groups"), timeout=120, check=True)
    rows = _rows(tmp_path / "groups")
    assert sorted((r.group_dim, r.group_index, r.group_ranks, r.concurrent) for r in rows.itertuples()) == [
        ("dp", 0, "0,2", False), ("dp", 0, "0,2", True), ("dp", 1, "1,3", False), ("dp", 1, "1,3", True)]
    assert (rows.world_size == 2).all() and (rows.iters == 4).all()  # two passes of -n 2 a kind
    assert rows[rows.concurrent].contention.notna().all() and rows[~rows.concurrent].contention.isna().all()
    assert "In 2 data-parallel groups of 2 ranks, all at once" in proc.stdout and "dp1 [1,3]" in proc.stdout
    # ZeRO-1's paper volume, 2P (n-1)/n, over what a dp group holds: P / tp of the --scale'd model, n = 2
    held = ZeroWorkload(ZeroPlan(layout="tp=2", scale=0.001))
    assert held.group_size(4) == 2
    assert (rows.paper_bytes_per_rank == int(2 * sum(held.modules()) * 0.001 * 2 * (1 / 2))).all()


def test_the_schedule_holds_p_over_tp_x_pp():
    zero = ZeroWorkload(ZeroPlan(layout="tp=2,pp=2"))
    assert zero.group_size(8) == 2 and zero.shards == 4
    assert sum(zero.modules()) == pytest.approx(sum(ZeroWorkload(ZeroPlan()).modules()) / 4, rel=1e-6)


@pytest.mark.parametrize("kw, words", [
    (dict(layout="tp=4"), "leaves dp groups of 1 rank"),
    (dict(layout="cp=2"), "cp is not modelled"),
    (dict(layout="tp=2", group="tp"), "runs in the dp groups only"),
    (dict(split="MOD 2"), "--split has none"),
    (dict(group="dp"), "--group needs --layout"),
])
def test_layouts_zero_cannot_run_are_refused(kw, words):
    with pytest.raises(BadInput, match=words):
        data_parallel(4, "zero", **kw)


def test_a_refusal_is_one_line_before_any_rank(tmp_path):
    proc = cb(*ZERO, "--layout", "tp=3", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp_path.glob("*.parquet"))
