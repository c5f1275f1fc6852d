"""The sweep's closing lines from real gloo ranks (issue #19), checked against the parquet file
the same run wrote: one table half where torch has one placement, the precision mark and tally,
per-collective busbw with units, the median table after -R, reduce_scatter's gap; the report
states the gap too. One small run (3 sizes, 2 collectives, -R 2) for the whole module."""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import sys

import pandas as pd
import pytest

from test_sweep_ranks import IN_PLACE, cells, clean_env, commbench, table_rows

pytestmark = pytest.mark.integration

NAMES = ("all_reduce", "reduce_scatter")  # one placement and two (all_to_all: test_sweep_ranks.py)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweepout") / "x.parquet"
    # --precision 0.0001%: no point can reach it in 10 iterations, so every point is marked
    proc = commbench("sweep", "--collective", ",".join(NAMES), "-b", "1K", "-e", "4K", "-w", "1", "-R", "2",
                     "--time-budget", "0.002", "--precision", "0.000001", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, pd.read_parquet(out), out


def test_tables_show_only_the_placements_torch_offers_and_mark_imprecise_points(run):
    stdout, df, _ = run
    tables = table_rows(stdout)
    assert set(tables) == set(NAMES)
    for name, rows in tables.items():
        for fields in rows:
            assert "n/a" not in fields and len(cells(fields)) == len(IN_PLACE[name]), (name, fields)
    lines = [line for line in stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\s+float", line)]
    live = lines[:len(lines) - 6]  # the median tables' 6 lines come last
    assert live and all(re.search(r"  ~ >?±[\d.]+%", line) for line in live), live
    n = len(df)
    assert f"# Precision: 0 of {n} points ({n // 2} x 2 repetitions) reached 0.0001% " in stdout
    assert f"{n} stopped short: {n} at the time budget (0.002 s)" in stdout
    assert re.search(r"^# ~ ±N% in the table: that point's median is known only to ±N% \((worst ±|>±100%: )",
                     stdout, re.M)


def test_busbw_per_collective_matches_the_file(run):
    stdout, df, _ = run
    assert "Avg bus bandwidth" not in stdout  # two collectives: no one average
    for name in NAMES:
        med = df[df.collective == name].groupby(["size_bytes", "in_place"]).busbw_GBps.median()
        m = re.search(rf"^# {name}\s+avg bus bandwidth ([\d.e-]+) GB/s, peak ([\d.e-]+) GB/s (?:>?±[\d.]+% )?at ",
                      stdout, re.M)
        assert m, name
        assert float(m.group(1)) == pytest.approx(med.mean(), rel=5e-3), name  # 3 significant digits
        assert float(m.group(2)) == pytest.approx(med.max(), rel=5e-3), name


def test_repetitions_end_with_the_median_table(run):
    stdout, df, _ = run
    lines = stdout.splitlines()
    for name in NAMES:
        i = lines.index(f"# Median over 2 repetitions: {name}")
        for line in lines[i + 4:i + 7]:
            fields = line.split()
            size = int(fields[0])
            for k, in_place in enumerate(sorted(IN_PLACE[name])):
                time_text, spread, _, busbw = fields[5 + 4 * k:9 + 4 * k]
                g = df[(df.collective == name) & (df.size_bytes == size) & (df.in_place == in_place)]
                assert len(g) == 2
                assert float(time_text) == pytest.approx(statistics.median(g.time_us), rel=5e-3, abs=0.01)
                lo, hi = map(float, spread.split(".."))
                assert lo == pytest.approx(g.time_us.min(), rel=5e-3, abs=0.01)
                assert hi == pytest.approx(g.time_us.max(), rel=5e-3, abs=0.01)
                assert float(busbw) == pytest.approx(statistics.median(g.busbw_GBps), rel=5e-3)


def test_the_gap_to_all_reduce_is_stated_in_the_sweep_and_the_report(run, tmp_path):
    stdout, df, out = run
    m = re.search(r"^# reduce_scatter busbw is ([\d.]+)x all_reduce's at \d+ KiB(\.\.\d+ KiB)? \(", stdout, re.M)
    assert m, stdout[-2000:]
    assert "gloo runs reduce_scatter as an all_reduce of the whole input" in stdout
    med = df.groupby(["collective", "size_bytes", "in_place"]).busbw_GBps.median()
    ar, rs = med["all_reduce"].groupby(level=0).max(), med["reduce_scatter"].groupby(level=0).max()
    sizes = [s for s in rs.index if ar[s] >= ar.max() / 2]
    ratio = math.exp(statistics.fmean(math.log(rs[s] / ar[s]) for s in sizes))
    assert float(m.group(1)) == pytest.approx(ratio, abs=0.006)
    proc = commbench("report", str(out), "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert f"reduce_scatter busbw is {m.group(1)}x all_reduce&#x27;s" in page


def test_a_reader_that_goes_away_leaves_the_run_measuring(tmp_path):
    """`commbench sweep | head -1`: the reader closes stdout after one line. The run goes on without
    its table and writes every point; it says so, and where the results are, on stderr (before,
    rank 0 died of BrokenPipeError, rank 1 blamed a lost rank 0 and nothing was kept)."""
    out = tmp_path / "piped.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "sweep", "--sizes", "1K,64K,1M", "-w", "1",
                             "--time-budget", "0.01", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    first = proc.stdout.readline()
    proc.stdout.close()  # as head -1 does, long before the first point is printed
    _, err = proc.communicate(timeout=120)
    assert first.startswith("# commbench ")
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "lost rank" not in err, err
    assert "commbench: stdout was closed (its reader went away): the run goes on without its table" in err
    assert f"commbench: Results: {out} (3 rows)" in err
    assert sorted(pd.read_parquet(out).size_bytes) == [1024, 65536, 1 << 20]


def test_a_reader_of_both_streams_that_goes_away_leaves_the_run_measuring(tmp_path):
    """`commbench sweep 2>&1 | head -1`: stdout and stderr are one pipe, closed after one line. The
    notice that the reader left then has nowhere to go either; before, writing it raised
    BrokenPipeError in rank 0 and the run ended with exit 1 and one row of three."""
    out = tmp_path / "both.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "sweep", "--sizes", "1K,64K,1M", "-w", "1",
                             "--time-budget", "0.01", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
    first = proc.stdout.readline()
    proc.stdout.close()
    proc.wait(timeout=120)
    assert first.startswith("# commbench ")
    assert proc.returncode == 0
    assert sorted(pd.read_parquet(out).size_bytes) == [1024, 65536, 1 << 20]
