"""commbench trend: Pettitt's test, the change named at its run with what differed, and bad input."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from commbench.analysis.trend import trend
from unit import synthetic


@pytest.fixture(scope="module")
def changed(tmp_path_factory) -> Path:
    """24 nights whose links slow from 400 to 100 Gbit/s at night 16, written once for the tests that
    only read them."""
    return synthetic.write_nights(tmp_path_factory.mktemp("changed"), [400.0] * 15 + [100.0] * 9)


@pytest.fixture(scope="module")
def found_changed(changed) -> trend.Trend:
    """trend.trend of `changed`, judged once for the tests that only read the answer."""
    return trend.trend([changed])


@pytest.fixture(scope="module")
def steady(tmp_path_factory) -> Path:
    """24 steady nights at 400 Gbit/s, written once for the tests that only read them. Its first n
    nights are, file for file, what write_nights([400.0] * n) writes (each night's rows and wobble
    depend only on its index), so a test that needs fewer nights copies them (nights())."""
    return synthetic.write_nights(tmp_path_factory.mktemp("steady"), [400.0] * 24)


def nights(steady: Path, n: int, tmp_path: Path) -> Path:
    """A folder of the first `n` steady nights, of the test's own, to add files to."""
    folder = tmp_path / "nightly"
    folder.mkdir()
    for f in sorted(steady.glob("*.parquet"))[:n]:
        shutil.copy(f, folder / f.name)
    return folder


def test_pettitt_finds_the_first_value_after_a_step_and_a_small_p():
    x = [10.0] * 15 + [3.0] * 9
    x = [v + 0.01 * i for i, v in enumerate(x)]  # no ties
    t, p = trend.pettitt(x)
    assert t == 15
    assert p < 0.002


def test_pettitt_on_a_steady_series_is_not_significant():
    rng = np.random.default_rng(3)
    ps = [trend.pettitt(rng.normal(10, 1, 24))[1] for _ in range(400)]
    assert np.mean(np.array(ps) <= 0.05) <= 0.08  # about alpha or below (the approximation is conservative)


def test_smallest_p_and_runs_needed_agree():
    n = trend.runs_needed(0.05)
    assert trend.smallest_p(n) <= 0.05 < trend.smallest_p(n - 1)
    assert math.isclose(trend.smallest_p(24), 2 * math.exp(-6 * 144**2 / (24**3 + 24**2)))


def test_a_rate_drop_from_run_16_is_named_at_run_16_with_the_link_rate(found_changed):
    found = found_changed
    assert len(found.runs) == 24
    assert found.change_runs() == [15]  # position 15: run 16
    assert found.runs[15].index == 16
    assert found.worse()
    assert {c.key["size_bytes"] for c in found.changes} >= {1 << 20, 1 << 24}
    assert any(d.startswith("link rate") for d in found.differs[15])


def test_the_cli_names_run_16_exits_1_and_json_lists_the_points(changed, cli):
    folder = changed
    proc = cli("trend", str(folder))
    assert proc.returncode == 1, proc.stderr
    assert "CHANGE from run 16 (20260016-000000-abcdef 'night16'" in proc.stdout
    assert "what differs: " in proc.stdout and "link rate" in proc.stdout
    got = json.loads(cli("trend", str(folder), "--format", "json").stdout)
    assert got["verdict"] == "worse"
    assert {c["first_run_after"] for c in got["changes"]} == {16}
    assert all(c["change"] < -0.5 for c in got["changes"] if c["point"]["size_bytes"] == 1 << 24)


