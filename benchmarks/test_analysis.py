"""compare, gate and the data behind plot and report, on --bench-rows generated rows (100,000 by
default: two sides of 50,000, analysis_scale.py's sweeps, 25 repetitions a point, 20 samples a
row, per-rank lists, env / net / plan JSON as the runner writes them).

Below COMMBENCH_ENGINE_ROWS (500,000) the commands take the pandas path: read_results, then
compare_frames / gate.judge / curveplot.aggregate / summary on the frames; the DuckDB engine's compare
and gate (analysis/points/pointtable.py, forced here) are timed beside them and must agree with pandas.
Drawing and writing figures is matplotlib's time, measured as whole commands by analysis_scale.py."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def frames(analysis_sides):
    from commbench.core.results import read_results

    return read_results([analysis_sides.before]), read_results([analysis_sides.after])


@pytest.fixture(scope="module")
def bands(frames):
    """Bands `gate --suggest --min-size 1G` writes from the before side (set-up, not timed)."""
    from commbench.analysis.gate.bands import parse_bands
    from commbench.analysis.gate.bandsuggest import suggest

    suggestion = suggest(frames[0], min_size=1 << 30, allow_wide=True)
    assert suggestion.entries > 0
    return parse_bands(suggestion.text)


def injected(key: dict) -> bool:
    """The regression the generator put into the after side: all_to_all in bfloat16, 8% slower."""
    return key["collective"] == "all_to_all" and key["dtype"] == "bfloat16"


def verdicts(comparison) -> dict:
    return {tuple(sorted(p.key.items())): p.verdict for p in comparison.points}


@pytest.mark.benchmark(group="analysis: read")
def test_read_results(benchmark, analysis_sides):
    from commbench.core.results import read_results

    df = benchmark(read_results, [analysis_sides.before, analysis_sides.after])
    assert len(df) == analysis_sides.rows
    assert set(df["label"]) == {"before", "after"} and df["samples_us"].map(len).eq(20).all()


@pytest.mark.benchmark(group="analysis: compare")
def test_compare_frames(benchmark, frames, analysis_sides):
    from commbench.analysis.compare.compare import compare_frames

    c = benchmark(compare_frames, *frames)
    assert len(c.points) == analysis_sides.rows // 2 // 25 and not c.only_before and not c.only_after
    regressed = [p for p in c.points if p.verdict == "regression"]
    assert all(injected(p.key) for p in regressed)
    # the after side's other change: 5% more bandwidth between nodes, none inside one
    assert all(p.key["nnodes"] > 1 for p in c.points if p.verdict == "improvement")
    if any(injected(p.key) and p.bandwidth_bound for p in c.points):
        assert regressed, "the injected 8% all_to_all bfloat16 drop went unnoticed"
    if regressed:
        assert c.verdict == "regression" and c.exit_code() == 1


@pytest.mark.benchmark(group="analysis: compare")
def test_compare_engine(benchmark, frames, analysis_sides):
    """The one aggregation over the files (reading included)."""
    from commbench.analysis.compare import compare
    from commbench.analysis.compare.compare import compare_frames

    c = benchmark(compare.compare_paths, [analysis_sides.before], [analysis_sides.after])
    assert c is not None, "the engine declined the generated files"
    pandas = compare_frames(*frames)
    assert c.verdict == pandas.verdict and verdicts(c) == verdicts(pandas)


@pytest.mark.benchmark(group="analysis: gate")
def test_gate_judge(benchmark, frames, bands):
    from commbench.analysis.gate import gate

    report = benchmark(gate.judge, bands, frames[1])
    assert len(report.results) == len(bands.entries)
    assert all(injected({"collective": r.entry.collective, "dtype": r.entry.dtype}) for r in report.failed)
    if any(injected({"collective": e.collective, "dtype": e.dtype}) for e in bands.entries):
        assert report.failed and report.exit_code() == 1, "the injected 8% drop passed the gate"
    assert gate.judge(bands, frames[0]).exit_code() == 0  # the side the bands came from passes


@pytest.mark.benchmark(group="analysis: gate")
def test_gate_engine(benchmark, frames, bands, analysis_sides):
    from commbench.analysis.gate import gate

    report = benchmark(gate.gate_paths, bands, [analysis_sides.after])
    pandas = gate.judge(bands, frames[1])
    assert [r.verdict for r in report.results] == [r.verdict for r in pandas.results]


@pytest.mark.benchmark(group="analysis: plot and report data")
def test_plot_lines(benchmark, frames):
    from commbench.analysis.curves import curveplot

    lines = benchmark(curveplot.aggregate, frames[1], "busbw_GBps")
    assert lines and sum(int(line.reps.sum()) for line in lines) == len(frames[1])


@pytest.mark.benchmark(group="analysis: plot and report data")
def test_report_peaks(benchmark, frames):
    from commbench.analysis.curves import curvetables
    from commbench.analysis.curves import curveplot

    peaks = benchmark(curvetables.peak_rows, frames[1])
    lines = curveplot.aggregate(frames[1], "busbw_GBps")
    assert len(peaks) == len(lines)
    assert max(p["peak_busbw"] for p in peaks) == pytest.approx(max(float(line.median.max()) for line in lines))


@pytest.mark.benchmark(group="analysis: plot and report data")
def test_report_points(benchmark, frames):
    from commbench.analysis.curves import curvetables

    points = benchmark(curvetables.point_rows, frames[1])
    assert sum(p["reps"] for p in points) == len(frames[1])


@pytest.fixture(scope="module", params=[2, 8], ids=["2 ranks on 2 hosts", "8 ranks on 2 hosts"])
def skew_run(request, bench_rows):
    """One run of --bench-rows points with per-rank skews: rank world-1 late at 70% of them."""
    import numpy as np

    world = request.param
    rng = np.random.default_rng(1)
    skew = rng.gamma(2.0, 30.0, size=(bench_rows, world))
    skew[:, world - 1] += np.where(rng.random(bench_rows) < 0.7, 5000.0, 0.0)
    time_us = rng.uniform(100, 10_000, size=bench_rows)
    hosts = ["a"] * (world // 2) + ["b"] * (world - world // 2)
    rows = [{"rank_skew_us": s, "rank_host": [0 if h == "a" else 1 for h in hosts], "hosts": ["a", "b"],
             "time_us": float(t), "iters": 20} for s, t in zip(skew, time_us)]
    return skew, time_us, hosts, rows


@pytest.mark.benchmark(group="analysis: late arrivals")
def test_stragglers_run_findings(benchmark, skew_run):
    """A run's late arrivals judged from its rows as dicts (the report's pandas path)."""
    from commbench.core import stragglers

    texts, points = benchmark(stragglers.run_findings, skew_run[3])
    assert points == len(skew_run[0]) and len(texts) == 1 and "arrives late" in texts[0]


@pytest.mark.benchmark(group="analysis: late arrivals")
def test_stragglers_run_findings_matrix(benchmark, skew_run):
    """The same from the points as a matrix (the large report's path, after reading the files)."""
    from commbench.core import stragglers

    found = benchmark(stragglers.run_findings_matrix, *skew_run[:3])
    assert found == stragglers.run_findings(skew_run[3])
