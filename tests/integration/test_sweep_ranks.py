"""`commbench sweep` with real gloo ranks on this machine: what lands in the parquet file, the
check switch, torchrun, and what happens on Ctrl-C, SIGTERM, a dead rank and a taken file name.

Every test runs the real CLI in a subprocess and reads the real results back with pandas.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from commbench.core.results import COLUMNS, SCHEMA_VERSION
from helpers import clean_env  # tests/helpers.py

pytestmark = pytest.mark.integration

ALL = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "sendrecv")

# The busbw factors of docs/RESULTS.md (nccl-tests' getBw), written out here on purpose: not imported.
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}

# The placements torch can express for each collective (in_place values expected in the file).
IN_PLACE = {
    "all_reduce": {True}, "broadcast": {True}, "reduce": {True},
    "all_to_all": {False}, "sendrecv": {False},
    "all_gather": {False, True}, "reduce_scatter": {False, True},
}


def commbench(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                          env=env or clean_env(), timeout=timeout)


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def table_rows(stdout: str) -> dict[str, list[list[str]]]:
    """The nccl-tests tables on stdout: collective -> data rows, split into fields."""
    tables: dict[str, list[list[str]]] = {}
    current = None
    for line in stdout.splitlines():
        if m := re.match(r"# Collective test starting: (\w+)", line):
            current = m.group(1)
            tables[current] = []
        elif line.startswith("# Collective test concluded:"):
            current = None
        elif current is not None and line.strip() and not line.startswith("#"):
            # the marks after the cells: "~ ±N%" (missed --precision), "! wire: ..." (counters)
            tables[current].append(re.split(r"  [~!] ", line)[0].split())
    return tables


def cells(fields: list[str]) -> list[list[str]]:
    """A table line's cells (time algbw busbw #wrong), one per placement the collective has."""
    return [fields[i:i + 4] for i in range(5, len(fields), 4)]