def test_steady_runs_name_nothing_and_exit_0(steady, cli):
    folder = steady
    proc = cli("trend", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no change" in proc.stdout
    assert "CHANGE" not in proc.stdout


def test_too_few_runs_is_no_verdict_exit_3(steady, tmp_path, cli):
    folder = nights(steady, 4, tmp_path)
    proc = cli("trend", str(folder))
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "4 runs cannot show a change" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_runs_of_different_world_sizes_are_refused_in_one_line(steady, tmp_path, cli):
    folder = nights(steady, 8, tmp_path)
    rows = synthetic.night_rows(9, 400.0, np.random.default_rng(1))
    for r in rows:
        r["world_size"] = 4
    synthetic.write(folder / "other.parquet", rows)
    proc = cli("trend", str(folder))
    assert proc.returncode == 2
    assert proc.stderr.startswith("commbench: the runs differ in world_size")
    assert proc.stderr.count("\n") == 1


def test_a_slow_host_of_pairs_links_is_named_as_the_common_end(tmp_path):
    hosts = ("cbnode1", "cbnode2", "cbnode3")
    rng = np.random.default_rng(5)
    folder = tmp_path / "pairs"
    folder.mkdir()
    for i in range(1, 25):
        rows = []
        for src in hosts:
            for dst in hosts:
                if src == dst:
                    continue
                slow = i >= 16 and "cbnode3" in (src, dst)
                part = synthetic.night_rows(i, 100.0 if slow else 400.0, rng, hosts=hosts)
                for r in part:
                    r.update(workload="pairs", src_host=src, dst_host=dst, world_size=3)
                rows += part
        synthetic.write(folder / f"n{i:02d}.parquet", rows)
    found = trend.trend([folder])
    assert found.change_runs() == [15]
    host, links = trend.common_host(found.changes)
    assert host == "cbnode3"
    assert {c.hosts() for c in found.changes} <= {(s, d) for s in hosts for d in hosts if "cbnode3" in (s, d)}


def test_the_plot_draws_each_changed_point_and_marks_run_16(found_changed):
    from commbench.analysis.trend import trendplot

    found = found_changed
    fig = trendplot.draw(found)
    lines = fig.axes[0].get_lines()
    marks = [ln for ln in lines if list(ln.get_xdata()) == [15.5, 15.5]]
    assert len(marks) == 1
    drawn = [ln for ln in lines if ln not in marks]
    assert len(drawn) == len(found.changes) == 3
    assert all(list(ln.get_xdata()) == list(range(1, 25)) for ln in drawn)


def test_cli_plot_writes_the_figure_and_refuses_a_bad_suffix(steady, tmp_path, cli):
    folder = steady
    assert cli("trend", str(folder), "--plot", str(tmp_path / "t.png")).returncode == 0
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    bad = cli("trend", str(folder), "--plot", str(tmp_path / "t.txt"))
    assert bad.returncode == 2 and bad.stderr == f"commbench: --plot {tmp_path / 't.txt'} must end in .png or .svg\n"


LAB = Path(__file__).resolve().parents[1] / "data" / "trend_lab"  # 24 real lab runs (its README.md)


def test_real_lab_runs_name_run_16_host_3_and_the_link_rate():
    found = trend.trend([LAB])
    assert [r.index for r in found.runs] == list(range(1, 25))
    assert [found.runs[at].label for at in found.change_runs()] == ["night16"]
    host, links = trend.common_host(found.changes)
    assert (host, links) == ("xtrnode3", 4)
    assert all(c.change < -0.6 for c in found.changes)
    (differs,) = found.differs.values()
    assert any(d.startswith("link rate:") and "after xtrnode3 300 Mbit/s" in d for d in differs), differs


def test_the_first_15_real_lab_runs_name_nothing(tmp_path):
    for f in sorted(LAB.glob("*.parquet"))[:15]:
        shutil.copy(f, tmp_path / f.name)
    found = trend.trend([tmp_path])
    assert len(found.runs) == 15 and found.changes == []


def test_runs_of_different_collectives_are_refused_in_one_line(steady, tmp_path, cli):
    folder = nights(steady, 8, tmp_path)
    rows = synthetic.night_rows(9, 400.0, np.random.default_rng(1))
    for r in rows:
        r["collective"] = "all_gather"
    synthetic.write(folder / "other.parquet", rows)
    proc = cli("trend", str(folder))
    assert proc.returncode == 2
    assert proc.stderr.startswith("commbench: the runs differ in collective (all_gather; all_reduce)")


def test_the_report_of_nightly_runs_has_a_trend_section_and_of_few_runs_none(tmp_path, changed, undrawn):
    from commbench.analysis.report.report import write_report

    folder = changed
    page = write_report([str(folder)], out=tmp_path / "r.html")[0].read_text()
    assert '<section id="trend"><h2>Trend</h2>' in page and '<a href="#trend">Trend</a>' in page
    assert "<h3>Change from run 16 (20260016-000000-abcdef &#x27;night16&#x27;" in page
    assert "What differs from the run before: link rate: before 400 Gbit/s" in page
    few = tmp_path / "few"
    few.mkdir()
    for f in sorted(folder.glob("*.parquet"))[:3]:
        shutil.copy(f, few / f.name)
    assert 'id="trend"' not in write_report([str(few)], out=tmp_path / "few.html")[0].read_text()
