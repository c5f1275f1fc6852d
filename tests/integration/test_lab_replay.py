"""`commbench replay` on the lab (root; issue #42): the real ZeRO-2 job recorded on 2 lab hosts at
1gbit (tests/data/traces/lab_zero2_1gbit.trace, record_lab.py) replayed on the same lab takes the
time it was recorded with; with the links lowered to 100mbit its step is about ten times slower,
and `compare` calls the step and its collectives a regression. Its own lab: prefix `rpl`, subnet
10.228.0.0/24."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from labkit import NEEDS_LAB, lab_up, run_commbench

pytestmark = NEEDS_LAB
PREFIX = "rpl"
SUBNET = "10.228.0.0/24"
TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "lab_zero2_1gbit.trace"
# Five repetitions a side, compare's least for a verdict; two iterations each, as a step is about 60 ms at
# 1gbit and 0.65 s at 100mbit (the 100mbit replay is most of this file's time).
REPLAY = ["lab", "run", "--", sys.executable, "-m", "commbench", "replay", str(TRACE), "-R", "5", "-w", "1", "-n", "2"]
# compare's table rows (collective, dtype, op, size in MiB) that must be regressions: the step and its two large ops
SLOWER = ("replay_step mixed - 8.0", "all_reduce bfloat16 sum 4.0", "all_gather bfloat16 - 4.0")


def replay(env: dict[str, str], out: Path) -> pd.DataFrame:
    done = run_commbench(env, *REPLAY, "--out", str(out), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_parquet(out)
    assert set(rows.workload) == {"replay"}
    return rows


def step_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The replayed steps 0-5, a row a repetition: the six steps issue the same ops, so are replayed once."""
    steps = rows[rows.collective == "replay_step"]
    assert sorted(steps.repetition) == [0, 1, 2, 3, 4], steps[["repetition", "trace_step", "trace_steps"]]
    assert set(steps.trace_step) == {0} and set(steps.trace_steps) == {"0-5"} and set(steps.n_collectives) == {4}
    return steps


@pytest.fixture
def lab():
    with lab_up(PREFIX, "--nodes", "2", "--rate", "1gbit", "--subnet", SUBNET) as env:
        yield env


def test_replay_on_the_lab_takes_the_recorded_time_and_a_slower_link_is_a_regression(lab, tmp_path):
    started = time.monotonic()
    fast = step_rows(replay(lab, tmp_path / "A"))
    # the gradients (4,180,992 B), the two overflow checks, the all_gather's S (its output)
    assert set(fast.size_bytes) == {4_180_992 + 1 + 4 + 4_180_992}
    recorded = fast.recorded_us.iloc[0]
    ratio = fast.time_us.median() / recorded
    assert 0.75 <= ratio <= 1.25, (list(fast.time_us), recorded)

    assert run_commbench(lab, "lab", "set", "--rate", "100mbit").returncode == 0
    slow = step_rows(replay(lab, tmp_path / "B"))
    slower = slow.time_us.median() / fast.time_us.median()
    assert slower > 5, (list(fast.time_us), list(slow.time_us))  # 10x the wire time, less what is not wire

    done = run_commbench(lab, "compare", str(tmp_path / "A"), str(tmp_path / "B"))
    assert done.returncode == 1, done.stdout + done.stderr
    table = {" ".join(line.split()[:4]): line.split()[-1] for line in done.stdout.splitlines() if " replay " in line}
    assert [table.get(point) for point in SLOWER] == ["REGRESSION"] * 3, done.stdout
    text = " ".join(done.stdout.split())  # the step's line wraps at 120 columns
    assert re.search(r"replay step 0 \(steps 0-5\): [\d.]+ ms -> [\d.]+ ms, regression; all_reduce \d+% of the "
                     r"change \(\+[\d.]+ ms, 3 calls\), all_gather \d+% \(\+[\d.]+ ms, 1 call\)", text), done.stdout
    assert "verdict: regression (exit 1)" in text
    print(f"\nlab replay: 1gbit replay/recorded {ratio:.2f} ({fast.time_us.median() / 1e3:.1f} / "
          f"{recorded / 1e3:.1f} ms), 100mbit/1gbit {slower:.1f}x, {time.monotonic() - started:.1f} s with the lab up")
