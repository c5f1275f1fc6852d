"""`commbench nccl-tests side-by-side`: commbench's sweep next to nccl-tests, from recorded outputs.

The nccl-tests side is a real log (tests/data/nccl-tests/all_reduce_v2.19.4_1node_8xA100.txt,
8 A100s, nccl-tests 2.19.4), imported as `commbench nccl-tests import` imports it. No commbench
run on 8 GPUs is recorded, so the commbench side is that same run with each point's time scaled
by a known factor and its busbw recomputed: the expected ratio of every point is then known
exactly, and the join, the goal thresholds, the verdict and the exit codes are checked against it.
The GPU run itself (benchmarks/gpu_check.sh) puts real commbench rows on the left.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from commbench.analysis.ncclside import sidebyside
from commbench.core.errors import BadInput
from commbench.core.results import read_results
from commbench.integrations.nccl_tests.importer import import_files

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "nccl-tests")
A100 = os.path.join(DATA, "all_reduce_v2.19.4_1node_8xA100.txt")
ONE_RANK = os.path.join(DATA, "all_reduce_single_rank_busbw0_partial.txt")
MiB, KiB = 2**20, 2**10


def _imported(path, out) -> str:
    assert import_files([path], str(out), echo=lambda m: None, warn=lambda m: None) == 0
    return str(out)


def _slower(size: int) -> float:
    """commbench's time over nccl-tests' per size: 2% slower from 64 MiB (ratio 0.980, meets 0.97),
    4% below 64 KiB (within 5%), 10% at 8 B (a miss), 30% in between (no goal there)."""
    if size == 8:
        return 1.10
    if size < 64 * KiB:
        return 1.04
    return 1.02 if size >= 64 * MiB else 1.30


def _commbench_side(nt_path, out, slower=_slower, plan=None) -> str:
    frame = pd.read_parquet(nt_path)
    factor = frame["size_bytes"].map(slower)
    frame["time_us"] = frame["time_us"] * factor
    frame["busbw_GBps"] = frame["busbw_GBps"] / factor
    frame["workload"] = "sweep"
    frame["plan"] = json.dumps(plan or {"workload": "sweep", "cuda_graph": 0})
    frame.to_parquet(out)
    return str(out)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sbs")
    nt = _imported(A100, tmp / "nccl-tests.parquet")
    return _commbench_side(nt, tmp / "commbench.parquet"), nt, tmp


def _result(cb, nt):
    return sidebyside.side_by_side(read_results([cb]), read_results([nt]), (cb, nt))


def test_every_point_gets_its_ratio_and_the_goal_of_its_size(sides):
    cb, nt, _ = sides
    s = _result(cb, nt)
    assert s.world_size == 8 and s.only_commbench == 0 and s.only_nccl_tests == 0
    assert len(s.pairs) == 50  # 25 sizes, out-of-place and in-place
    for p in s.pairs:
        assert p.ratio == pytest.approx(1 / _slower(p.size_bytes))
        assert p.commbench_busbw / p.nccl_tests_busbw == pytest.approx(p.ratio, rel=1e-3)  # busbw ratio = time ratio
        if p.size_bytes >= 64 * MiB:
            assert (p.goal, p.met) == ("busbw >= 0.97", True)
        elif p.size_bytes < 64 * KiB:
            assert p.goal == "time within 5%" and p.met is (p.size_bytes != 8)
        else:
            assert (p.goal, p.met) == ("", None)
    assert [(p.size_bytes, p.in_place) for p in s.missed] == [(8, False), (8, True)]
    assert s.verdict == f"goal missed at 2 of {len(s.judged)} points" and s.exit_code() == 1
    assert "NCCL 2.19.3" in s.nccl_tests and "plain loop" in s.nccl_tests


def test_the_table_marks_the_misses_and_says_the_verdict(sides):
    cb, nt, _ = sides
    text = sidebyside.render_table(_result(cb, nt))
    lines = text.splitlines()
    eight = [ln for ln in lines if ln.startswith("all_reduce") and ln.split()[1:3] == ["8", "B"]]
    assert len(eight) == 2 and all(ln.endswith("MISS") for ln in eight)
    assert all("0.909" in ln for ln in eight)
    big = [ln for ln in lines if " 128 MiB " in ln]
    assert len(big) == 2 and all(ln.endswith("ok") and "0.980" in ln for ln in big)
    assert lines[-1].startswith("verdict: goal missed at 2 of")
    md = sidebyside.render_markdown(_result(cb, nt))
    assert "| all_reduce | 8 B | out-of-place |" in md and "MISS |" in md


def test_within_the_goal_everywhere_exits_0(sides, tmp_path):
    _, nt, _ = sides
    cb = _commbench_side(nt, tmp_path / "good.parquet", slower=lambda size: 1.01)
    s = _result(cb, nt)
    assert not s.missed and s.exit_code() == 0 and s.verdict.startswith("goal met at all")


def test_one_rank_compares_time_per_operation_and_says_why(tmp_path):
    nt = _imported(ONE_RANK, tmp_path / "one.parquet")
    cb = _commbench_side(nt, tmp_path / "cb.parquet", slower=lambda size: 0.99)
    s = _result(cb, nt)
    assert s.world_size == 1 and all(p.nccl_tests_busbw == 0 for p in s.pairs)
    assert all(p.met is None for p in s.pairs)  # 128..512 MiB: busbw's goal needs two ranks
    assert any("busbw is 0 by definition" in n for n in s.notes)
    assert s.exit_code() == 0 and s.verdict == "no point has a goal"


@pytest.mark.parametrize("case, message", [
    ("world", "commbench ran 1 ranks and nccl-tests 8: measure both on the same GPUs"),
    ("graph", "commbench used --cuda-graph and nccl-tests ran without -G: pair like with like"),
    ("gloo", "ran on gloo, and nccl-tests measures NCCL: run the sweep with --backend nccl on the GPUs"),
    ("no sweep", "holds no commbench sweep rows with a time: pass the parquet file of `commbench sweep`"),
    ("no point", "no point is on both sides (commbench: all_reduce at 8 B..128 MiB; nccl-tests: all_reduce "
                 "at 256 MiB..512 MiB)"),
])
def test_sides_that_cannot_be_paired_are_refused_with_the_fix(sides, tmp_path, case, message):
    cb, nt, _ = sides
    one = _imported(ONE_RANK, tmp_path / "one.parquet")
    if case == "world":
        cb = _commbench_side(one, tmp_path / "cb1.parquet")
    elif case == "graph":
        cb = _commbench_side(nt, tmp_path / "graph.parquet", plan={"workload": "sweep", "cuda_graph": 20})
    elif case == "gloo":
        gloo = pd.read_parquet(_commbench_side(nt, tmp_path / "cb.parquet"))
        gloo["backend"] = "gloo"
        gloo.to_parquet(tmp_path / "gloo.parquet")
        cb = str(tmp_path / "gloo.parquet")
    elif case == "no sweep":
        cb = nt
    else:
        one8 = pd.read_parquet(one)
        one8["world_size"] = 8
        one8 = one8[one8.size_bytes > 128 * MiB]
        one8.to_parquet(tmp_path / "one8.parquet")
        cb, nt = _commbench_side(nt, tmp_path / "cb.parquet"), str(tmp_path / "one8.parquet")
    with pytest.raises(BadInput) as refused:
        _result(cb, nt)
    assert message in str(refused.value)


def test_the_command_prints_stores_and_exits_by_the_goal(sides, tmp_path, cli):
    cb, nt, _ = sides
    out = tmp_path / "ratios.csv"
    r = cli("nccl-tests", "side-by-side", cb, nt, "--format", "csv", "--out", str(out))
    assert r.returncode == 1, r.stderr
    stored = pd.read_csv(out)
    assert len(stored) == 50 and set(stored.columns) >= {"collective", "size_bytes", "ratio", "goal", "met"}
    assert stored.loc[stored.size_bytes == 8, "met"].tolist() == [False, False]
    assert r.stdout == out.read_text()
    again = cli("nccl-tests", "side-by-side", cb, nt, "--out", str(out))
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "already exists" in again.stderr and "--force" in again.stderr
    swapped = cli("nccl-tests", "side-by-side", nt, cb)
    assert swapped.returncode == 2 and "holds no commbench sweep rows" in swapped.stderr
    assert "Traceback" not in again.stderr + swapped.stderr
