"""`--env NAME=v1|v2` with real gloo ranks on this machine: the grid once per setting and
repetition, the settings taking turns within each repetition, every other one reversed (A B, B A),
each pass on a fresh process group, the setting in every row (its own column, and the environment
the row records), for sweep, buckets and zero. The lab tests (test_lab_env.py) measure what a setting changes."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def run(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, pd.DataFrame | None]:
    out = tmp_path / "r.parquet"
    proc = subprocess.run([sys.executable, "-m", "commbench", *args, "--nproc", "2", "-w", "1", "-n", "3",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    return proc, (pd.read_parquet(out) if out.exists() else None)


def test_sweep_runs_the_grid_once_per_setting_and_records_it(tmp_path):
    proc, df = run(tmp_path, "sweep", "--env", "GLOO_SOCKET_IFNAME=lo", "--env", "GLOO_LOG_LEVEL=ERROR|WARNING",
                   "--sizes", "64K,256K", "--placement", "in")
    assert proc.returncode == 0, proc.stderr
    labels = ["GLOO_SOCKET_IFNAME=lo GLOO_LOG_LEVEL=ERROR", "GLOO_SOCKET_IFNAME=lo GLOO_LOG_LEVEL=WARNING"]
    assert list(df.settings) == [labels[0], labels[0], labels[1], labels[1]]
    assert list(df.size_bytes) == [65536, 262144] * 2 and set(df.wrong) == {0}
    # each row's recorded environment is the one it was measured under, not the one at the start
    assert [json.loads(e).get("GLOO_LOG_LEVEL") for e in df.env] == ["ERROR", "ERROR", "WARNING", "WARNING"]
    assert all(json.loads(e).get("GLOO_SOCKET_IFNAME") == "lo" for e in df.env)
    for label in labels:
        assert f"# Settings: {label}" in proc.stdout
    plan = json.loads(df.plan.iloc[0])
    assert plan["axes"] == [["GLOO_SOCKET_IFNAME", ["lo"]], ["GLOO_LOG_LEVEL", ["ERROR", "WARNING"]]]


def test_without_an_axis_the_settings_column_is_empty(tmp_path):
    proc, df = run(tmp_path, "sweep", "--sizes", "64K", "--placement", "in")
    assert proc.returncode == 0, proc.stderr
    assert df.settings.isna().all() and "# Settings" not in proc.stdout


def test_buckets_and_zero_take_the_same_axis(tmp_path):
    proc, df = run(tmp_path, "buckets", "--grad-bytes", "256K", "-d", "float32", "--bucket-size", "1e4,1e5",
                   "--env", "GLOO_LOG_LEVEL=ERROR|WARNING")
    assert proc.returncode == 0, proc.stderr
    assert list(df.settings) == ["GLOO_LOG_LEVEL=ERROR"] * 2 + ["GLOO_LOG_LEVEL=WARNING"] * 2
    assert set(df.wrong) == {0}
    proc, df = run(tmp_path / "z", "zero", "--model", "gpt2-125m", "--stages", "1,3", "--scale", "0.001",
                   "--env", "GLOO_LOG_LEVEL=ERROR|WARNING")
    assert proc.returncode == 0, proc.stderr
    assert list(zip(df.settings, df.zero_stage)) == [("GLOO_LOG_LEVEL=ERROR", 1), ("GLOO_LOG_LEVEL=ERROR", 3),
                                                     ("GLOO_LOG_LEVEL=WARNING", 1), ("GLOO_LOG_LEVEL=WARNING", 3)]


def passes(df: pd.DataFrame) -> list[tuple[int, str]]:
    """(repetition, setting) of each run of rows, in the order the rows were written: the order
    they were measured in (rank 0 appends each point's row as it finishes)."""
    keys = list(zip(df.repetition, df.settings))
    return [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]


def test_repetitions_are_outermost_and_the_settings_alternate_within_each(tmp_path):
    proc, df = run(tmp_path, "sweep", "--env", "GLOO_LOG_LEVEL=ERROR|WARNING", "-R", "2", "--sizes", "64K,256K",
                   "--placement", "in")
    assert proc.returncode == 0, proc.stderr
    a, b = "GLOO_LOG_LEVEL=ERROR", "GLOO_LOG_LEVEL=WARNING"
    assert passes(df) == [(0, a), (0, b), (1, b), (1, a)]  # balanced: every other repetition reversed
    assert list(df.size_bytes) == [65536, 262144] * 4 and set(df.wrong) == {0}
    # each pass ran under its own setting: the environment every row recorded alternates with it
    assert [json.loads(e).get("GLOO_LOG_LEVEL") for e in df.env] == ["ERROR"] * 2 + ["WARNING"] * 4 + \
        ["ERROR"] * 2
    said = [line for line in proc.stdout.splitlines() if line.startswith("# Settings:")]
    assert said == [f"# Settings: {a}  (repetition 1/2)", f"# Settings: {b}  (repetition 1/2)",
                    f"# Settings: {b}  (repetition 2/2)", f"# Settings: {a}  (repetition 2/2)"]
    # the closing tables still take each setting's two repetitions together, one table per setting
    for label in (a, b):
        assert proc.stdout.count(f"# Median over 2 repetitions: all_reduce [{label}]") == 1
        assert proc.stdout.count(f"# all_reduce [{label}]") == 1
    assert "# Results:" in proc.stdout and "(8 rows)" in proc.stdout


def test_buckets_alternate_the_settings_too(tmp_path):
    proc, df = run(tmp_path, "buckets", "--grad-bytes", "256K", "-d", "float32", "--bucket-size", "1e4,1e5",
                   "--env", "GLOO_LOG_LEVEL=ERROR|WARNING", "-R", "2")
    assert proc.returncode == 0, proc.stderr
    a, b = "GLOO_LOG_LEVEL=ERROR", "GLOO_LOG_LEVEL=WARNING"
    assert passes(df) == [(0, a), (0, b), (1, b), (1, a)] and len(df) == 8


def test_without_an_axis_repetitions_run_as_before(tmp_path):
    proc, df = run(tmp_path, "sweep", "-R", "2", "--sizes", "64K,256K", "--placement", "in")
    assert proc.returncode == 0, proc.stderr
    assert list(df.repetition) == [0, 0, 1, 1] and list(df.size_bytes) == [65536, 262144] * 2
    assert df.settings.isna().all() and "# Settings" not in proc.stdout
    starts = [line for line in proc.stdout.splitlines() if line.startswith("# Collective test starting")]
    assert starts == ["# Collective test starting: all_reduce  (repetition 1/2)",
                      "# Collective test starting: all_reduce  (repetition 2/2)"]
    assert proc.stdout.count("# Median over 2 repetitions: all_reduce") == 1
