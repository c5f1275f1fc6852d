"""Results files written by earlier commbench commits (tests/data/golden/, README there) are read
for ever: today's reader, compare, gate, plot and report take them, in process, without ranks.

The files are what those versions wrote; their own schema_version (1) is asserted, never today's
SCHEMA_VERSION, so that a reader of a later version must keep accepting them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from commbench.cli.app import cli
from commbench.core.results import SCHEMA, read_results

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
OLD, NEW = "e826e56", "8792b49"
COMMITS = (OLD, NEW)
WORKLOADS = ("sweep", "pairs", "zero", "buckets")
FILES = [(c, w) for c in COMMITS for w in WORKLOADS]

# The columns today's schema has that e826e56 did not write (8792b49 wrote every column of its day).
LACKS = {OLD: {"rank_cpus", "rank_host", "grad_accum", "status", "error", "confirm", "wire", "wire_per_payload",
               "wire_trouble", "settings", "rail", "nccl_algo", "nccl_proto"},
         NEW: set()}
COLUMNS = {OLD: 56, NEW: 69}

SWEEP_SIZES = {1024, 4096, 16384, 65536}
# What each run measured, as its command asked (README): rows, collectives, sizes.
EXPECTED = {
    "sweep": (24, {"all_reduce", "all_gather"}, SWEEP_SIZES),
    "pairs": (4, {"sendrecv"}, {1 << 20}),
    "zero": (6, {"zero_step"}, {64 << 20, 100663232}),
    "buckets": (4, {"all_reduce"}, {4 << 20}),
}
# The sweep's points: all_reduce in place only (gloo has no out-of-place all_reduce), all_gather both.
SWEEP_POINTS = {("all_reduce", s, True) for s in SWEEP_SIZES} | {("all_gather", s, p) for s in SWEEP_SIZES
                                                                 for p in (False, True)}


def golden(commit: str, workload: str) -> str:
    return str(GOLDEN / commit / f"{workload}.parquet")


def invoke(args: list[str]) -> tuple[int, str]:
    """A command of the `commbench` group in process: its own exit code (the int it returns, as
    app.main exits with it) and its stdout; an exception fails the test with its traceback."""
    result = CliRunner().invoke(cli, args, standalone_mode=False)
    if result.exception is not None:
        raise result.exception
    assert "Traceback" not in result.output
    return result.return_value, result.stdout


@pytest.fixture(scope="module")
def frames():
    return {(c, w): read_results([golden(c, w)]) for c, w in FILES}


@pytest.mark.parametrize("commit,workload", FILES)
def test_stored_schema_is_the_files_own(commit, workload):
    schema = pq.read_schema(golden(commit, workload))
    names = set(schema.names)
    assert len(schema.names) == COLUMNS[commit]
    assert names <= set(SCHEMA.names)  # columns are added, never renamed or dropped
    assert LACKS[commit] <= set(SCHEMA.names) - names
    table = pq.read_table(golden(commit, workload), columns=["schema_version"])
    assert set(table.column("schema_version").to_pylist()) == {1}  # the file's own, not SCHEMA_VERSION


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_two_versions_wrote_the_same_types(workload):
    old, new = pq.read_schema(golden(OLD, workload)), pq.read_schema(golden(NEW, workload))
    assert set(old.names) | LACKS[OLD] == set(new.names)
    for name in old.names:
        assert old.field(name).type == new.field(name).type, name


@pytest.mark.parametrize("commit,workload", FILES)
def test_read_results_reads_what_was_written(frames, commit, workload):
    df = frames[commit, workload]
    rows, collectives, sizes = EXPECTED[workload]
    assert len(df) == rows
    assert set(df["collective"]) == collectives
    assert set(df["size_bytes"]) == sizes
    assert set(df["workload"]) == {workload}
    assert set(df["repetition"]) == {0, 1}
    assert set(df["world_size"]) == {2} and set(df["backend"]) == {"gloo"} and set(df["launcher"]) == {"local"}
    assert df["run_id"].nunique() == 1
    assert all(b > 0 and math.isfinite(b) for b in df["busbw_GBps"])
    assert all(t > 0 and math.isfinite(t) for t in df["time_us"])
    assert (df["time_us_min"] <= df["time_us"]).all() and (df["time_us"] <= df["time_us_max"]).all()
    # algbw = S / t in GB/s, as stored by either version and read today
    for size, time_us, algbw in zip(df["size_bytes"], df["time_us"], df["algbw_GBps"]):
        assert algbw == pytest.approx(size / (time_us * 1e-6) / 1e9, rel=1e-9)
    stored = pq.read_table(golden(commit, workload), columns=["busbw_GBps"]).column("busbw_GBps").to_pylist()
    assert list(df["busbw_GBps"]) == stored


def test_read_results_per_workload_columns(frames):
    for commit in COMMITS:
        sweep = frames[commit, "sweep"]
        points = set(zip(sweep["collective"], sweep["size_bytes"], sweep["in_place"]))
        assert points == SWEEP_POINTS
        for coll, factor in (("all_reduce", 1.0), ("all_gather", 0.5)):  # 2(n-1)/n and (n-1)/n at n = 2
            rows = sweep[sweep["collective"] == coll]
            assert list(rows["busbw_GBps"]) == pytest.approx(list(rows["algbw_GBps"] * factor), rel=1e-12)
        assert set(sweep["wrong"]) == {0}

        pairs = frames[commit, "pairs"]
        assert set(zip(pairs["src_rank"], pairs["dst_rank"])) == {(0, 1), (1, 0)}
        assert set(pairs["src_host"]) == set(pairs["dst_host"]) == {"vm"}
        assert list(pairs["busbw_GBps"]) == pytest.approx(list(pairs["algbw_GBps"]))

        zero = frames[commit, "zero"]
        assert sorted(zero["zero_stage"]) == [1, 1, 2, 2, 3, 3]
        assert set(zero["bucket_bytes"]) == {10 ** 9}  # 5e8 bfloat16 elements
        assert dict(zip(zero["zero_stage"], zero["n_collectives"])) == {1: 2, 2: 2, 3: 9}

        buckets = frames[commit, "buckets"]
        assert dict(zip(buckets["bucket_bytes"], buckets["n_collectives"])) == {200_000: 21, 2_000_000: 3}
        assert set(buckets["overlap"]) == {1} and set(buckets["wrong"]) == {0}
    # What only the newer version wrote
    assert set(frames[NEW, "zero"]["grad_accum"]) == {1}
    assert dict(zip(frames[NEW, "zero"]["zero_stage"], frames[NEW, "zero"]["overlap"])) == {1: 1, 2: 1, 3: 3}
    stored = pq.read_table(golden(OLD, "zero"), columns=["overlap"]).column("overlap")
    assert stored.null_count == 6  # e826e56 left zero's overlap empty (a reader may fill it in)
    assert all(list(h) == [0, 0] for h in frames[NEW, "sweep"]["rank_host"])


def _median_busbw(df, coll, size, in_place) -> float:
    rows = df[(df["collective"] == coll) & (df["size_bytes"] == size) & (df["in_place"] == in_place)]
    assert len(rows) == 2
    return float(rows["busbw_GBps"].median())


def test_compare_old_sweep_against_new(frames):
    code, out = invoke(["compare", golden(OLD, "sweep"), golden(NEW, "sweep"), "--format", "json"])
    data = json.loads(out)
    assert code in (0, 1, 3) and code == data["exit_code"]
    assert data["verdict"] in {0: ("unchanged", "improvement"), 1: ("regression",), 3: ("inconclusive",)}[code]
    assert {p["verdict"] for p in data["points"]} == {"inconclusive"}
    assert data["only_before"] == [] and data["only_after"] == []
    paired = {(p["key"]["collective"], p["key"]["size_bytes"], p["key"]["in_place"]) for p in data["points"]}
    assert paired == SWEEP_POINTS
    for p in data["points"]:
        k = p["key"]
        assert k["workload"] == "sweep" and k["world_size"] == 2 and k["grad_accum"] is None
        assert p["n_before"] == p["n_after"] == 2
        assert p["before_busbw"] == pytest.approx(_median_busbw(frames[OLD, "sweep"], k["collective"],
                                                                k["size_bytes"], k["in_place"]), rel=1e-9)
        assert p["after_busbw"] == pytest.approx(_median_busbw(frames[NEW, "sweep"], k["collective"],
                                                               k["size_bytes"], k["in_place"]), rel=1e-9)
        assert p["ratio"] == pytest.approx(p["after_busbw"] / p["before_busbw"], rel=1e-9)
    # 2 repetitions a side decide nothing on their own: every point asks for more
    assert data["repetitions_needed"] == 5 and code == 3


def test_compare_through_pandas_agrees(frames):
    """compare --plot and --before-setting read both files with read_results and compare the frames
    (not the parquet engine): the same pairs, values and verdict."""
    from commbench.analysis.compare.compare import compare_frames

    by_pandas = compare_frames(frames[OLD, "sweep"], frames[NEW, "sweep"]).to_dict()
    _, out = invoke(["compare", golden(OLD, "sweep"), golden(NEW, "sweep"), "--format", "json"])
    by_engine = json.loads(out)
    assert by_pandas["exit_code"] == by_engine["exit_code"] == 3
    assert by_pandas["verdict"] == by_engine["verdict"]
    assert by_pandas["only_before"] == by_pandas["only_after"] == []
    pandas_points = {(p["key"]["collective"], p["key"]["size_bytes"], p["key"]["in_place"]): p
                     for p in by_pandas["points"]}
    assert set(pandas_points) == SWEEP_POINTS
    for p in by_engine["points"]:
        q = pandas_points[p["key"]["collective"], p["key"]["size_bytes"], p["key"]["in_place"]]
        assert q["before_busbw"] == pytest.approx(p["before_busbw"], rel=1e-9)
        assert q["after_busbw"] == pytest.approx(p["after_busbw"], rel=1e-9)
        assert q["verdict"] == p["verdict"]


@pytest.mark.parametrize("workload,keys", [
    ("buckets", {200_000, 2_000_000}),  # bucket_bytes
    ("pairs", {(0, 1), (1, 0)}),  # (src_rank, dst_rank)
])
def test_compare_other_workloads_across_versions(workload, keys):
    code, out = invoke(["compare", golden(OLD, workload), golden(NEW, workload), "--format", "json"])
    data = json.loads(out)
    assert code == data["exit_code"] and code in (0, 1, 3)
    assert data["only_before"] == [] and data["only_after"] == []
    got = {p["key"]["bucket_bytes"] if workload == "buckets" else (p["key"]["src_rank"], p["key"]["dst_rank"])
           for p in data["points"]}
    assert got == keys


def test_compare_zero_across_versions_pairs_the_stages():
    """An e826e56 zero file has no grad_accum (a step was one micro-batch): read as 1, as 8792b49 writes
    (core/columns.py, the column's `absent`), so its stages pair with the newer file's."""
    code, out = invoke(["compare", golden(OLD, "zero"), golden(NEW, "zero"), "--format", "json"])
    data = json.loads(out)
    assert code == data["exit_code"] and code in (0, 1, 3)
    assert {p["key"]["zero_stage"] for p in data["points"]} == {1, 2, 3}
    assert data["only_before"] == [] and data["only_after"] == []
    assert {p["key"]["grad_accum"] for p in data["points"]} == {1}


def test_an_old_zero_file_beside_a_new_one_reads_its_grad_accum_as_1(tmp_path):
    """One side of two files, the older without the column: each of its rows as its own file meant it."""
    from commbench.analysis.points import pointtable

    df = read_results([golden(OLD, "zero"), golden(NEW, "zero")])
    assert list(df["grad_accum"]) == [1] * len(df)
    source = pointtable.open_source([golden(OLD, "zero"), golden(NEW, "zero")])
    agg = pointtable.aggregate([golden(OLD, "zero"), golden(NEW, "zero")], "before", source)
    grad = [dict(zip(pointtable.KEY_COLUMNS, k))["grad_accum"] for k in agg.keys]
    assert grad == [1, 1, 1] and list(agg.counts) == [4, 4, 4]


@pytest.mark.parametrize("commit,workload", FILES)
def test_plot_and_report(frames, tmp_path, commit, workload):
    image = tmp_path / f"{workload}.png"
    code, out = invoke(["plot", golden(commit, workload), "--out", str(image)])
    assert code == 0 and f"plot written to {image}" in out
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size > 10_000
    page = tmp_path / f"{workload}.html"
    code, out = invoke(["report", golden(commit, workload), "--out", str(page)])
    assert code == 0 and f"report written to {page}" in out
    html = page.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") or "<html" in html[:200]
    assert frames[commit, workload]["run_id"].iloc[0] in html


def test_report_new_against_old_baseline(tmp_path):
    md = tmp_path / "report.md"
    code, _ = invoke(["report", golden(NEW, "sweep"), "--baseline", golden(OLD, "sweep"), "--out", str(md)])
    assert code == 0
    text = md.read_text(encoding="utf-8")
    assert "## Comparison with the baseline" in text and "**inconclusive**" in text
    assert "12 compared" in text


def _suggest(tmp_path, name: str, *files: str) -> tuple[dict, Path]:
    bands = tmp_path / name
    code, out = invoke(["gate", "--suggest", *files, "--min-size", "1K", "--allow-wide", "--out", str(bands)])
    assert code == 0 and f"bands written to {bands}" in out
    return yaml.safe_load(bands.read_text(encoding="utf-8")), bands


# The bandwidth-bound points of the sweeps (64 KiB; the smaller sizes are latency-bound)
BANDED = {("all_gather", False), ("all_gather", True), ("all_reduce", None)}


@pytest.mark.parametrize("older,newer", [(OLD, NEW), (NEW, OLD)])
def test_gate_bands_from_one_version_judge_the_other(frames, tmp_path, older, newer):
    doc, bands = _suggest(tmp_path, "bands.yaml", golden(older, "sweep"))
    assert doc["version"] == 1 and doc["system"] == "vm"
    entries = doc["entries"]
    assert {(e["collective"], e.get("in_place")) for e in entries} == BANDED
    for e in entries:
        assert e["size"] == "64K" and e["ranks"] == 2 and e["dtype"] == "float32"
        in_place = e.get("in_place", True)
        assert e["busbw_GBps"] == pytest.approx(_median_busbw(frames[older, "sweep"], e["collective"], 65536,
                                                              in_place), rel=1e-4)
    code, out = invoke(["gate", golden(newer, "sweep"), "--expect", str(bands), "--format", "json"])
    data = json.loads(out)
    assert code in (0, 1) and code == data["exit_code"]
    assert data["verdict"] == ("PASS" if code == 0 else "FAIL")
    assert len(data["entries"]) == 3
    for got in data["entries"]:
        e = got["entry"]
        in_place = True if e["in_place"] is None else e["in_place"]
        assert got["n_rows"] == 2 and got["wrong_rows"] == 0
        assert got["measured_GBps"] == pytest.approx(_median_busbw(frames[newer, "sweep"], e["collective"], 65536,
                                                                   in_place), rel=1e-9)
        assert got["verdict"] == ("PASS" if got["measured_GBps"] >= got["band"][0] else "FAIL")


def test_gate_suggest_from_both_versions(frames, tmp_path):
    doc, _ = _suggest(tmp_path, "both.yaml", golden(OLD, "sweep"), golden(NEW, "sweep"))
    entries = doc["entries"]
    assert {(e["collective"], e.get("in_place")) for e in entries} == BANDED
    for e in entries:
        assert "from 2 runs" in e["basis"]
        in_place = e.get("in_place", True)
        ends = sorted(_median_busbw(frames[c, "sweep"], e["collective"], 65536, in_place) for c in COMMITS)
        assert ends[0] <= e["busbw_GBps"] <= ends[1]
