"""`commbench nccl-tests run` against stand-in binaries, and nccl-tests results beside a sweep.

No GPU here, so the binaries are stand-ins written by the tests: small Python programs with a
shebang that print a recorded nccl-tests output (tests/data/nccl-tests) with real delays between
rows, fail mid-way, or hang with a child process. The real CLI runs in a subprocess; the results
are read back with pandas, and psutil checks that nothing is left running.
"""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import psutil
import pytest

from commbench.core.results import read_results

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
SAMPLE = DATA / "all_reduce_v2.19.4_1node_8xA100.txt"

STAND_IN = r'''#!{python}
# A stand-in for an nccl-tests binary: prints a recorded output (MODE: ok, fail, hang).
import json, os, subprocess, sys, time
MODE, DELAY, MARK = {mode!r}, {delay!r}, {mark!r}
args = sys.argv[1:]
if "-h" in args:
    print("USAGE: all_reduce_perf\n\t[-b,--minbytes <min size in bytes>] \n\t"
          "[-J,--output_file <file> write output to filepath, if accessible. Infer type from suffix "
          "(only json supported presently.)] \n\t[-h,--help]")
    sys.exit(0)
json_path = args[args.index("-J") + 1] if "-J" in args else None
lines = open({sample!r}).read().splitlines()
results = []
rows = 0
for line in lines:
    is_row = line[:12].strip().isdigit()
    if is_row:
        rows += 1
        if MODE == "fail" and rows > 5:
            print("dkh:584419:584480 [3] NCCL WARN Cuda failure 'an illegal memory access was encountered'",
                  flush=True)
            sys.stderr.write("dkh: Test CUDA failure common.cu:1036 'an illegal memory access was encountered'\n"
                             " .. dkh pid 584419: Test failure common.cu:891\n")
            sys.stderr.flush()
            sys.exit(1)
        if MODE == "hang" and rows > 3:
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", MARK])
            sys.stderr.write("waiting for a peer that never answers\n")
            sys.stderr.flush()
            time.sleep(300)
        time.sleep(DELAY)
        t = line.split()
        def half(tt, ab, bb, w):
            return {{"time": float(tt) + 0.0012, "alg_bw": float(ab) + 0.0001, "bus_bw": float(bb) + 0.0001,
                    "nwrong": float(w)}}
        results.append({{"size": int(t[0]), "count": int(t[1]), "type": t[2], "redop": t[3],
                        "root": "%6i" % int(t[4]), "out_of_place": half(*t[5:9]), "in_place": half(*t[9:13]),
                        "actual_iterations": 20, "experiment_name": ""}})
    print(line, flush=True)
if json_path:
    doc = {{"version": 2, "start_time": "2025-06-01 12:00:00", "args": [sys.argv[0]] + args, "env": [],
           "nccl_version": 21903, "config": {{"nthreads": 1, "ngpus": 8, "warmup_iters": 1, "iterations": 20,
           "per_iter_timing": "false", "blocking_collectives": "false", "devices": []}}, "results": results,
           "out_of_bounds": {{"count": 0, "okay": "true"}},
           "average_bus_bandwidth": {{"bandwidth": 34.9, "okay": "unchecked"}}, "errors": [],
           "end_time": "2025-06-01 12:00:09"}}
    with open(json_path, "w") as fh:
        json.dump(doc, fh)
sys.exit(0)
'''


