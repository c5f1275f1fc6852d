"""Per-rank timing and straggler detection with synthetic numbers (no processes): the arrival
skew of one rank from its own and the slowest times, which ranks stand out at a point for 2, 3,
4 and more ranks, the rule over points, the warning's words, the test-only delay switch, and
that files without the per-rank columns still read, compare and report."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commbench.harness import faults
from commbench.core import stragglers
from commbench.harness import timing
from commbench.analysis.compare.compare import compare_frames
from commbench.core.errors import BadInput
from commbench.analysis.report.report import write_report
from commbench.core.results import SCHEMA, read_results
from commbench.harness.session import Measurement, RankTimes, Timing, rank_columns
from commbench.core.stragglers import find, late_at_point, rank_summary, robust_z, straggler_warnings

from unit.synthetic import make_rows, write

HOSTS3 = ["node01", "node01", "node02"]


def test_skew_is_the_slowest_ranks_time_minus_its_own_per_iteration_then_the_median():
    own = [1.0, 2.0, 3.0, 10.0]  # a late rank spends less time inside than the slowest
    slowest = [5.0, 5.0, 4.0, 10.0]
    t, skew = rank_summary(own, slowest)
    assert t == 2.5
    assert skew == 2.0  # median of [4, 3, 1, 0]; not median(slowest) - median(own) = 2.5
    assert rank_summary([], []) == (0.0, 0.0)


def test_the_slowest_rank_in_every_iteration_has_zero_skew():
    assert rank_summary([3.0, 4.0], [3.0, 4.0])[1] == 0.0


def test_robust_z_is_normal_scaled_and_infinite_when_the_others_agree():
    z = robust_z([1.0, 2.0, 3.0, 4.0, 100.0])
    assert z[4] == pytest.approx((100 - 3) / (1.4826 * 1.0), rel=1e-3)
    z = robust_z([0.0, 0.0, 0.0, 50.0])
    assert list(z) == [0.0, 0.0, 0.0, math.inf]


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_one_late_rank_is_named_at_a_point_whatever_the_world_size(world):
    skew = [30.0 + 10 * r for r in range(world)]
    skew[world - 1] = 20_000.0
    hits = late_at_point(skew, time_us=22_000.0)
    assert [h.rank for h in hits] == [world - 1]
    assert hits[0].excess_us == pytest.approx(20_000.0 - np.median(skew[:-1]))
    assert (hits[0].z is None) == (world < stragglers.MIN_WORLD_FOR_Z)


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_noise_below_the_floor_names_nobody(world):
    rng = np.random.default_rng(world)
    for _ in range(200):
        skew = rng.uniform(0.0, 90.0, size=world)  # idle-machine jitter: tens of microseconds
        assert late_at_point(skew, time_us=150.0) == []


def test_the_floor_grows_with_the_points_time():
    # 2 ms late is a straggler at a 3 ms point, not at a 1 s point (within the share REL_FLOOR)
    assert [h.rank for h in late_at_point([0.0, 0.0, 2000.0], time_us=3000.0)] == [2]
    assert late_at_point([0.0, 0.0, 2000.0], time_us=1e6) == []
    assert late_at_point([0.0, 90.0], time_us=10.0) == []  # below ABS_FLOOR_US


def test_with_many_ranks_the_robust_z_must_agree():
    # a wide spread over 8 ranks: the largest is far above the others' median, not an outlier
    skew = [0.0, 400.0, 800.0, 1200.0, 1600.0, 2000.0, 2400.0, 2900.0]
    assert late_at_point(skew, time_us=1000.0) == []
    # half the ranks late together is not one rank standing out
    assert late_at_point([0.0, 0.0, 5000.0, 5000.0], time_us=6000.0) == []


def test_unusable_skews_name_nobody():
    assert late_at_point([5000.0], time_us=100.0) == []
    assert late_at_point([0.0, math.nan, 5000.0], time_us=100.0) == []


def rows_with(skews: list[list[float] | None], time_us: float = 22_000.0) -> list[dict]:
    return [{"rank_skew_us": s, "time_us": time_us} for s in skews]


def test_a_rank_late_at_most_points_is_a_straggler_with_its_host():
    late = [10.0, 20.0, 20_300.0]
    found = find(rows_with([late] * 6), HOSTS3)
    assert found == [stragglers.Straggler(rank=2, host="node02", late_points=6, points=6,
                                          excess_us=pytest.approx(20_285.0), z=None)]


def test_one_noisy_point_is_not_a_straggler():
    quiet = [10.0, 20.0, 30.0]
    assert find(rows_with([quiet] * 5 + [[10.0, 9000.0, 20.0]]), HOSTS3) == []
    # with 2 points both must agree; one point alone never names a rank (one stall can make it)
    assert find(rows_with([quiet, [0.0, 0.0, 9000.0]], time_us=10_000.0), HOSTS3) == []
    assert find(rows_with([[0.0, 0.0, 9000.0]], time_us=10_000.0), HOSTS3) == []
    assert [s.rank for s in find(rows_with([[0.0, 0.0, 9000.0]] * 2, time_us=10_000.0), HOSTS3)] == [2]


def test_points_of_few_iterations_do_not_count():
    late = [10.0, 20.0, 20_000.0]
    rows = rows_with([late] * 3)
    for row in rows:
        row["iters"] = 2  # a median of 2 iterations is one scheduler stall away from any value
    assert find(rows, HOSTS3) == []
    rows[0]["iters"] = rows[1]["iters"] = 5
    assert [(s.rank, s.late_points, s.points) for s in find(rows, HOSTS3)] == [(2, 2, 2)]


def test_half_of_the_points_is_enough():
    late, quiet = [10.0, 20.0, 20_000.0], [10.0, 20.0, 30.0]
    assert [s.rank for s in find(rows_with([late, quiet] * 3), HOSTS3)] == [2]
    assert find(rows_with([late, quiet, quiet] * 2), HOSTS3) == []


def test_rows_without_skews_are_left_out_of_the_count():
    late = [10.0, 20.0, 20_000.0]
    rows = rows_with([late, None, float("nan"), [1.0, 2.0], late])  # broadcast, an old file, another world
    (s,) = find(rows, HOSTS3)
    assert (s.late_points, s.points) == (2, 2)
    assert find(rows_with([None, None]), HOSTS3) == []


def test_the_warning_names_rank_host_effect_points_and_z():
    (line,) = straggler_warnings(rows_with([[10.0, 20.0, 20_300.0]] * 4), HOSTS3)
    assert line == ("commbench: warning: straggler: rank 2 on host node02 arrives late: +20.3 ms median arrival "
                    "skew over the other ranks at 4 of 4 points (robust z needs 4 ranks or more: compared with "
                    "the other ranks' median)")
    hosts = [f"n{i}" for i in range(6)]
    (line,) = straggler_warnings(rows_with([[10.0, 12.0, 15.0, 11.0, 52_000.0, 14.0]] * 3, 60_000.0), hosts)
    assert "rank 4 on host n4 arrives late: +52.0 ms" in line and "at 3 of 3 points (robust z " in line
    z = float(line.rsplit("robust z ", 1)[1].rstrip(")"))
    assert z > stragglers.Z_MIN


def test_a_quiet_run_gives_no_warning():
    rng = np.random.default_rng(7)
    rows = rows_with([list(rng.exponential(50.0, size=3)) for _ in range(30)], time_us=400.0)
    assert straggler_warnings(rows, HOSTS3) == []


# --- slow hosts: all ranks of one host late together ------------------------------------------------

HOSTS2x2 = ["a", "a", "b", "b"]


def test_a_slow_host_of_two_is_named_where_the_rank_rule_sees_half_the_ranks_late():
    rows = rows_with([[10.0, 30.0, 20_100.0, 20_200.0]] * 4)
    assert find(rows, HOSTS2x2) == []  # half the ranks late: none stands out among the ranks
    (slow,) = stragglers.find_hosts(rows, HOSTS2x2)
    assert slow == stragglers.SlowHost(host="b", ranks=(2, 3), late_points=4, points=4,
                                       excess_us=pytest.approx(20_090.0), z=None)
    assert straggler_warnings(rows, HOSTS2x2) == [
        "commbench: warning: straggler: host b arrives late: all 2 of its ranks (2-3) at least +20.1 ms behind "
        "the other hosts' ranks (median arrival skew) at 4 of 4 points (robust z needs 4 hosts or more: "
        "compared with the other hosts' median)"]


def test_one_late_rank_on_a_host_names_the_rank_not_the_host():
    rows = rows_with([[10.0, 20.0, 30.0, 20_000.0]] * 4)  # rank 3 late, rank 2 on the same host is not
    assert stragglers.find_hosts(rows, HOSTS2x2) == []
    (line,) = straggler_warnings(rows, HOSTS2x2)
    assert line.startswith("commbench: warning: straggler: rank 3 on host b arrives late: +20.0 ms")


def test_with_many_hosts_one_slow_host_is_one_line_with_its_z():
    hosts = [f"n{h}" for h in range(8) for _ in range(2)]  # 8 hosts x 2 ranks
    skew = [10.0 + 3 * r for r in range(16)]
    skew[6] = skew[7] = 15_000.0  # host n3
    rows = rows_with([skew] * 5, time_us=20_000.0)
    assert {s.rank for s in find(rows, hosts)} == {6, 7}  # the rank rule names both ranks...
    (line,) = straggler_warnings(rows, hosts)  # ...the warning names their host once
    assert line.startswith("commbench: warning: straggler: host n3 arrives late: all 2 of its ranks (6-7) at least +")
    assert "at 5 of 5 points (robust z " in line and "over the hosts)" in line


def test_hosts_of_one_rank_are_left_to_the_rank_rule():
    rows = rows_with([[10.0, 20.0, 20_300.0]] * 4)
    assert stragglers.find_hosts(rows, HOSTS3) == []  # node02 holds rank 2 alone
    assert stragglers.find_hosts(rows, ["x", "y", "z"]) == []
    assert stragglers.find_hosts(rows_with([[10.0, 20.0, 20_000.0, 20_000.0]] * 4), ["a"] * 4) == []


def test_quiet_hosts_are_not_named():
    rng = np.random.default_rng(11)
    rows = rows_with([list(rng.exponential(50.0, size=4)) for _ in range(30)], time_us=400.0)
    assert straggler_warnings(rows, HOSTS2x2) == []


# --- from a results file: each rank's host (rank_host) and the report's fact -------------------------

def test_rank_hosts_come_from_the_rank_host_index_into_hosts():
    row = {"hosts": np.array(["n1", "n2"]), "rank_host": np.array([0, 1, 0, 1], dtype=np.int32)}
    assert stragglers.rank_hosts(row) == ["n1", "n2", "n1", "n2"]  # round-robin placement, exactly
    assert stragglers.rank_hosts({"hosts": ["n1"], "rank_host": None}) is None  # an older file
    assert stragglers.rank_hosts({"hosts": ["n1"], "rank_host": float("nan")}) is None
    assert stragglers.rank_hosts({"hosts": ["n1"], "rank_host": [0, 3]}) is None  # an index past hosts


def slow_host_rows(skew, n=4):
    return [{"rank_skew_us": skew, "rank_host": [0, 0, 1, 1], "hosts": ["a", "b"], "time_us": 22_000.0,
             "iters": 20}] * n


def test_a_runs_findings_are_judged_again_from_its_rows():
    texts, points = stragglers.run_findings(slow_host_rows([10.0, 30.0, 20_100.0, 20_200.0]))
    assert points == 4 and texts == [
        "host b arrives late: all 2 of its ranks (2-3) at least +20.1 ms behind the other hosts' ranks (median "
        "arrival skew) at 4 of 4 points (robust z needs 4 hosts or more: compared with the other hosts' median)"]
    assert stragglers.run_findings(slow_host_rows([10.0, 30.0, 20.0, 15.0])) == ([], 4)
    old = [{k: v for k, v in r.items() if k != "rank_host"} for r in slow_host_rows([0.0, 0.0, 9e3, 9e3])]
    assert stragglers.run_findings(old) is None  # no rank_host: the file cannot say which rank ran where
    assert stragglers.run_findings([{**r, "iters": 2} for r in slow_host_rows([0.0] * 4)]) is None  # no usable point


def test_the_report_shows_a_runs_late_arrivals_from_the_file(tmp_path, undrawn):
    from commbench.analysis.report.summary import run_facts

    rows = make_rows(hosts=("a", "b"), repetitions=1)
    for r in rows:
        r["rank_skew_us"] = [10.0, 30.0, 20_100.0, 20_200.0] if r["collective"] == "all_reduce" else None
        r["rank_host"], r["world_size"], r["time_us"] = [0, 0, 1, 1], 4, 22_000.0
    path = write(tmp_path / "late.parquet", rows)
    df = read_results([path])
    facts = dict(run_facts(df.iloc[0].to_dict(), df))
    assert facts["late arrivals"].startswith("host b arrives late: all 2 of its ranks (2-3) at least +20.1 ms")
    html = write_report([path], out=tmp_path / "r.html")[0].read_text()
    assert "late arrivals" in html and "host b arrives late: all 2 of its ranks (2-3)" in html
    md = write_report([path], out=tmp_path / "r.md")[0].read_text()
    assert "| late arrivals | host b arrives late: all 2 of its ranks (2-3)" in md

    for r in rows:
        r["rank_skew_us"] = [10.0, 30.0, 20.0, 15.0] if r["collective"] == "all_reduce" else None
    quiet = read_results([write(tmp_path / "quiet.parquet", rows)])
    assert dict(run_facts(quiet.iloc[0].to_dict(), quiet))["late arrivals"] == (
        "none: no rank or host stood out (10 points with per-rank timing)")
    for r in rows:
        del r["rank_host"]
    older = read_results([write(tmp_path / "older.parquet", rows)])
    assert "late arrivals" not in dict(run_facts(older.iloc[0].to_dict(), older))


def test_durations_read_in_their_unit():
    assert [stragglers.format_us(v) for v in (850.0, 20_300.0, 2_500_000.0)] == ["850 us", "20.3 ms", "2.50 s"]


# --- the runner's columns ------------------------------------------------------------------------

def test_rank_columns_are_microseconds_indexed_by_rank():
    cols = rank_columns(RankTimes([0.001, 0.002], [0.0, 0.0005]))
    assert cols == {"rank_time_us": [1000.0, 2000.0], "rank_skew_us": [0.0, 500.0]}
    assert rank_columns(RankTimes([0.001], None)) == {"rank_time_us": [1000.0], "rank_skew_us": None}
    assert rank_columns(None) == {"rank_time_us": None, "rank_skew_us": None}


def test_timing_unpacks_as_samples_and_iters_and_makes_a_measurement():
    t = Timing([0.1, 0.2], 2, RankTimes([0.1, 0.1], [0.0, 0.0]))
    samples, iters = t
    assert (samples, iters) == ([0.1, 0.2], 2)
    assert t.measurement(3) == Measurement([0.1, 0.2], 2, 3, t.ranks)


# --- the test-only delay switch -------------------------------------------------------------------

def test_no_fault_keeps_the_timer_itself(monkeypatch):
    monkeypatch.delenv("COMMBENCH_TEST_FAULT", raising=False)
    timer = timing.CpuTimer()
    assert faults.late_timer(timer, 0) is timer
    monkeypatch.setenv("COMMBENCH_TEST_FAULT", "delay:2:20")
    assert faults.late_timer(timer, 1) is timer  # another rank is the late one
    assert faults.delay_s(2) == 0.02
    monkeypatch.setenv("COMMBENCH_TEST_FAULT", "delay:2+3:20")  # two ranks: one host's, say
    assert [faults.delay_s(r) for r in range(4)] == [0.0, 0.0, 0.02, 0.02]


@pytest.mark.parametrize("spec", ["delay:2", "delay:x:20", "delay:2:abc", "delay:-1:20", "delay:1:-5", "delay:1:nan",
                                  "delay:2+:20", "delay:2+-1:20"])
def test_a_malformed_delay_is_bad_input(monkeypatch, spec):
    monkeypatch.setenv("COMMBENCH_TEST_FAULT", spec)
    with pytest.raises(BadInput, match="delay:RANK:MILLISECONDS"):
        faults.delay_s(0)


def test_the_late_rank_sleeps_before_each_call_outside_its_own_timed_span(monkeypatch):
    clock = {"now": 0.0}
    log = []

    def sleep(seconds):
        log.append(("sleep", seconds))
        clock["now"] += seconds

    def call():
        log.append(("call",))
        clock["now"] += 0.001

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["now"])
    monkeypatch.setattr(faults.time, "sleep", sleep)
    monkeypatch.setenv("COMMBENCH_TEST_FAULT", "corrupt:0,delay:1:20")
    timer = faults.late_timer(timing.CpuTimer(), 1)
    assert isinstance(timer, faults.LateTimer)
    samples = timer.run(call, 3)
    assert samples == pytest.approx([0.001] * 3)  # the 20 ms are not in its own times
    assert log == [("sleep", 0.02), ("call",)] * 3


# --- files without the columns ---------------------------------------------------------------------

def test_files_without_the_per_rank_columns_read_compare_and_report(tmp_path, undrawn):
    old_schema = pa.schema([f for f in SCHEMA if f.name not in ("rank_time_us", "rank_skew_us")])
    old = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist(make_rows(label="before"), schema=old_schema), old)
    new_rows = make_rows(label="after", run_id="20250102-000000-abcdef")
    for r in new_rows:
        r["rank_time_us"], r["rank_skew_us"] = [r["time_us"]] * 16, [0.0] * 16
    new = write(tmp_path / "new.parquet", new_rows)

    both = read_results([old, new])
    assert both["rank_skew_us"].isna().sum() == len(new_rows)  # the old rows: missing, not an error
    assert list(both.loc[both.label == "after", "rank_skew_us"].iloc[0]) == [0.0] * 16
    assert find(both.to_dict("records"), [f"h{i}" for i in range(16)]) == []
    c = compare_frames(read_results([old]), read_results([new]))
    assert c.points
    written = write_report([new], baseline=[old], out=tmp_path / "r.html")
    assert written[0].exists()
