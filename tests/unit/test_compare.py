"""commbench.analysis.compare.compare and `commbench compare`: verdicts per point and overall, never failing open.

Frames are synthetic but have the real schema: busbw follows a latency/bandwidth curve, each
repetition (row) gets its own lognormal run factor and each timed iteration its own jitter, and
time_us / busbw / samples_us are consistent with each other as the runner writes them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.analysis.compare import compare as cmp
from commbench.analysis.compare import comparetext
from commbench.analysis.points import pointtable
from commbench.analysis.points.sides import KEY_COLUMNS
from commbench.core import stats
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.results import SCHEMA_VERSION, ResultWriter

SIZES = (1024, 64 << 10, 1 << 20, 16 << 20)  # 1 KiB is latency-bound on the curve below, 1 MiB+ bandwidth-bound
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n}
CONSTANT = {
    "run_id": "20250101-000000-abcdef", "label": "", "started_at": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    "dtype": "float32", "root": -1, "in_place": True, "backend": "nccl", "device": "cuda",
    "device_name": "NVIDIA H100 80GB HBM3", "launcher": "slurm", "warmup": 5, "wrong": 0, "workload": "sweep",
    "bucket_bytes": None, "zero_stage": None, "mtu": 1500, "iface": "eth0", "link_layer": "ethernet",
    "hosts": ["node01", "node02"], "commbench_version": "0.1.0", "torch_version": "2.13.0",
    "nccl_version": "2.21.5", "env": json.dumps({"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "WARN"}), "net": "{}",
    "plan": "{}", "schema_version": SCHEMA_VERSION,
}


def curve(peak: float = 100.0, half: int = 256 << 10):
    """busbw (GB/s) of a size: half the peak at `half` bytes."""
    return lambda s: peak * s / (s + half)


def make_frame(busbw_of=None, sizes=SIZES, reps=7, noise=0.015, iters=20, seed=0, rng=None,
               collective="all_reduce", world=16, nnodes=2, **const) -> pd.DataFrame:
    """One side: a row per (repetition, size) with the columns compare reads (and the writer needs)."""
    busbw_of = busbw_of or curve()
    rng = rng if rng is not None else np.random.default_rng(seed)
    factor = BUS[collective](world)
    sizes_col = np.tile(np.asarray(sizes, dtype=np.int64), reps)
    target = np.array([busbw_of(int(s)) for s in sizes_col])
    # one rank: busbw is 0 by definition, so the curve gives algbw there
    t_us = sizes_col * (factor or 1.0) / (target * 1e3) * rng.lognormal(0.0, noise, sizes_col.size)
    samples = t_us[:, None] * rng.lognormal(0.0, noise, (sizes_col.size, iters))
    med = np.median(samples, axis=1)
    alg = sizes_col / (med * 1e-6) / 1e9
    cols = {
        "collective": collective, "op": "sum" if collective == "all_reduce" else None, "size_bytes": sizes_col,
        "count": sizes_col // 4, "world_size": world, "nnodes": nnodes, "ranks_per_node": world // nnodes,
        "iters": iters, "repetition": np.repeat(np.arange(reps), len(sizes)), "time_us": med,
        "time_us_min": samples.min(axis=1), "time_us_max": samples.max(axis=1),
        "time_us_p99": np.percentile(samples, 99, axis=1), "algbw_GBps": alg, "busbw_GBps": alg * factor,
        "samples_us": list(samples),
    }
    n = sizes_col.size
    # each seed its own run: two sides of one run id are one run compared with itself (a warning)
    const.setdefault("run_id", f"20250101-000000-{seed:06x}")
    for name, value in {**CONSTANT, **cols, **const}.items():
        if isinstance(value, (list, np.ndarray)) and len(value) == n and name != "hosts":
            cols[name] = value
        else:
            cols[name] = [value] * n
    return pd.DataFrame(cols)


def write(path: Path, frame: pd.DataFrame) -> Path:
    rows = frame.to_dict("records")
    for r in rows:
        r["samples_us"] = list(r["samples_us"])
    writer = ResultWriter(path)
    writer.create()
    writer.append(rows)
    return path


# ---- verdicts ----


def test_a_ten_percent_drop_with_seven_repetitions_is_a_regression():
    before = make_frame(seed=1)
    after = make_frame(curve(90.0), seed=2)
    c = cmp.compare_frames(before, after)
    assert c.verdict == "regression" and c.exit_code() == 1
    bound = [p for p in c.points if p.bandwidth_bound]
    assert len(bound) == 2 and all(p.verdict == "regression" for p in bound)
    # latency-bound points need 10%: a 10% drop sits on that edge, so it may go either way
    assert {p.verdict for p in c.points} <= {"regression", "unchanged"}
    for p in c.points:
        assert p.test == "repetitions" and p.n_before == p.n_after == 7
        assert p.ratio == pytest.approx(0.9, abs=0.03)
        assert p.p_value == pytest.approx(stats.min_p_one_sided(7, 7))  # no overlap at all
        assert p.p_holm < 0.05 and p.q_bh <= p.p_holm
    for p in bound:
        assert "Holm p=" in p.note and p.note.startswith("-")
    assert c.geomean_ratio == pytest.approx(0.9, abs=0.02)


# Measured with this exact set-up; docs/COMPARE.md quotes these numbers.
FP_TRIALS = 200
# Every trial is judged by compare_aggregates, compare_frames' second half, over the sides' values aggregated
# in memory (in_memory, 4 ms a trial); every FP_FULL_EVERY-th goes through compare_frames too (the DuckDB
# aggregation: 35 ms a call, 7 s for all 200 trials), and the two comparisons must be equal in every field.
FP_FULL_EVERY = 20


def in_memory(template: pointtable.Aggregate, frame: pd.DataFrame, name: str) -> pointtable.Aggregate:
    """What pointtable.aggregate makes of `frame` (a make_frame side with the template's points and runs),
    without the engine: each point's values are its rows' busbw in row order, its context the template's."""
    size_at = KEY_COLUMNS.index("size_bytes")
    values = [frame["busbw_GBps"].to_numpy()[frame["size_bytes"].to_numpy() == key[size_at]]
              for key in template.keys]
    assert sum(v.size for v in values) == len(frame)  # every row in one of the template's points
    return dataclasses.replace(template, name=name, counts=np.array([v.size for v in values], dtype=np.int64),
                               values=np.concatenate(values), lost={}, query=None, rows=len(frame),
                               has_samples=None, damaged=None)


def test_identical_distributions_false_positive_rate():
    rng = np.random.default_rng(20250101)
    verdicts, pure = [], []
    template = None
    for trial in range(FP_TRIALS):
        before, after = make_frame(rng=rng), make_frame(rng=rng)
        if trial % FP_FULL_EVERY == 0:
            c = cmp.compare_frames(before, after)
            if template is None:
                template = pointtable.aggregate((), "before", pointtable.frame_source(before, "before"))
                assert [k[KEY_COLUMNS.index("size_bytes")] for k in template.keys] == list(SIZES)
            assert cmp.compare_aggregates(in_memory(template, before, "before"),
                                          in_memory(template, after, "after")) == c
        else:
            c = cmp.compare_aggregates(in_memory(template, before, "before"), in_memory(template, after, "after"))
        verdicts.append(c.verdict)
        assert all(p.test == "repetitions" for p in c.points)
        # the test alone, without the minimum effect (as with --threshold 0): a drop that Holm calls significant
        pure.append(any(p.ratio < 1 and p.p_holm < c.alpha for p in c.points))
    assert verdicts.count("regression") == 0, verdicts.count("regression")  # measured: 0 of 200
    assert verdicts.count("improvement") == 0
    # Holm keeps the family-wise rate of a significant drop below alpha = 10 of 200
    assert sum(pure) <= 0.05 * FP_TRIALS, sum(pure)  # measured: 6 of 200 (3%) with this seed


def test_three_repetitions_a_side_are_inconclusive_not_a_pass():
    c = cmp.compare_frames(make_frame(reps=3, seed=1), make_frame(curve(90.0), reps=3, seed=2))
    assert c.verdict == "inconclusive" and c.exit_code() == 3
    need = stats.repetitions_needed(0.05, len(SIZES))
    assert need == 5 and c.repetitions_needed == 5
    for p in c.points:
        assert p.verdict == "inconclusive"
        assert p.test == "within-run only"
        assert "needs 5 repetitions a side (-R 5) to decide" in p.note
        assert "within-run only: -" in p.note  # the samples still say which way it went
    # identical sides with 3 repetitions are just as undecided: no free pass
    same = cmp.compare_frames(make_frame(reps=3, seed=1), make_frame(reps=3, seed=2))
    assert same.verdict == "inconclusive" and same.exit_code() == 3
    assert "-R 5" in comparetext.render_table(same)


def test_an_improvement_is_detected():
    c = cmp.compare_frames(make_frame(seed=1), make_frame(curve(112.0), seed=2))
    assert c.verdict == "improvement" and c.exit_code() == 0
    assert {p.verdict for p in c.points if p.bandwidth_bound} == {"improvement"}
    assert c.geomean_ratio == pytest.approx(1.12, abs=0.02)


def test_a_significant_change_below_the_minimum_effect_is_unchanged():
    before = make_frame(noise=0.001, seed=1)
    after = make_frame(curve(99.0), noise=0.001, seed=2)
    c = cmp.compare_frames(before, after)
    assert c.verdict == "unchanged" and c.exit_code() == 0
    for p in c.points:
        assert p.verdict == "unchanged" and p.p_holm < 0.05  # significant, but only ~1%
        assert "below the" in p.note and "minimum effect" in p.note
    strict = cmp.compare_frames(before, after, threshold=0.005, latency_threshold=0.005)
    assert strict.verdict == "regression"


def test_large_but_not_significant_changes_are_inconclusive():
    before = make_frame(noise=0.25, reps=5, seed=3, sizes=(16 << 20,))
    after = make_frame(curve(85.0), noise=0.25, reps=5, seed=4, sizes=(16 << 20,))
    c = cmp.compare_frames(before, after)
    (p,) = c.points
    assert p.test == "repetitions" and p.p_holm >= 0.05 and abs(p.ratio - 1) >= 0.03
    assert p.verdict == "inconclusive" and c.exit_code() == 3
    assert "not significant" in p.note


def test_bandwidth_bound_points_use_the_bandwidth_threshold():
    c = cmp.compare_frames(make_frame(seed=1), make_frame(seed=2), threshold=0.04, latency_threshold=0.2)
    by_size = {p.key["size_bytes"]: p for p in c.points}
    # 1 KiB reaches 0.4% of the peak, 64 KiB 20%: latency-bound; 1 MiB 80%, 16 MiB 98%: bandwidth-bound
    assert [by_size[s].bandwidth_bound for s in SIZES] == [False, False, True, True]
    assert [by_size[s].threshold for s in SIZES] == [0.2, 0.2, 0.04, 0.04]
    # a 7% drop only at the small sizes stays below the 10% latency threshold
    small = lambda s: 100.0 * s / (s + (256 << 10)) * (0.93 if s < (1 << 20) else 1.0)  # noqa: E731
    c2 = cmp.compare_frames(make_frame(seed=1, noise=0.002), make_frame(small, seed=2, noise=0.002))
    assert c2.verdict == "unchanged"
    assert {p.verdict for p in c2.points if not p.bandwidth_bound} == {"unchanged"}


def test_geometric_mean_is_over_bandwidth_bound_points_only():
    def shifted(s):  # -20% at the latency-bound sizes, -4% / +4% at the bandwidth-bound ones
        f = {1024: 0.8, 64 << 10: 0.8, 1 << 20: 0.96, 16 << 20: 1.04}[s]
        return curve()(s) * f

    c = cmp.compare_frames(make_frame(noise=0.0), make_frame(shifted, noise=0.0))
    assert c.geomean_ratio == pytest.approx((0.96 * 1.04) ** 0.5, rel=1e-9)
    assert c.verdict == "regression"
    verdicts = {p.key["size_bytes"]: p.verdict for p in c.points}
    assert verdicts == {1024: "regression", 64 << 10: "regression", 1 << 20: "regression", 16 << 20: "improvement"}


def test_points_on_one_side_only_are_listed_never_dropped():
    before = make_frame(sizes=(1024, 1 << 20, 16 << 20), seed=1)
    after = make_frame(sizes=(1 << 20, 16 << 20, 64 << 20), seed=2)
    c = cmp.compare_frames(before, after)
    assert [p.key["size_bytes"] for p in c.points] == [1 << 20, 16 << 20]
    assert [k["size_bytes"] for k in c.only_before] == [1024]
    assert [k["size_bytes"] for k in c.only_after] == [64 << 20]
    assert set(c.only_before[0]) == set(cmp.KEY_COLUMNS)
    table = comparetext.render_table(c)
    assert "before only: all_reduce float32 sum 1 KiB" in table and "after only: all_reduce float32 sum 64 MiB" in table
    assert "1 before only, 1 after only" in table


def test_one_sided_sizes_of_a_point_fold_into_one_line_whose_ranges_hide_no_compared_size():
    """A short after-run against a full sweep: one line per point but its size, a run of three or more
    neighbouring sizes as a range (the count in brackets), and a compared size splits a run."""
    full = tuple(1 << k for k in range(3, 27))  # 8 B .. 64 MiB, as the default sweep
    before = make_frame(sizes=full, seed=1)
    after = make_frame(sizes=(1 << 10, 1 << 20, 2 << 20, 4 << 20), seed=2)
    c = cmp.compare_frames(before, after)
    assert len(c.only_before) == 20 and not c.only_after
    lines = [ln for ln in comparetext.render_table(c).splitlines() if ln.startswith("before only")]
    assert lines == ["before only: all_reduce float32 sum 8 B..512 B (7 sizes), 2 KiB..512 KiB (9 sizes), "
                     "8 MiB..64 MiB (4 sizes) in 16 (2x8)"], lines
    two = cmp.compare_frames(make_frame(sizes=(1024, 4096, 1 << 20), seed=1), make_frame(sizes=(1 << 20,), seed=2))
    assert [ln for ln in comparetext.render_table(two).splitlines() if ln.startswith("before only")] == [
        "before only: all_reduce float32 sum 1 KiB, 4 KiB in 16 (2x8)"]
    assert "- before only: all_reduce float32 sum 8 B..512 B (7 sizes)" in comparetext.render_markdown(c)


def test_a_grad_accum_grid_shows_its_accumulation_column():
    """Points that differ only in grad_accum are told apart in the table (before, two identical-looking
    rows); a run of GAS 1 only gets no such column."""
    def side(seed):
        one, four = make_frame(seed=seed, sizes=(16 << 20,), grad_accum=1), make_frame(seed=seed, sizes=(16 << 20,),
                                                                                      grad_accum=4)
        return pd.concat([one, four], ignore_index=True)

    table = comparetext.render_table(cmp.compare_frames(side(1), side(2)))
    header, _, *rows = table.splitlines()
    assert "grad_accum" in header.split()
    at = header.index("grad_accum")  # the table's columns are aligned
    assert sorted(r[at:at + 10].strip() for r in rows[:2]) == ["1", "4"]
    plain = comparetext.render_table(cmp.compare_frames(make_frame(seed=1, grad_accum=1),
                                                        make_frame(seed=2, grad_accum=1)))
    assert "grad_accum" not in plain


def test_nothing_comparable_is_exit_3():
    c = cmp.compare_frames(make_frame(seed=1), make_frame(seed=2, workload="buckets"))
    assert c.verdict == "nothing comparable" and c.exit_code() == 3
    assert len(c.only_before) == len(c.only_after) == len(SIZES) and c.points == []
    empty = cmp.compare_frames(make_frame(seed=1).iloc[0:0], make_frame(seed=2))
    assert empty.verdict == "nothing comparable" and empty.exit_code() == 3


def test_the_join_is_nan_safe_for_nullable_key_columns():
    before = make_frame(collective="all_gather", seed=1)  # op None
    after = make_frame(collective="all_gather", seed=2)
    after["op"] = np.nan
    after["bucket_bytes"] = np.nan  # float NaN on one side, None on the other
    after["size_bytes"] = after["size_bytes"].astype(float)
    after["zero_stage"] = pd.array([pd.NA] * len(after), dtype="Int32")
    c = cmp.compare_frames(before, after)
    assert len(c.points) == len(SIZES) and not c.only_before and not c.only_after
    assert c.points[0].key["op"] is None and c.points[0].key["bucket_bytes"] is None
    assert isinstance(c.points[0].key["size_bytes"], int)


def test_warnings_for_what_should_not_differ_and_differences_for_what_may():
    before = make_frame(seed=1)
    after = make_frame(seed=2, torch_version="2.14.0", nccl_version="2.23.4", hosts=["node03", "node04"],
                       mtu=9000, label="mtu9000",
                       env=json.dumps({"NCCL_IB_HCA": "mlx5_1", "NCCL_DEBUG": "WARN", "GLOO_SOCKET_IFNAME": "ib0",
                                       "UCX_TLS": "rc"}))
    c = cmp.compare_frames(before, after)
    assert "torch_version differs: before 2.13.0, after 2.14.0" in c.warnings
    assert "nccl_version differs: before 2.21.5, after 2.23.4" in c.warnings
    assert "hosts differs: before node01,node02, after node03,node04" in c.warnings
    assert not any("commbench_version" in w or "mtu" in w for w in c.warnings)
    assert "mtu: before 1500, after 9000" in c.differences
    assert "label: before \"\", after mtu9000" in c.differences
    assert "NCCL_IB_HCA: before mlx5_0, after mlx5_1" in c.differences
    assert "GLOO_SOCKET_IFNAME: before (unset), after ib0" in c.differences
    assert not any("NCCL_DEBUG" in d or "UCX_TLS" in d for d in c.differences)
    same = cmp.compare_frames(make_frame(seed=1), make_frame(seed=2))
    assert same.warnings == [] and same.differences == []
    md = comparetext.render_markdown(c)
    assert "**Warnings**" in md and "NCCL_IB_HCA: before mlx5_0, after mlx5_1" in md


def test_text_from_the_files_cannot_restructure_the_reports():
    after = make_frame(seed=2, label="<img src=x onerror=alert(1)>\n| a | b |", dtype="float32\r")
    before = make_frame(seed=1, dtype="float32\r")
    c = cmp.compare_frames(before, after)
    md = comparetext.render_markdown(c)
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;?\\| a \\| b \\|" in md
    table = comparetext.render_table(c)
    assert "\r" not in table and "label: before \"\", after <img src=x onerror=alert(1)>?| a | b |" in table
    assert all(line.count("|") == md.splitlines()[-1].count("|") for line in md.splitlines() if line.startswith("| "))


def test_allow_within_run_lets_the_samples_decide():
    before = make_frame(reps=1, seed=1)
    after = make_frame(curve(90.0), reps=1, seed=2)
    plain = cmp.compare_frames(before, after)
    assert plain.verdict == "inconclusive"
    opted = cmp.compare_frames(before, after, allow_within_run=True)
    assert opted.verdict == "regression" and opted.exit_code() == 1
    bound = [p for p in opted.points if p.bandwidth_bound]
    assert bound and all(p.test == "within-run only" and p.verdict == "regression" for p in bound)
    assert all(p.note.startswith("within-run only: -") for p in bound)
    assert all(p.p_holm < 0.05 / 10 for p in bound)
    # one repetition: the spread is the IQR of the per-iteration busbw, inside which the median lies
    for p in opted.points:
        assert p.before_spread[0] <= p.before_busbw <= p.before_spread[1]
    # Without the opt-in, one launch a side is never a verdict, whatever the samples say. (With it,
    # identical set-ups whose launches differ by 1.5% were called a regression in 26 of 200 trials:
    # samples of one launch do not see launch-to-launch variation; docs/COMPARE.md.)
    for seed in range(5):
        same = cmp.compare_frames(make_frame(reps=1, seed=seed), make_frame(reps=1, seed=seed + 100))
        assert same.verdict == "inconclusive" and same.exit_code() == 3


@given(st.floats(0.75, 0.95), st.floats(0.01, 100.0), st.integers(0, 10_000))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_swapping_sides_turns_a_regression_into_an_improvement_and_scale_does_not_matter(drop, scale, seed):
    before = make_frame(sizes=(1 << 20, 16 << 20), seed=seed)
    after = make_frame(lambda s: curve()(s) * drop, sizes=(1 << 20, 16 << 20), seed=seed + 1)
    forward = cmp.compare_frames(before, after)
    backward = cmp.compare_frames(after, before)
    assert forward.verdict == "regression"
    assert backward.verdict == "improvement"
    for f, b in zip(forward.points, backward.points):
        assert f.p_value == pytest.approx(b.p_value) and f.ratio * b.ratio == pytest.approx(1.0)
    scaled_b, scaled_a = before.copy(), after.copy()
    for frame in (scaled_b, scaled_a):
        frame["busbw_GBps"] *= scale
    scaled = cmp.compare_frames(scaled_b, scaled_a)
    assert [p.verdict for p in scaled.points] == [p.verdict for p in forward.points]
    assert [p.p_value for p in scaled.points] == pytest.approx([p.p_value for p in forward.points])


def test_one_rank_points_compare_algbw():
    before = make_frame(world=1, nnodes=1, seed=1)
    after = make_frame(curve(90.0), world=1, nnodes=1, seed=2)
    assert (before["busbw_GBps"] == 0).all()
    c = cmp.compare_frames(before, after)
    assert c.verdict == "regression"
    assert all("algbw compared" in p.note for p in c.points)


# ---- refusals: bad data and bad arguments raise, they never pass ----


def test_refuses_schema_versions_it_cannot_read():
    after = make_frame(seed=2, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(BadInput, match=rf"after results have schema_version {SCHEMA_VERSION + 1}, which this "
                                       "commbench cannot compare"):
        cmp.compare_frames(make_frame(seed=1), after)
    with pytest.raises(BadInput, match="no column busbw_GBps"):
        cmp.compare_frames(make_frame(seed=1).drop(columns=["busbw_GBps"]), make_frame(seed=2))


def test_damaged_values_raise_instead_of_passing():
    after = make_frame(seed=2)
    after.loc[3, "busbw_GBps"] = np.nan
    with pytest.raises(BadInput, match=r"after results hold busbw_GBps nan for all_reduce float32 16 MiB"):
        cmp.compare_frames(make_frame(seed=1), after)
    after = make_frame(seed=2, reps=1)
    after.at[0, "samples_us"] = np.array([1.0, 0.0])
    with pytest.raises(BadInput, match="not a positive number"):
        cmp.compare_frames(make_frame(seed=1, reps=1), after)
    after = make_frame(seed=2, env="{not json")
    with pytest.raises(BadInput, match="env column that is not JSON"):
        cmp.compare_frames(make_frame(seed=1), after)


def test_a_statistics_failure_raises_instead_of_passing(monkeypatch):
    import scipy.stats

    class Nan:
        pvalue = float("nan")

    monkeypatch.setattr(scipy.stats, "mannwhitneyu", lambda *a, **k: Nan())
    with pytest.raises(RuntimeFailure, match="statistics failed for all_reduce") as info:
        cmp.compare_frames(make_frame(seed=1), make_frame(seed=2))
    assert info.value.exit_code == 3


@pytest.mark.parametrize("kwargs, message", [
    ({"alpha": 0.0}, "alpha 0.0 must be more than 0"),
    ({"alpha": 1.0}, "alpha 1.0 must be more than 0"),
    ({"threshold": -0.1}, "threshold -0.1 must be 0 or more"),
    ({"latency_threshold": float("nan")}, "latency threshold nan"),
    ({"threshold": "x"}, "threshold 'x' is not a number"),
])
def test_bad_arguments_are_bad_input(kwargs, message):
    with pytest.raises(BadInput, match=message):
        cmp.compare_frames(make_frame(seed=1), make_frame(seed=2), **kwargs)


def test_to_dict_is_json_ready():
    c = cmp.compare_frames(make_frame(seed=1), make_frame(curve(90.0), seed=2, mtu=9000))
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["verdict"] == "regression" and d["exit_code"] == 1
    assert d["points"][0]["key"]["size_bytes"] == 1024 and isinstance(d["points"][0]["before_spread"], list)
    assert d["differences"] == ["mtu: before 1500, after 9000"]
    assert set(d) >= {"points", "only_before", "only_after", "geomean_ratio", "verdict", "warnings",
                      "differences", "alpha", "threshold", "latency_threshold"}


# ---- the command line, on real files ----


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("compare")
    out = {
        "before": write(d / "before.parquet", make_frame(seed=1)),
        "same": write(d / "same.parquet", make_frame(seed=2)),
        "worse": write(d / "worse.parquet", make_frame(curve(90.0), seed=3, torch_version="2.14.0")),
        "few_b": write(d / "few_b.parquet", make_frame(reps=3, seed=4)),
        "few_a": write(d / "few_a.parquet", make_frame(reps=3, seed=5)),
    }
    (d / "folder").mkdir()
    write(d / "folder" / "part1.parquet", make_frame(seed=6))
    (d / "table.parquet").write_text(make_frame(seed=1).drop(columns=["samples_us"]).to_csv())
    (d / "truncated.parquet").write_bytes(out["before"].read_bytes()[:1500])
    (d / "empty.parquet").write_bytes(b"")
    pq.write_table(pa.table({"collective": ["all_reduce"], "size_bytes": [8], "busbw_GBps": [1.0]}),
                   d / "foreign.parquet")
    write(d / "future.parquet", make_frame(seed=7, schema_version=SCHEMA_VERSION + 1))
    out["dir"] = d
    return out


def main_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """cli.main as the console script runs it, without the cost of a new interpreter."""
    from commbench.cli.app import main

    with pytest.raises(SystemExit) as info:
        main(["compare", *args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_cli_formats_folders_and_out(files, capsys):
    d = files["dir"]
    b, worse = str(files["before"]), str(files["worse"])
    code, out, _ = main_in_process(capsys, b, worse, "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["verdict"] == "regression" and data["exit_code"] == 1
    assert len(data["points"]) == len(SIZES)
    code, out, _ = main_in_process(capsys, b, worse, "--format", "markdown", "--threshold", "5%", "--alpha", "1%")
    assert code == 1
    assert "| collective | dtype |" in out and "|---|" in out and "**regression**" in out
    assert "Holm alpha 0.01" in out and "minimum effect 5%" in out
    code, out, _ = main_in_process(capsys, b, str(d / "folder"), "--latency-threshold", "0.2")
    assert code == 0 and "10%" not in out and "20% (others)" in out
    report = d / "report.md"
    code, out, _ = main_in_process(capsys, b, worse, "--out", str(report), "--format", "markdown")
    assert code == 1 and out.strip() == f"regression: report written to {report}"
    assert "| collective |" in report.read_text()


@pytest.mark.parametrize("extra, needle", [
    (["@missing"], "nope.parquet does not exist"),
    (["@table.parquet"], "table.parquet is not a readable parquet file"),
    (["@empty.parquet"], "empty.parquet is not a readable parquet file"),
    (["@truncated.parquet"], "truncated.parquet is not a readable parquet file"),
    (["@foreign.parquet"], "foreign.parquet is not a commbench results file (no column schema_version)"),
    (["@future.parquet"], f"future.parquet has schema_version {SCHEMA_VERSION + 1}, newer than this commbench"),
    (["--threshold", "5"], "--threshold 5 is not a fraction below 1: write 5% or 0.05"),
    (["--threshold", "lots"], "--threshold 'lots' is not a fraction"),
    (["--latency-threshold", "-3%"], "--latency-threshold -3% must be 0 or more"),
    (["--alpha", "0"], "--alpha 0 must be more than 0"),
    (["--alpha", "150%"], "--alpha 150% must be more than 0 and below 100%"),
    (["--alpha", "nan"], "--alpha nan must be more than 0"),
    (["--format", "html"], "'html' is not one of"),
    (["--out", "@x.parquet"], "is a folder or a results file"),
])
@pytest.mark.failure(row="result-files-empty-truncated-foreign")
def test_cli_bad_input_is_one_line_and_exit_2(files, capsys, extra, needle):
    d = files["dir"]
    after = str(files["same"])
    args = []
    for a in extra:
        if a == "@missing":
            after = str(d / "nope.parquet")
        elif a.startswith("@") and a != "@x.parquet":
            after = str(d / a[1:])
        else:
            args.append(str(d / a[1:]) if a.startswith("@") else a)
    code, out, err = main_in_process(capsys, str(files["before"]), after, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: ") and needle in lines[0], err


def test_points_tested_in_batches_get_the_single_tests_p_values():
    # more than 8 repetitions a side: compare tests all points in one vectorised call; each p-value
    # must be what the one-point test gives (docs/COMPARE.md), whatever the batching
    sizes = tuple(1 << k for k in range(10, 26))
    before, after = make_frame(sizes=sizes, reps=12, seed=1), make_frame(sizes=sizes, reps=12, seed=2)
    c = cmp.compare_frames(before, after)
    assert len(c.points) == len(sizes) and {p.test for p in c.points} == {"repetitions"}
    for p in c.points:
        b = before.loc[before["size_bytes"] == p.key["size_bytes"], "busbw_GBps"].to_numpy()
        a = after.loc[after["size_bytes"] == p.key["size_bytes"], "busbw_GBps"].to_numpy()
        assert p.p_value == stats.mannwhitney_one_sided(a, b, "less" if p.ratio < 1 else "greater")
        assert (p.n_before, p.n_after) == (12, 12)
        assert p.before_busbw == stats.median(b) and p.before_spread == stats.min_max(b)


def test_a_statistics_failure_in_a_batch_names_the_point(monkeypatch):
    import scipy.stats

    class Nan:
        pvalue = float("nan")

    monkeypatch.setattr(scipy.stats, "mannwhitneyu", lambda *a, **k: Nan())
    with pytest.raises(RuntimeFailure, match="statistics failed for all_reduce float32 1 KiB"):
        cmp.compare_frames(make_frame(reps=12, seed=1), make_frame(reps=12, seed=2))


# ---- settings (--env NAME=v1|v2): one point per setting ----

ETH0, ETH1 = "GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"


def settings_frame(eth1_peak: float, seed: int, settings=(ETH0, ETH1)) -> pd.DataFrame:
    """One run measured once per setting (as sweep --env runs its grid): eth0 at a 100 GB/s
    peak, eth1 at eth1_peak."""
    peaks = {ETH0: 100.0, ETH1: eth1_peak}
    return pd.concat([make_frame(curve(peaks[s]), sizes=(1 << 20, 16 << 20), seed=seed + i, settings=s,
                                 run_id=f"20250101-000000-{seed:06x}")
                      for i, s in enumerate(settings)], ignore_index=True)


def test_two_settings_a_side_give_a_verdict_per_setting_named_in_every_format(tmp_path):
    from commbench.core.results import read_results

    before = read_results([write(tmp_path / "b.parquet", settings_frame(25.0, seed=1))])
    after = read_results([write(tmp_path / "a.parquet", settings_frame(20.0, seed=11))])  # eth1 20% slower
    c = cmp.compare_frames(before, after)
    assert c.verdict == "regression" and not c.only_before and not c.only_after
    verdicts = {(p.key["settings"], p.key["size_bytes"]): p.verdict for p in c.points}
    assert verdicts == {(ETH0, 1 << 20): "unchanged", (ETH0, 16 << 20): "unchanged",
                        (ETH1, 1 << 20): "regression", (ETH1, 16 << 20): "regression"}
    # eth1's peak is eth1's own: its points are bandwidth-bound on its setting, not against eth0's peak
    assert [p.ratio for p in c.points if p.key["settings"] == ETH1] == pytest.approx([0.8, 0.8], abs=0.03)
    assert all(p.bandwidth_bound for p in c.points)
    assert not c.differences and not c.warnings
    table = comparetext.render_table(c)
    header = table.splitlines()[0].split()
    assert "settings" in header
    rows = [ln for ln in table.splitlines() if ln.startswith("all_reduce")]
    assert len(rows) == 4
    assert sum(ETH1 in r and "REGRESSION" in r for r in rows) == 2
    assert sum(ETH0 in r and "unchanged" in r for r in rows) == 2
    md = comparetext.render_markdown(c)
    assert sum(f"| {ETH1} |" in ln and "REGRESSION" in ln for ln in md.splitlines()) == 2
    doc = json.loads(json.dumps(c.to_dict()))
    assert sorted({p["key"]["settings"] for p in doc["points"]}) == [ETH0, ETH1]
    assert cmp.describe_point(c.points[-1].key) == f"all_reduce float32 16 MiB in-place on 16 ranks {ETH1}"
    unset = {**c.points[-1].key, "settings": None}
    assert cmp.describe_point(unset) == "all_reduce float32 16 MiB in-place on 16 ranks"


def test_settings_on_one_side_only_is_nothing_comparable_with_a_warning_that_says_why():
    before = settings_frame(25.0, seed=1)
    after = make_frame(sizes=(1 << 20, 16 << 20), seed=2)  # no --env: no settings
    c = cmp.compare_frames(before, after)
    assert c.verdict == "nothing comparable" and c.exit_code() == 3
    assert len(c.only_before) == 4 and len(c.only_after) == 2
    assert any(w.startswith("the before results have settings GLOO_SOCKET_IFNAME=eth0|eth1 and the after "
                            "results none: compare runs made with the same --env") for w in c.warnings), c.warnings
    table = comparetext.render_table(c)
    assert f"before only: all_reduce float32 sum 1 MiB, 16 MiB in 16 (2x8) {ETH1}" in table
    assert "warning: the before results have settings" in table
    swapped = cmp.compare_frames(after, before)
    assert any("the before results have settings none and the after results GLOO_SOCKET_IFNAME=eth0|eth1"
               in w for w in swapped.warnings)


def test_settings_that_only_partly_match_pair_what_they_share_and_name_the_difference():
    c = cmp.compare_frames(settings_frame(25.0, seed=1), settings_frame(25.0, seed=11, settings=(ETH0,)))
    assert {p.key["settings"] for p in c.points} == {ETH0} and len(c.only_before) == 2
    assert "settings: before GLOO_SOCKET_IFNAME=eth0|eth1, after GLOO_SOCKET_IFNAME=eth0" in c.differences
    assert c.warnings == []


def test_two_settings_of_one_run_compare_side_by_side(tmp_path, cli):
    """compare --before-setting A --after-setting B: one run's two settings paired point by point."""
    path = write(tmp_path / "one.parquet", settings_frame(20.0, seed=3))  # eth1's peak 20 against eth0's 100
    res = cli("compare", str(path), str(path), "--before-setting", ETH0, "--after-setting", ETH1, "--format", "json")
    doc = json.loads(res.stdout)
    assert res.returncode == 1, res.stdout + res.stderr
    assert doc["verdict"] == "regression" and {p["key"]["settings"] for p in doc["points"]} == {None}
    assert [round(p["ratio"], 2) for p in doc["points"]] == [0.2, 0.2]
    assert doc["differences"][0] == f"settings: before {ETH0}, after {ETH1}"
    res = cli("compare", str(path), str(path), "--before-setting", "GLOO_SOCKET_IFNAME=eth9")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == ("commbench: --before-setting 'GLOO_SOCKET_IFNAME=eth9': the before results have no "
                              f"rows of that setting (they have '{ETH0}', '{ETH1}'): pass one of them, quoted, "
                              "e.g. --before-setting 'GLOO_SOCKET_IFNAME=eth0'")
