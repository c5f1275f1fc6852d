"""`commbench replay` with real gloo ranks on this host: a real DeepSpeed capture replayed, its rows
read back from parquet; the job scaled with --world-size; a replay compared with another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.core import trace as tr

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CAPTURE = TRACES / "ds_zero2.trace"  # a real 2-rank DeepSpeed ZeRO-2 job (tests/data/traces/README.md)
QUICK = ["-w", "1", "-n", "4", "--no-wire"]


def _replay(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", "replay", *args, "--out", str(out), *QUICK],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[pd.DataFrame, str]:
    out = tmp_path_factory.mktemp("replay")
    proc = _replay(out, str(CAPTURE), "--steps", "all")
    assert proc.returncode == 0, proc.stderr
    return pd.read_parquet(next(out.glob("*.parquet"))), proc.stdout


def test_every_op_of_the_trace_is_a_row_with_its_recorded_time(replayed):
    frame, _ = replayed
    t = tr.read(CAPTURE)
    ops = frame[frame.collective != "replay_step"]
    # rank 0's ops of the unmarked part and of step 0 (step 1 issues the same: one shape)
    wanted = [(o.index, o.op, o.bytes) for o in t.rank_ops(0) if o.step in (None, 0)]
    got = sorted(zip(ops.trace_op.astype(int), ops.collective, ops.size_bytes))
    assert got == sorted(wanted)
    assert (ops.time_us > 0).all() and ops.recorded_us.notna().all()
    assert set(ops.trace_group) == {"0", "1"}  # DeepSpeed's world group, and the default one's barriers


def test_a_step_row_per_shape_with_its_ops_and_the_recorded_step(replayed):
    frame, stdout = replayed
    steps = frame[frame.collective == "replay_step"].set_index("trace_step")
    assert sorted(steps.index) == [-1, 0]
    assert steps.loc[0, "trace_steps"] == "0,1" and steps.loc[0, "n_collectives"] == 5
    assert steps.loc[0, "size_bytes"] == 3 * 33472 + 1 + 4
    assert '"all_gather": {"bytes": 33472, "count": 1}' in steps.loc[0, "ops"]
    assert steps.loc[0, "recorded_us"] > 0 and steps.loc[0, "workload"] == "replay"
    assert steps.loc[0, "trace_file"] == "ds_zero2.trace" and steps.loc[0, "schema_version"] == 5
    assert "# Replay of ds_zero2.trace: 2 ranks" in stdout
    line = next(x for x in stdout.splitlines() if x.split()[:2] == ["0,1", "5"])
    assert "all_reduce 32.7 KiB" in line


def test_world_size_replays_a_data_parallel_trace_at_more_ranks(tmp_path):
    proc = _replay(tmp_path, str(CAPTURE), "--world-size", "3")
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_parquet(next(tmp_path.glob("*.parquet")))
    assert set(frame.world_size) == {3}
    assert len(frame[frame.collective == "replay_step"]) == 1


def _scaled(frame: pd.DataFrame, factor: float, run_id: str) -> pd.DataFrame:
    """The run's rows with every time times `factor` (bandwidths divided), as repetitions 0..5 a
    percent apart: compare decides from 6 repetitions a side."""
    reps = []
    for rep in range(6):
        f = frame.copy()
        k = factor * (1 + rep / 100)
        f["run_id"], f["repetition"] = run_id, rep
        for column in ("time_us", "time_us_min", "time_us_max", "time_us_p99"):
            f[column] = f[column] * k
        f["samples_us"] = f["samples_us"].map(lambda s, k=k: [x * k for x in s])
        f["algbw_GBps"], f["busbw_GBps"] = f["algbw_GBps"] / k, f["busbw_GBps"] / k
        reps.append(f)
    return pd.concat(reps, ignore_index=True)


def test_compare_pairs_two_replays_op_by_op(replayed, tmp_path):
    frame, _ = replayed
    before, after = tmp_path / "before.parquet", tmp_path / "after.parquet"
    _scaled(frame, 1.0, "before").to_parquet(before)
    _scaled(frame, 3.0, "after").to_parquet(after)
    proc = subprocess.run([sys.executable, "-m", "commbench", "compare", str(before), str(after)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a regression
    line = next(x for x in proc.stdout.splitlines() if x.startswith("replay step 0"))
    assert "regression" in line and "all_reduce" in line and "all_gather" in line, line


def test_commbench_s_own_ranks_are_captured_and_replayed(tmp_path):
    """The README's stand-in job: commbench's ranks end by os._exit (no atexit), and destroy their
    group before: each still writes its part, with its own rank and the world's size."""
    job = tmp_path / "zero.trace"
    proc = subprocess.run([sys.executable, "-m", "commbench", "capture", "--out", str(job), "--", sys.executable,
                           "-m", "commbench", "zero", "--stages", "2", "-n", "2", "-w", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    t = tr.read(job)
    assert t.world_size == 2 and t.ranks == [0, 1] and t.meta["missing_ranks"] == []
    assert t.totals(0)["all_reduce"][0] >= 2  # the step's gradient buckets, at least once per iteration
    replayed = _replay(tmp_path / "replayed", str(job))
    assert replayed.returncode == 0, replayed.stderr
    assert "# Replay of zero.trace: 2 ranks" in replayed.stdout


def test_layout_replays_the_job_in_each_data_parallel_group_at_once(tmp_path):
    proc = _replay(tmp_path, str(CAPTURE), "--layout", "tp=2", "--world-size", "4")
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_parquet(next(tmp_path.glob("*.parquet")))
    ops, step = frame[frame.collective != "replay_step"], frame[frame.collective == "replay_step"]
    assert list(step.world_size) == [4] and step.group_dim.isna().all()  # the step: the whole run's
    assert set(ops.group_dim) == {"dp"} and set(ops.world_size) == {2}
    assert sorted(set(zip(ops.group_index, ops.group_ranks))) == [(0, "0,2"), (1, "1,3")]
    assert set(ops[ops.collective == "all_gather"].size_bytes) == {33472 // 2}  # 1 / (tp x pp) of the bytes
    assert len(ops) == 2 * 5 and set(ops.trace_group) == {"1"}