def stand_in(tmp_path: Path, mode: str, delay: float = 0.0) -> tuple[Path, str]:
    mark = f"commbench-stand-in-{uuid.uuid4().hex}"
    path = tmp_path / "bin" / "all_reduce_perf"
    path.parent.mkdir(exist_ok=True)
    path.write_text(STAND_IN.format(python=sys.executable, mode=mode, delay=delay, mark=mark, sample=str(SAMPLE)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path, mark


def commbench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                          timeout=timeout)


def leftovers(mark: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(mark in part for part in (p.info["cmdline"] or [])):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_rows_arrive_while_the_binary_runs_and_json_is_preferred(tmp_path):
    binary, mark = stand_in(tmp_path, "ok", delay=0.25)
    out = tmp_path / "r" / "run.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "nccl-tests", "run", "--out", str(out),
                             "--label", "live", str(binary), "--", "-b", "8", "-e", "128M", "-f", "2", "-g", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    counts: set[int] = set()
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if out.exists():
            try:
                counts.add(len(read_results([out])))  # the file and its parts (core/results.py)
            except Exception:  # noqa: BLE001 - read between two atomic renames: try again
                pass
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert len([c for c in counts if 0 < c < 50]) >= 3, counts  # rows were in the file before the binary ended
    assert "# Collective test starting: all_reduce_perf" in stdout  # its output, streamed through
    assert "-J" in stderr and "from the -J JSON" in stdout
    df = pd.read_parquet(out)
    assert len(df) == 50 and set(df.label) == {"live"} and set(df.workload) == {"nccl-tests"}
    r = df[(df.size_bytes == 134217728) & ~df.in_place].iloc[0]
    assert r.time_us == pytest.approx(1295.4112) and r.algbw_GBps == pytest.approx(103.6101)  # the JSON's values
    assert set(df.world_size) == {8} and set(df.hosts.map(tuple)) == {("dkh",)}  # Rank lines of the text
    assert set(df.nccl_version) == {"2.19.3"} and set(df.launcher) == {"nccl-tests"}
    plan = json.loads(df.plan.iloc[0])
    assert plan["source"] == "run" and "-J" in plan["argv"]
    assert (out.with_suffix(".log")).read_text().count("\n") >= 48  # the raw output is kept beside
    assert json.loads(out.with_suffix(".json").read_text())["version"] == 2
    assert leftovers(mark) == []


def test_text_only_without_json(tmp_path):
    binary, _ = stand_in(tmp_path, "ok")
    out = tmp_path / "t.parquet"
    proc = commbench("nccl-tests", "run", "--no-json", "--out", str(out), str(binary), "-b", "8")
    assert proc.returncode == 0, proc.stderr
    df = pd.read_parquet(out)
    r = df[(df.size_bytes == 134217728) & ~df.in_place].iloc[0]
    assert r.time_us == 1295.41 and r.busbw_GBps == 181.32 and len(df) == 50  # as printed
    assert "from the text output" in proc.stdout


def test_a_binary_failing_mid_way_keeps_its_rows(tmp_path):
    binary, mark = stand_in(tmp_path, "fail")
    out = tmp_path / "f.parquet"
    proc = commbench("nccl-tests", "run", "--out", str(out), str(binary), "--", "-b", "8", "-e", "128M")
    assert proc.returncode == 3, proc.stderr
    df = pd.read_parquet(out)
    assert sorted(set(df.size_bytes)) == [8, 16, 32, 64, 128] and len(df) == 10
    err = proc.stderr
    assert "last lines on stderr:" in err and "  | dkh: Test CUDA failure common.cu:1036" in err
    assert "ended with exit code 1; 10 rows kept in" in err.strip().splitlines()[-1]
    assert leftovers(mark) == []


def test_a_hung_binary_is_killed_with_its_children_at_the_timeout(tmp_path):
    binary, mark = stand_in(tmp_path, "hang")
    out = tmp_path / "h.parquet"
    t0 = time.monotonic()
    proc = commbench("nccl-tests", "run", "--timeout", "4", "--out", str(out), str(binary), "--", "-b", "8")
    took = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    assert took < 30
    df = pd.read_parquet(out)
    assert len(df) == 6 and sorted(set(df.size_bytes)) == [8, 16, 32]
    assert "  | waiting for a peer that never answers" in proc.stderr
    assert "timed out after 4 s: its process group was killed; 6 rows kept" in proc.stderr
    time.sleep(0.5)
    assert leftovers(mark) == []


def _rows(path) -> int:
    """Rows a running run has written so far: the file and its live parts (pd.read_parquet of the
    file alone sees only the first batch, and the wait below ran into its 60 s deadline)."""
    from commbench.core.errors import CommbenchError
    from commbench.core.results import read_results

    try:
        return len(read_results([path]))
    except (OSError, ValueError, CommbenchError):  # not written yet, or a part being linked into place
        return 0


def test_sigterm_stops_the_binary_and_keeps_rows(tmp_path):
    binary, mark = stand_in(tmp_path, "hang")
    out = tmp_path / "s.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "nccl-tests", "run", "--out", str(out), str(binary)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (leftovers(mark) and _rows(out) == 6) and time.monotonic() < deadline:  # the hang has begun and
        time.sleep(0.1)  # every row it printed is parsed (on a busy machine parsing lags the binary's output)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert len(pd.read_parquet(out)) == 6 and "interrupted" in stderr
    time.sleep(0.5)
    assert leftovers(mark) == []


def test_bad_usage_is_one_line_and_exit_2(tmp_path):
    proc = commbench("nccl-tests", "run", str(tmp_path / "nope_perf"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "is not an executable file" in proc.stderr
    binary, _ = stand_in(tmp_path, "ok")
    proc = commbench("nccl-tests", "run", "--np", "2", str(binary))
    assert proc.returncode == 2 and "--launcher mpirun or srun" in proc.stderr
    taken = tmp_path / "taken.parquet"
    taken.write_bytes(b"x")
    proc = commbench("nccl-tests", "run", "--out", str(taken), str(binary))
    assert proc.returncode == 2 and "already exists" in proc.stderr and taken.read_bytes() == b"x"


def test_a_sweep_and_an_imported_log_plot_together_and_meet_in_compare(tmp_path):
    sweep = tmp_path / "sweep.parquet"
    proc = commbench("sweep", "--collective", "all_gather", "-b", "1M", "-e", "4M", "--nproc", "2",
                     "--iters", "5", "--warmup", "1", "--out", str(sweep))
    assert proc.returncode == 0, proc.stderr
    imported = tmp_path / "nccl.parquet"
    proc = commbench("nccl-tests", "import", str(DATA / "all_gather_v2.18.0_2ranks_stderr_noise.txt"),
                     "--out", str(imported), "--label", "nccl-tests")
    assert proc.returncode == 0, proc.stderr

    png = tmp_path / "both.png"
    proc = commbench("plot", str(sweep), str(imported), "--out", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.stat().st_size > 10_000

    # Same collective, dtype, sizes, placements and world size: the points pair up across the
    # workloads (an nccl-tests log measures what a sweep measures), and the workload is shown as
    # a difference. One repetition a side cannot decide: inconclusive, exit 3, never a pass.
    s, n = pd.read_parquet(sweep), pd.read_parquet(imported)
    key = ["collective", "dtype", "op", "size_bytes", "in_place", "world_size", "nnodes", "ranks_per_node"]
    common = s[key].merge(n[key]).drop_duplicates()
    assert len(common) == 6  # 1, 2, 4 MiB x out-of-place, in-place
    proc = commbench("compare", str(sweep), str(imported), "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 3 and report["verdict"] == "inconclusive"
    assert len(report["points"]) == 6
    assert "workload: before sweep, after nccl-tests" in report["differences"]