# ---------------------------------------------------------------- one sweep per world size


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}ranks")
def sweep_run(request, tmp_path_factory):
    n = request.param
    out = tmp_path_factory.mktemp(f"sweep{n}") / "all.parquet"
    proc = commbench("sweep", "--collective", "all", "--sizes", "1K,64K", "--time-budget", "0.01",
                     "--nproc", str(n), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return n, proc, pd.read_parquet(out)


def test_every_collective_and_placement_is_stored(sweep_run):
    n, _, df = sweep_run
    assert set(df.collective) == set(ALL)
    for name, expected in IN_PLACE.items():
        assert set(df[df.collective == name].in_place) == expected, name
    # 2 sizes for every placement of every collective, each stored once.
    assert len(df) == 2 * sum(len(v) for v in IN_PLACE.values())
    assert not df.duplicated(["collective", "size_bytes", "in_place", "repetition"]).any()
    assert (df.world_size == n).all()
    assert (df.wrong == 0).all()
    assert (df.launcher == "local").all()
    assert (df.dtype == "float32").all()
    # Sizes as nccl-tests rounds them: 1K and 64K stay for the full-buffer collectives; the
    # gather/scatter family rounds to a multiple of 4 elements per rank.
    for name in ("all_reduce", "broadcast", "reduce", "sendrecv"):
        assert sorted(set(df[df.collective == name].size_bytes)) == [1024, 65536]
    for name in ("all_gather", "reduce_scatter", "all_to_all"):
        for requested in (1024, 65536):
            per_rank = (requested // 4) // (4 * n) * 4
            assert per_rank * n * 4 in set(df[df.collective == name].size_bytes), (name, requested)


def test_bandwidths_follow_the_nccl_tests_definitions(sweep_run):
    n, _, df = sweep_run
    for row in df.itertuples():
        algbw = row.size_bytes / (row.time_us * 1e-6) / 1e9
        assert row.algbw_GBps == pytest.approx(algbw, rel=1e-12), row.collective
        assert row.busbw_GBps == pytest.approx(algbw * BUSBW_FACTOR[row.collective](n), rel=1e-12), row.collective


def test_samples_and_summary_times_agree(sweep_run):
    _, _, df = sweep_run
    for row in df.itertuples():
        samples = list(row.samples_us)
        assert len(samples) == row.iters
        assert 10 <= row.iters <= 2000  # adaptive, within --min-iters..--max-iters defaults
        assert all(s > 0 for s in samples)
        assert row.time_us == pytest.approx(statistics.median(samples), rel=1e-12)
        assert row.time_us_min == pytest.approx(min(samples)) and row.time_us_max == pytest.approx(max(samples))
        assert row.time_us_min <= row.time_us <= row.time_us_max
        assert row.time_us <= row.time_us_p99 <= row.time_us_max


def test_schema_columns_and_run_metadata(sweep_run):
    n, _, df = sweep_run
    assert set(COLUMNS) <= set(df.columns)
    always = ["run_id", "started_at", "backend", "device", "hosts", "mtu", "iface", "link_layer", "env", "net",
              "plan", "commbench_version", "torch_version", "schema_version", "workload"]
    for column in always:
        assert df[column].notna().all(), column
    assert df.run_id.nunique() == 1 and df.started_at.nunique() == 1
    assert (df.backend == "gloo").all() and (df.device == "cpu").all()
    assert (df.iface == "lo").all() and (df.link_layer == "loopback").all()
    assert (df.mtu == int(Path("/sys/class/net/lo/mtu").read_text())).all()
    assert (df.schema_version == SCHEMA_VERSION).all() and (df.workload == "sweep").all()
    assert all(list(h) == [socket.gethostname()] for h in df.hosts)
    assert (df.nnodes == 1).all() and (df.ranks_per_node == n).all()
    for column in ("nccl_version", "bucket_bytes", "zero_stage"):
        assert df[column].isna().all(), column
    # The json columns parse; the plan is the plan that ran.
    assert all(isinstance(json.loads(e), dict) for e in df.env)
    net = json.loads(df.net.iloc[0])
    assert net[socket.gethostname()]["iface"] == "lo"
    plan = json.loads(df.plan.iloc[0])
    assert plan["collectives"] == list(ALL) and plan["sizes"] == [1024, 65536] and plan["run_id"] == df.run_id.iloc[0]
    # op and root only where they mean something.
    reducing = df.collective.isin(["all_reduce", "reduce_scatter", "reduce"])
    assert (df[reducing].op == "sum").all() and df[~reducing].op.isna().all()
    rooted = df.collective.isin(["broadcast", "reduce"])
    assert (df[rooted].root == 0).all() and (df[~rooted].root == -1).all()


def test_stdout_is_the_nccl_tests_table(sweep_run):
    n, proc, df = sweep_run
    out = proc.stdout
    assert re.search(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong\s+time\s+algbw"
                     r"\s+busbw\s+#wrong\s*$", out, re.MULTILINE)
    assert f"ranks {n} " in out
    assert len(re.findall(r"^#\s+Rank\s+\d+ Pid", out, re.MULTILINE)) == n
    tables = table_rows(out)
    assert list(tables) == list(ALL)
    for name, rows in tables.items():
        stored = df[df.collective == name]
        assert [int(r[0]) for r in rows] == sorted(set(stored.size_bytes)), name  # one row per size
        for fields in rows:
            # only the placements torch offers: no n/a half (all_reduce is in-place only)
            assert len(fields) == 5 + 4 * len(IN_PLACE[name]), fields
            assert "n/a" not in fields, (name, fields)
            for cell in cells(fields):
                assert cell[3] == "0"  # #wrong
    assert "# Results: " in out and f"({len(df)} rows)" in out
    assert proc.stderr.strip() == ""


# ---------------------------------------------------------------- the check and its fault switch


@pytest.mark.failure(
    row="results-answer-wrong-rank-corrupts",
    section="Lost ranks and broken links",
    failure="the results answer is wrong (a rank corrupts data)",
    does="counted per point in `#wrong`, stored, exit 1 with one line",
)
def test_corrupted_output_is_counted_and_fails_the_run(tmp_path):
    out = tmp_path / "bad.parquet"
    proc = commbench("sweep", "--collective", "all_reduce,all_gather", "--sizes", "4K", "--time-budget", "0.01",
                     "--out", str(out), env=clean_env(COMMBENCH_TEST_FAULT="corrupt:1"))
    assert proc.returncode == 1, proc.stderr
    df = pd.read_parquet(out)
    assert len(df) == 3 and (df.wrong > 0).all()
    lines = stderr_lines(proc.stderr)
    assert lines == [line for line in lines if line.startswith("commbench: ")]
    assert sum("some results were wrong" in line for line in lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    wrong_cells = [c[3] for rows in table_rows(proc.stdout).values() for r in rows for c in cells(r)]
    assert wrong_cells and all(int(w) > 0 for w in wrong_cells)


def test_no_check_stores_null_wrong(tmp_path):
    out = tmp_path / "unchecked.parquet"
    proc = commbench("sweep", "--collective", "all_reduce,all_gather", "--sizes", "4K", "--time-budget", "0.01",
                     "--no-check", "--out", str(out), env=clean_env(COMMBENCH_TEST_FAULT="corrupt:1"))
    assert proc.returncode == 0, proc.stderr
    df = pd.read_parquet(out)
    assert len(df) == 3 and df.wrong.isna().all()
    assert "validation: 0" in proc.stdout
    assert all(c[3] == "N/A" for rows in table_rows(proc.stdout).values() for r in rows for c in cells(r))


# ---------------------------------------------------------------- torchrun


def test_torchrun_launches_the_ranks(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
                           "-m", "commbench", "sweep", "--sizes", "4K", "--time-budget", "0.01", "--out", str(out)],
                          capture_output=True, text=True, env=clean_env(), timeout=180)
    assert proc.returncode == 0, proc.stderr
    # Every rank makes its own run id; only rank 0 writes, so there is exactly one file.
    files = list(out.iterdir())
    assert len(files) == 1 and files[0].suffix == ".parquet", files
    df = pd.read_parquet(files[0])
    assert len(df) == 1
    assert (df.launcher == "torchrun").all() and (df.world_size == 3).all() and (df.wrong == 0).all()
    assert json.loads(df.env.iloc[0])["WORLD_SIZE"] == "3"
    assert df.run_id.iloc[0] == files[0].stem
    # Only rank 0 prints the table.
    assert proc.stdout.count("# Collective test starting: all_reduce") == 1
    assert "launcher torchrun  ranks 3" in proc.stdout


# ---------------------------------------------------------------- interruptions


LONG_SWEEP = ["sweep", "--collective", "all_reduce", "--sizes", ",".join(f"{k}K" for k in range(1, 101)),
              "--iters", "2000", "--warmup", "1"]  # 100 points of 2000 iterations: minutes, not seconds


def start(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout, "w") as so, open(stderr, "w") as se:
        proc = subprocess.Popen([sys.executable, "-m", "commbench", *args], stdout=so, stderr=se,
                                env=clean_env(), start_new_session=True)
    return proc, stdout, stderr


def wait_for_rows(proc: subprocess.Popen, out: Path, stderr: Path, rows: int = 1, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited early with {proc.returncode}: {stderr.read_text()}"
        try:
            n = len(pd.read_parquet(out))
        except (OSError, ValueError):  # not created yet
            n = 0
        if n >= rows:
            return n
        time.sleep(0.1)
    raise AssertionError(f"no {rows} row(s) in {out} after {timeout} s")


def live_session_processes(sid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getsid(p.pid) == sid and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def assert_no_processes_left(sid: int, wait: float = 10) -> None:
    deadline = time.monotonic() + wait
    while (left := live_session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, [(p.pid, p.cmdline()) for p in left]


def kill_quietly(proc: subprocess.Popen) -> None:
    """Cleanup after a failed assertion: end the session this test started, nothing else."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def kept_rows(stderr: str, out: Path) -> int:
    m = re.search(rf"commbench: (\d+) finished rows kept in {re.escape(str(out))}$", stderr, re.MULTILINE)
    assert m, stderr
    return int(m.group(1))


@pytest.mark.parametrize("sig, to_group, code", [
    pytest.param(signal.SIGINT, True, 130, id="ctrl-c"),
    pytest.param(signal.SIGINT, False, 130, id="sigint-to-supervisor"),
    pytest.param(signal.SIGTERM, True, 143, id="sigterm-preemption"),
])
@pytest.mark.failure(
    row="ctrl-c-terminal-sigint-whole",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="Ctrl-C in a terminal (SIGINT to the whole process group)",
    does="every rank stops at the current point, rank 0 flushes and says `N finished rows kept in FILE`; exit 130; "
         "no `.tmp` left, no process left",
    cases="ctrl-c",
)
@pytest.mark.failure(
    row="sigint-local-supervisor-only",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="SIGINT to the local supervisor only",
    does="forwarded to every rank; exit 130, file kept",
    cases="sigint-to-supervisor",
)
@pytest.mark.failure(
    row="sigterm-process-group-slurm-preemption",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="SIGTERM to the process group (Slurm preemption, `scancel` of a step)",
    does="exit 143, file kept",
    cases="sigterm-preemption",
)
def test_interrupt_keeps_finished_points(tmp_path, sig, to_group, code):
    out = tmp_path / "long.parquet"
    proc, _, stderr = start([*LONG_SWEEP, "--out", str(out)], tmp_path)
    try:
        before = wait_for_rows(proc, out, stderr)
        if to_group:
            os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C, or Slurm, does
        else:
            os.kill(proc.pid, sig)
        assert proc.wait(30) == code, stderr.read_text()
    finally:
        kill_quietly(proc)
    df = pd.read_parquet(out)
    assert before <= len(df) < 100  # every finished point, and it really was interrupted
    assert (df.wrong == 0).all() and df.time_us.notna().all()
    err = stderr.read_text()
    assert "Traceback" not in err, err
    assert kept_rows(err, out) == len(df)
    assert_no_processes_left(proc.pid)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.failure(
    row="rank-killed-kill-9-mid",
    section="Lost ranks and broken links",
    failure="a rank killed (`kill -9`) mid-sweep, local ranks",
    does="the supervisor names it (`rank 1 (pid N) ended with SIGKILL`), stops the others within its 15 s grace, "
         "exit 3; file valid with every finished point; no process left",
)
def test_dead_rank_fails_the_run_and_keeps_the_points(tmp_path):
    out = tmp_path / "dead.parquet"
    proc, stdout, stderr = start([*LONG_SWEEP, "--nproc", "2", "--timeout", "20", "--out", str(out)], tmp_path)
    try:
        before = wait_for_rows(proc, out, stderr)
        m = re.search(r"^#\s+Rank\s+1 Pid\s+(\d+)", stdout.read_text(), re.MULTILINE)
        assert m, stdout.read_text()
        rank1 = int(m.group(1))
        assert rank1 in {c.pid for c in psutil.Process(proc.pid).children()}
        os.kill(rank1, signal.SIGKILL)
        t0 = time.monotonic()
        assert proc.wait(60) == 3, stderr.read_text()
        elapsed = time.monotonic() - t0
    finally:
        kill_quietly(proc)
    err = stderr.read_text()
    assert f"rank 1 (pid {rank1}) ended with SIGKILL" in err, err
    assert "Traceback" not in err, err
    assert all(line.startswith("commbench: ") for line in stderr_lines(err)), err
    df = pd.read_parquet(out)
    assert before <= len(df) < 100 and (df.wrong == 0).all()
    assert kept_rows(err, out) == len(df)
    assert elapsed < 60
    assert_no_processes_left(proc.pid)


# ---------------------------------------------------------------- a taken file name


@pytest.mark.failure(row="results-file-already-exists")
def test_second_run_into_the_same_file_is_refused(tmp_path):
    out = tmp_path / "once.parquet"
    first = commbench("sweep", "--sizes", "1K", "--time-budget", "0.01", "--out", str(out))
    assert first.returncode == 0, first.stderr
    data = out.read_bytes()
    second = commbench("sweep", "--sizes", "1K", "--time-budget", "0.01", "--out", str(out))
    assert second.returncode == 2
    lines = stderr_lines(second.stderr)
    assert len(lines) == 1 and lines[0].startswith("commbench: ") and "already exists" in lines[0], second.stderr
    assert "Traceback" not in second.stderr
    assert out.read_bytes() == data
    assert len(pd.read_parquet(out)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["once.parquet"]
