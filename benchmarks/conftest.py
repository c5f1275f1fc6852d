"""The pytest-benchmark suite (benchmarks/test_*.py): its sizes and its generated inputs.

    python -m pytest benchmarks/                                    # measure (a few minutes)
    python -m pytest benchmarks/ --benchmark-disable -q             # short mode: each body once, as a test
    python -m pytest benchmarks/ --bench-rows 20000                 # smaller inputs (or COMMBENCH_BENCH_ROWS)

Inputs are made once a session, before anything is timed: the analysis sides by
benchmarks/analysis_scale.py's generator (the rows `commbench compare/gate/plot/report` are
measured on at scale, here at --bench-rows), the nccl-tests logs from a recorded log
(tests/data/nccl-tests) whose rows are repeated with perturbed times, as `-N` cycles print them.
The default run (`python -m pytest`, testpaths = tests) never collects this folder.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:  # analysis_scale and common, the scripts' own modules
    sys.path.insert(0, str(HERE))

DEFAULT_ROWS = 100_000
REPETITIONS = 25  # -R 25 a side, as analysis_scale.py generates them
NCCL_TESTS_SAMPLE = REPO / "tests" / "data" / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt"


def pytest_addoption(parser):
    parser.addoption("--bench-rows", type=int, default=None,
                     help=f"result rows the analysis and parser benchmarks run on (default {DEFAULT_ROWS:,}, "
                          "or COMMBENCH_BENCH_ROWS; a multiple of 50; the parsers take at most the "
                          "importer's limit)")


def configured_rows(config) -> int:
    rows = config.getoption("--bench-rows")
    if rows is None:
        text = os.environ.get("COMMBENCH_BENCH_ROWS", str(DEFAULT_ROWS))
        try:
            rows = int(text)
        except ValueError:
            raise pytest.UsageError(f"COMMBENCH_BENCH_ROWS={text!r} is not a number of rows") from None
    if rows < 2 * REPETITIONS or rows % (2 * REPETITIONS):
        raise pytest.UsageError(f"--bench-rows {rows}: pass a positive multiple of {2 * REPETITIONS} "
                                f"(two sides of {REPETITIONS} repetitions a point)")
    return rows


def pytest_configure(config):
    configured_rows(config)  # a bad size stops the run before anything is generated (exit 4)


@pytest.fixture(scope="session")
def bench_rows(pytestconfig) -> int:
    return configured_rows(pytestconfig)


# ---- analysis: two sides of generated sweeps ---------------------------------------------------


@dataclass(frozen=True)
class Sides:
    before: Path
    after: Path
    rows: int  # both sides together


@pytest.fixture(scope="session")
def analysis_sides(bench_rows, tmp_path_factory) -> Sides:
    """before (MTU 1500) and after (MTU 9000: between nodes 5% faster, all_to_all bfloat16 8%
    slower), half the rows each, written as commbench writes results (analysis_scale.py)."""
    import analysis_scale

    folder = tmp_path_factory.mktemp("sides")
    paths = []
    for i, (label, mtu, gain) in enumerate(analysis_scale.SIDES):
        table = analysis_scale.side_table(label, mtu, gain, bench_rows // 2 // REPETITIONS, REPETITIONS, 20,
                                          seed=i + 1)
        path = folder / f"{label}.parquet"
        analysis_scale.write_like_commbench(table, path)
        analysis_scale.check_reads_back(path)
        paths.append(path)
    return Sides(paths[0], paths[1], bench_rows)


# ---- parsers: nccl-tests logs at scale ---------------------------------------------------------

_ROW = re.compile(r"^\s*[0-9]+\s+[0-9]+\s+[A-Za-z]")


@dataclass(frozen=True)
class Half:
    time: float
    algbw: float
    busbw: float
    wrong: int


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    halves: tuple  # out-of-place, in-place

    def text(self) -> str:
        """As nccl-tests' src/common.cu prints a row (the recorded log's columns, to the byte)."""
        head = f"{self.size:12d}  {self.count:12d}  {self.dtype:>8s}  {self.redop:>6s}  {self.root:6d}"
        return head + "".join(f"  {h.time:7.2f}  {h.algbw:6.2f}  {h.busbw:6.2f}  {h.wrong:6d}" for h in self.halves)


def parse_sample_row(line: str) -> Row:
    t = line.split()
    halves = tuple(Half(float(t[i]), float(t[i + 1]), float(t[i + 2]), int(t[i + 3])) for i in (5, 9))
    return Row(int(t[0]), int(t[1]), t[2], t[3], int(t[4]), halves)


def perturbed(row: Row, rng: random.Random) -> Row:
    """The row with each half's time a little off (lognormal, 2%) and its bandwidths to match, as
    the next cycle of the same run prints it."""
    halves = []
    for h in row.halves:
        t = h.time * rng.lognormvariate(0.0, 0.02)
        alg = row.size / t / 1e3  # GB/s, nccl-tests' algbw
        bus = alg * 1.75  # all_reduce's bus factor on 8 ranks, 2(n-1)/n (the printed ratio of small rows is off)
        halves.append(Half(t, alg, bus, h.wrong))
    return Row(row.size, row.count, row.dtype, row.redop, row.root, tuple(halves))


@dataclass(frozen=True)
class Log:
    path: Path
    records: int  # result rows it holds (two a line: out-of-place and in-place)
    lines: int  # row lines (text) or results (-J)


def sample_parts() -> tuple[list[str], list[Row], list[str]]:
    """The recorded log's header lines, rows and closing lines; every row re-printed from its
    parsed values must be the recorded line, so the generated log has the recorded shape."""
    lines = NCCL_TESTS_SAMPLE.read_text().splitlines()
    at = [i for i, line in enumerate(lines) if _ROW.match(line)]
    rows = [parse_sample_row(lines[i]) for i in at]
    for i, row in zip(at, rows):
        assert row.text() == lines[i].rstrip(), f"re-printed row differs from the recorded line {i + 1}"
    return lines[:at[0]], rows, lines[at[-1] + 1:]


def log_records(bench_rows: int) -> int:
    """Result rows of the generated logs: --bench-rows, at most what the importer takes."""
    from commbench.core.inputs import MAX_NCCL_TESTS_LOG_ROWS

    return min(bench_rows, 2 * MAX_NCCL_TESTS_LOG_ROWS)


def generated_rows(n_lines: int) -> list[Row]:
    _, rows, _ = sample_parts()
    rng = random.Random(19)
    return [perturbed(rows[i % len(rows)], rng) for i in range(n_lines)]


@pytest.fixture(scope="session")
def nccl_text_log(bench_rows, tmp_path_factory) -> Log:
    """The recorded all_reduce log (8 A100s), its 25 sizes printed again and again."""
    head, _, tail = sample_parts()
    records = log_records(bench_rows)
    rows = generated_rows(records // 2)
    path = tmp_path_factory.mktemp("nccl") / "all_reduce_perf.log"
    path.write_text("\n".join([*head, *(r.text() for r in rows), *tail]) + "\n")
    return Log(path, 2 * len(rows), len(rows))


def json_document(rows: list[Row]) -> str:
    """A -J document as nccl-tests' util.cu writes it (tests/data/nccl-tests/README.md: root as a
    padded string, booleans as strings), holding the recorded run's header facts."""
    results = [{"size": r.size, "count": r.count, "type": r.dtype, "redop": r.redop, "root": f"{r.root:6d}",
                **{name: {"time": round(h.time, 3), "alg_bw": round(h.algbw, 6), "bus_bw": round(h.busbw, 6),
                          "nwrong": float(h.wrong)}
                   for name, h in zip(("out_of_place", "in_place"), r.halves)},
                "actual_iterations": 20, "experiment_name": ""} for r in rows]
    devices = [{"rank": k, "group": 0, "pid": 584419, "hostname": "dkh", "device": k, "device_hex": "0000:14:00",
                "device_info": "NVIDIA A100-SXM4-80GB"} for k in range(8)]
    doc = {"version": 2, "start_time": "2025-06-01 12:00:00", "args": ["./build/all_reduce_perf", "-J", "r.json"],
           "env": ["NCCL_DEBUG=WARN"], "nccl_version": 21903,
           "config": {"nthreads": 1, "ngpus": 8, "minimum_bytes": 8, "maximum_bytes": 134217728, "step_factor": 2,
                      "warmup_iters": 1, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                      "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
                      "devices": devices},
           "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
           "average_bus_bandwidth": {"bandwidth": 34.9024, "okay": "unchecked"}, "errors": [],
           "end_time": "2025-06-01 12:00:09"}
    return json.dumps(doc, separators=(",", ":"))


@pytest.fixture(scope="session")
def nccl_json_log(bench_rows, tmp_path_factory) -> Log:
    """The same run as a -J document."""
    rows = generated_rows(log_records(bench_rows) // 2)
    path = tmp_path_factory.mktemp("nccl") / "all_reduce_perf.json"
    path.write_text(json_document(rows))
    return Log(path, 2 * len(rows), len(rows))
