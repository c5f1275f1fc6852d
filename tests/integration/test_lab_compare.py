"""`commbench compare` on real measurements from the lab (root): A/A, a slower link, jumbo frames."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from labkit import NEEDS_LAB, lab_env, run_commbench

pytestmark = NEEDS_LAB

PREFIX = "cc"
ENV = lab_env(PREFIX)
SWEEP = ["--collective", "allreduce", "--sizes", "4M,16M", "-n", "5", "-w", "2"]

# The runs in the order they are measured: (side, lab settings changed before it, repetitions). Each side is a
# folder of runs. The order is balanced (base, again, jumbo, jumbo, again, base), so a machine that drifts
# during the fixture (other load on 2 cores) moves every side's mean time alike: one CI run that measured
# the sides one after the other found "the same lab twice" 3% slower and jumbo frames 2% faster, not 4%.
SCHEDULE = [
    ("base", None, 3), ("again", None, 3), ("jumbo", ["--mtu", "9000"], 3), ("jumbo", None, 3),
    ("again", ["--mtu", "1500"], 3), ("base", None, 3), ("slow", ["--rate", "800mbit"], 5),
]


def cb(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_commbench(ENV, *args, timeout=timeout)


QUIET_SPREAD = 1.10  # the slowest repetition of a side at 16 MiB over its fastest, on a quiet machine 1.02-1.04


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Real 2-host runs, a folder a side: 1gbit at MTU 1500 (base and again, six repetitions each),
    1gbit at MTU 9000 (jumbo), and 800mbit (slow). A schedule that a disturbed machine spread by more
    than QUIET_SPREAD within a side is measured once more (one CI run saw 140-194 ms for one setting,
    where a 4% effect is the question): the tests are about compare's verdicts on a quiet lab."""
    out = tmp_path_factory.mktemp("lab-compare")
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.234.0.0/24")
    assert up.returncode == 0, up.stderr
    try:
        for attempt in range(2):
            sides = measure(out / f"attempt{attempt}")
            if max(spread(folder) for folder in sides.values()) <= QUIET_SPREAD:
                break
    finally:
        cb("lab", "down")
    return sides


def measure(out: Path) -> dict[str, Path]:
    assert cb("lab", "set", "--mtu", "1500", "--rate", "1gbit").returncode == 0
    for i, (side, change, reps) in enumerate(SCHEDULE):
        if change:
            assert cb("lab", "set", *change).returncode == 0
        (out / side).mkdir(parents=True, exist_ok=True)
        res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", *SWEEP, "-R", str(reps),
                 "--label", side, "--out", str(out / side / f"{i}.parquet"))
        assert res.returncode == 0, res.stdout + res.stderr
    return {side: out / side for side, _, _ in SCHEDULE}


def spread(folder: Path) -> float:
    times = pd.concat([pd.read_parquet(f) for f in folder.glob("*.parquet")]).query("size_bytes == 16 * 2**20").time_us
    return times.max() / times.min()


def compare(before: Path, after: Path, *extra: str) -> tuple[int, dict]:
    res = cb("compare", str(before), str(after), "--format", "json", *extra)
    assert "Traceback" not in res.stderr
    return res.returncode, json.loads(res.stdout)


def test_the_same_lab_twice_is_not_a_regression(runs):
    code, report = compare(runs["base"], runs["again"])
    # Not a regression: unchanged, or inconclusive when the machine was busy (never exit 1).
    assert code in (0, 3) and report["verdict"] != "regression", report
    assert all(p["verdict"] != "regression" for p in report["points"])
    assert 0.97 < report["geomean_ratio"] < 1.03


def test_a_slower_link_is_a_regression_at_the_large_sizes(runs):
    code, report = compare(runs["base"], runs["slow"])
    assert code == 1 and report["verdict"] == "regression"
    largest = max(report["points"], key=lambda p: p["key"]["size_bytes"])
    assert largest["verdict"] == "regression" and 0.75 < largest["ratio"] < 0.85
    assert largest["test"] == "repetitions"


def test_jumbo_frames_are_an_improvement_of_about_four_percent(runs):
    # The gain is (9000-52)/(9014) over (1500-52)/(1514) = 3.9%: the default minimum effect of 3% sits
    # inside that figure's noise on 2 loaded cores (a CI run measured +2.55%, "unchanged"), so ask for 2%.
    code, report = compare(runs["base"], runs["jumbo"], "--threshold", "2%")
    largest = max(report["points"], key=lambda p: p["key"]["size_bytes"])
    print(f"\nMTU 1500 -> 9000 at 16 MiB: ratio {largest['ratio']:.4f}, verdict {largest['verdict']}")
    assert largest["verdict"] == "improvement" and 1.02 < largest["ratio"] < 1.07
    assert code == 0
    assert any("mtu" in d.lower() and "1500" in d and "9000" in d for d in report["differences"])
