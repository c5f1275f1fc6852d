"""Bad input on `commbench sweep`: exit code 2, one line on stderr naming the problem, no traceback.

Every case runs the real CLI (`python -m commbench sweep ...`) in a subprocess. Almost all of
them are refused before any rank is spawned, so each costs about one `import torch`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

EXIT_USAGE = 2

# (id, extra argv, substrings the one stderr line must contain)
CASES = [
    ("unknown-collective", ["--collective", "allreduc"],
     ["unknown collective 'allreduc' (did you mean all_reduce?)", "use one of all_reduce"]),
    ("empty-collective", ["--collective", ","], ["--collective is empty"]),
    ("cuda-graph-on-gloo", ["--cuda-graph", "--backend", "gloo"],
     ["--cuda-graph captures NCCL calls on GPUs and this run uses gloo", "drop --cuda-graph"]),
    ("unknown-dtype", ["-d", "float7"], ["unknown dtype 'float7'", "use one of float32"]),
    ("misspelt-dtype", ["-d", "flaot16"], ["unknown dtype 'flaot16' (did you mean float16?)"]),
    ("min-above-max", ["-b", "1M", "-e", "1K"],
     ["--min-bytes 1048576 is larger than --max-bytes 1024", "swap them"]),
    ("zero-size", ["-b", "0"], ["--min-bytes '0' must be at least 1 byte"]),
    ("mtu-with-an-iface-list", ["--mtu", "1500,9000", "--iface", "lo,lo"],
     ["--mtu sets one interface's MTU", "--iface lo --mtu 1500,9000"]),
    ("negative-size", ["-e", "-5"], ["--max-bytes '-5' is not a size", "e.g. 8, 4K"]),
    ("unparseable-size", ["-e", "12Q"], ["--max-bytes '12Q' is not a size", "e.g. 8, 4K"]),
    ("fractional-bytes", ["-e", "1.5"], ["--max-bytes '1.5' is not a whole number of bytes"]),
    ("bad-sizes-item", ["--sizes", "1K,abc,4K"], ["--sizes 'abc' is not a size"]),
    ("empty-sizes", ["--sizes", ","], ["--sizes is empty"]),
    ("nproc-zero", ["--nproc", "0"], ["--nproc 0 must be at least 1", "--nproc 2"]),
    ("nproc-not-a-number", ["--nproc", "two"], ["'--nproc'", "'two' is not a valid integer"]),
    ("op-gloo-cannot-do", ["--op", "avg"],
     ["the gloo backend cannot reduce with op avg", "use --op one of max, min, prod, sum"]),
    ("unknown-op", ["--op", "median"], ["unknown reduction op 'median': use one of sum"]),  # no guess: not mean
    ("misspelt-op", ["--op", "summ"], ["unknown reduction op 'summ' (did you mean sum?)"]),
    ("placement-out-allreduce", ["--collective", "allreduce", "--placement", "out"],
     ["torch offers all_reduce in place only", "use --placement in or both"]),
    ("placement-unknown", ["--placement", "sideways"], ["'sideways' is not one of"]),
    ("root-out-of-range", ["--root", "5", "--nproc", "2"],
     ["--root 5 is not a rank of this run (0..1)"]),
    ("nccl-without-gpu", ["--backend", "nccl"], ["--backend nccl needs CUDA GPUs", "use --backend gloo"]),
    ("unknown-option", ["--bogus"], ["no such option --bogus", "commbench sweep --help"]),
    ("iters-zero", ["--iters", "0"], ["--iters 0 must be at least 1"]),
    ("warmup-negative", ["--warmup", "-2"], ["--warmup -2 must be 0 or more"]),
    ("min-iters-above-max-iters", ["--min-iters", "10", "--max-iters", "5"],
     ["--min-iters 10 is larger than --max-iters 5"]),
    ("step-factor-below-one", ["--step-factor", "0.5"], ["--step-factor must be more than 1", "-f 2"]),
    ("time-budget-zero", ["--time-budget", "0"], ["--time-budget", "must be more than 0"]),
    ("precision-not-a-fraction", ["--precision", "3"], ["--precision 3.0 must be 0 (off), a fraction below 1 or auto"]),
    ("sendrecv-one-rank", ["--collective", "sendrecv", "--nproc", "1"],
     ["sendrecv needs at least 2 ranks", "raise --nproc"]),
    ("all-sizes-round-to-zero", ["--collective", "all_gather", "--sizes", "8"],
     ["every size rounds to 0 elements for all_gather on 2 ranks", "at least 32"]),
]


def run_sweep(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "commbench", "sweep", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


def assert_one_line_refusal(proc: subprocess.CompletedProcess, needles: list[str]) -> str:
    assert proc.returncode == EXIT_USAGE, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("commbench: ") and line.strip() != "commbench:", line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, float, Path]]:
    """Runs every table case once, a few at a time: each is its own `python -m commbench` process,
    and nearly all of its time is `import torch`, so running them side by side keeps the file fast."""
    base = tmp_path_factory.mktemp("bad-input")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {case_id: pool.submit(run_sweep, [*args, "--out", str(base / case_id / "results")], base)
                   for case_id, args, _ in CASES}
        return {case_id: (*f.result(), base / case_id / "results") for case_id, f in futures.items()}


@pytest.mark.parametrize("case_id, needles", [pytest.param(i, n, id=i) for i, _, n in CASES])
@pytest.mark.failure(
    row="26-bad-sweep-flags-sizes",
    section="Bad input",
    failure="26 bad `sweep` flags (sizes, dtypes, ops, placements, ranks, iterations, backend)",
    does="refused before any rank starts",
)
def test_bad_input_is_refused_with_one_line(refusals, case_id: str, needles: list[str]) -> None:
    proc, elapsed, out = refusals[case_id]
    assert_one_line_refusal(proc, needles)
    # Refused before anything was measured: no results folder, no file.
    assert not out.exists()
    # Every case fails while parsing or planning, before ranks start; one torch import takes ~1.5 s.
    assert elapsed < 60, elapsed


@pytest.mark.failure(
    row="sweep-cannot-fit-memory",
    section="Bad input",
    failure="a sweep that cannot fit in memory",
    does="refused by the estimate before allocation",
)
def test_memory_estimate_fails_before_allocation(tmp_path: Path) -> None:
    # 1 TiB per buffer cannot fit: the estimate must refuse it before any rank allocates (which
    # would take far longer, swap, or get the process OOM-killed instead of exiting 2).
    proc, elapsed = run_sweep(["-b", "1T", "-e", "1T", "--out", str(tmp_path / "r.parquet")], tmp_path)
    line = assert_one_line_refusal(proc, ["but only", "is left under the free memory of this host",
                                          "lower --max-bytes"])
    assert "TiB" in line
    assert elapsed < 15, f"took {elapsed:.1f} s: the memory check did not come first"
    assert not (tmp_path / "r.parquet").exists()


@pytest.mark.failure(
    row="results-file-already-exists",
    section="The result store",
    failure="the results file already exists",
    does="refused before anything is measured, exit 2, the file untouched, nothing left beside it",
)
def test_existing_results_file_is_refused_and_untouched(tmp_path: Path) -> None:
    target = tmp_path / "old.parquet"
    payload = b"PAR1 not really parquet, but somebody's data\n" * 10
    target.write_bytes(payload)
    before = target.stat().st_mtime_ns
    proc, _ = run_sweep(["--sizes", "1K", "--time-budget", "0.01", "--out", str(target)], tmp_path)
    assert_one_line_refusal(proc, [f"results file {target} already exists", "pass another --out"])
    assert target.read_bytes() == payload
    assert target.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.parquet"]  # no temporary left beside it


@pytest.mark.failure(
    row="out-inside-regular-file",
    section="The result store",
    failure="`--out` inside a regular file",
    does="exit 2, the file untouched",
)
def test_out_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me\n")
    proc, _ = run_sweep(["--sizes", "1K", "--out", str(plain)], tmp_path)
    assert_one_line_refusal(proc, [f"--out {plain} is a file, not a folder", "pass a folder or a .parquet"])
    assert plain.read_text() == "keep me\n"
