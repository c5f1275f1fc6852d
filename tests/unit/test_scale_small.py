"""The scale rehearsal (benchmarks/scale.py) at 32 hosts x 8 ranks: the same generator and the same
real analysis as at 1024 hosts, asserting that the planted slow hosts and links, failed hosts and
links and stragglers are named exactly; and the leave-one-out median that makes the straggler
analysis O(n log n) gives np.median(np.delete(x, r)) value for value."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from commbench.core.stragglers import late_at_point, median_of_others

HOSTS = 32
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scale():
    before = list(sys.path)
    try:  # the script puts benchmarks/ (for its `common`) on sys.path: taken off again
        spec = importlib.util.spec_from_file_location("scale_bench", BENCH / "scale.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = before


@pytest.fixture(scope="module")
def pairs(scale, tmp_path_factory):
    path = tmp_path_factory.mktemp("scale") / "pairs.parquet"
    made = scale.generate_pairs(HOSTS, path)
    return path, made, scale.analyse_pairs(path)


def test_the_pairs_run_has_one_row_per_direction_of_every_pair_then_the_confirmation_round(pairs):
    path, made, got = pairs
    assert made["main_rows"] == HOSTS * (HOSTS - 1)
    assert made["confirm_rows"] > 0
    table = pq.read_table(path, columns=["confirm", "status", "src_rank", "busbw_GBps"])
    assert table.num_rows == made["rows"]
    confirm = table.column("confirm").to_pylist()
    assert confirm[:made["main_rows"]] == [None] * made["main_rows"]  # measurement order: confirmation last
    assert set(confirm[made["main_rows"]:]) == {True}
    assert set(table.column("src_rank").to_pylist()) == {8 * i for i in range(HOSTS)}  # --hosts-only: local rank 0
    assert set(table.column("status").to_pylist()) == {None, "unreachable", "timeout"}


def test_the_ranking_singles_out_exactly_the_planted_slow_hosts(scale, pairs):
    _, _, got = pairs
    want = scale.expected_pairs(HOSTS)
    assert got["slow_hosts"] == want["slow_hosts"] and len(want["slow_hosts"]) == 3
    assert got["slow_send_only"] == want["slow_send_only"] and len(want["slow_send_only"]) == 1
    assert got["verdict"].startswith("slow hosts: " + ", ".join(want["slow_hosts"]) + " (")


def test_the_slowest_links_are_exactly_the_planted_links_and_blame_no_host(scale, pairs):
    _, _, got = pairs
    want = scale.expected_pairs(HOSTS)
    assert got["slow_links"] == want["slow_links"] and len(want["slow_links"]) == 4
    assert sorted(got["top_links"]) == want["slow_links"]


def test_the_fault_verdict_names_exactly_the_dead_and_hung_hosts_and_links_confirmed(scale, pairs):
    _, _, got = pairs
    want = scale.expected_pairs(HOSTS)
    assert got["named"] == want["named"]
    assert got["confirmed"] == sorted(" ".join(n.split()[:-1]) for n in want["named"])
    assert got["undecided"] is None


def test_the_straggler_analysis_names_exactly_the_planted_ranks(scale, tmp_path):
    path = tmp_path / "sweep.parquet"
    made = scale.generate_stragglers(HOSTS, path, repetitions=1)
    got = scale.analyse_stragglers(path)
    plant = scale.straggler_plant(HOSTS)
    assert made["ranks"] == HOSTS * 8
    assert got["stragglers"] == scale.expected_stragglers(HOSTS)
    assert plant["decoy"] not in got["stragglers"]  # late at 40% of the points: under MIN_SHARE
    host = scale.host_names(HOSTS)[plant["host_ranks"][0] // 8]
    assert host in got["hosts"]
    assert got["slow_hosts"] == [host] == [scale.expected_slow_host(HOSTS)]
    assert got["warning_count"] == 2  # the slow host once (not its 8 ranks one by one), the late rank
    assert got["warnings"][0].startswith(f"commbench: warning: straggler: host {host} arrives late: all 8 of its ranks")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64, 257])
def test_the_median_of_the_others_is_nps_median_without_that_value(n):
    rng = np.random.default_rng(n)
    for trial in range(20):
        x = rng.integers(0, 4, n).astype(float) if trial % 2 else rng.normal(100.0, 30.0, n)  # ties, and none
        want = np.array([np.median(np.delete(x, r)) for r in range(n)])
        assert np.array_equal(median_of_others(x), want)


def test_a_late_rank_among_8192_is_named_with_its_excess_over_the_others_median():
    rng = np.random.default_rng(1)
    skew = rng.exponential(10.0, 8192)
    skew[4242] = 5000.0
    hits = late_at_point(skew, time_us=3000.0)
    assert [h.rank for h in hits] == [4242]
    assert hits[0].excess_us == pytest.approx(5000.0 - np.median(np.delete(skew, 4242)))
