"""commbench.integrations.nccl_tests: nccl-tests output in every shape met in the field -> commbench rows.

The samples in tests/data/nccl-tests are real outputs (see the README there); the shapes no sample
shows (mpirun --tag-output prefixes, -S timestamps, -I per-iteration columns, -J JSON with "nan" and
"true"/"false" strings, several headers, logs pasted without '#') are built here from the samples
and from the format strings of nccl-tests' src/util.cu.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from commbench.integrations.nccl_tests.format import (SINGLE_RANK_HINT, collective_from_filename,
                                                      collective_from_program, nccl_version_string)
from commbench.integrations.nccl_tests.importer import parse_file
from commbench.integrations.nccl_tests.json_doc import parse_json_document
from commbench.integrations.nccl_tests.records import Parsed, RecordBuilder, base_columns
from commbench.integrations.nccl_tests.run import user_json_path, build_argv
from commbench.integrations.nccl_tests.text import parse_text
from commbench.core.errors import BadInput
from commbench.core.results import SCHEMA_VERSION, rows_table

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
SAMPLES = sorted(p.name for p in DATA.glob("*.txt"))
NO_ROWS = "all_reduce_legacy_non_mpi_build_duplicated_headers_partial.txt"


def frame(parsed: Parsed) -> pd.DataFrame:
    """Through the real schema, as the writer stores them."""
    return rows_table(parsed.records).to_pandas()


def load(name: str, **kw) -> tuple[Parsed, pd.DataFrame]:
    parsed = parse_file(DATA / name, "20250101-000000-abcdef", **kw)
    return parsed, frame(parsed)


def text_parsed(text: str, name: str = "all_reduce_perf.log", collective: str | None = None) -> Parsed:
    builder = RecordBuilder(base_columns("20250101-000000-abcdef", "", pd.Timestamp.now(tz="UTC"), {}, {}),
                            collective, collective_from_filename(name), name)
    return parse_text(text, name, builder)


def hosts(df: pd.DataFrame) -> list[list[str]]:
    return [list(h) for h in dict.fromkeys(tuple(h) for h in df.hosts)]


def row(df: pd.DataFrame, size: int, in_place: bool, rep: int = 0) -> pd.Series:
    sel = df[(df.size_bytes == size) & (df.in_place == in_place) & (df.repetition == rep)]
    assert len(sel) == 1, (size, in_place, rep, len(sel))
    return sel.iloc[0]


def printed(value: float | None, text: str) -> bool:
    """A stored value equals the printed one: exactly, or (printed 0.00) to the printed precision."""
    want = float(text)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if want == 0.0 and "." in text:
        decimals = len(text.split(".")[1])
        return round(value, decimals) == 0.0 and value >= 0
    return value == want


def check_half(r: pd.Series, count: str, time: str, alg: str, bus: str, wrong: str) -> None:
    assert r["count"] == int(count)
    assert r["time_us"] == float(time) and list(r["samples_us"]) == [float(time)]
    assert printed(r["algbw_GBps"], alg), (r["algbw_GBps"], alg)
    assert printed(r["busbw_GBps"], bus), (r["busbw_GBps"], bus)
    if wrong == "N/A":
        assert pd.isna(r["wrong"])
    else:
        assert r["wrong"] == int(wrong)


# ---- every sample, every row --------------------------------------------------------------------


def sample_rows(name: str) -> list[list[str]]:
    """The printed data rows of a sample (these samples have no prefixes, -S or -I columns)."""
    rows = []
    for line in (DATA / name).read_text().splitlines():
        if re.match(r"^\s*[0-9]+\s+[0-9]+\s+[a-z]", line):
            rows.append(line.split())
    return rows


@pytest.mark.parametrize("name", [n for n in SAMPLES if n != NO_ROWS])
def test_every_printed_row_of_every_sample_is_stored_as_printed(name):
    parsed, df = load(name)
    rows = sample_rows(name)
    seen: dict[tuple, int] = {}
    kept = 0
    for tokens in rows:
        size = int(tokens[0])
        out, inp = tokens[-8:-4], tokens[-4:]
        for in_place, (t, alg, bus, check) in ((False, out), (True, inp)):
            rep = seen.get((size, in_place), 0)
            seen[(size, in_place)] = rep + 1
            if size == 0:
                continue
            r = row(df, size, in_place, rep)
            check_half(r, tokens[1], t, alg, bus, "N/A" if "." in check or "e" in check else check)
            kept += 1
    assert kept == len(df)
    assert set(df.workload) == {"nccl-tests"} and set(df.backend) == {"nccl"} and set(df.device) == {"cuda"}
    assert set(df.launcher) == {"nccl-tests"} and set(df.schema_version) == {SCHEMA_VERSION}
    assert set(df.dtype) == {"float32"}


def test_current_format_8xA100():
    parsed, df = load("all_reduce_v2.19.4_1node_8xA100.txt")
    assert len(df) == 50 and set(df.collective) == {"all_reduce"}
    check_half(row(df, 134217728, False), "33554432", "1295.41", "103.61", "181.32", "0")
    check_half(row(df, 134217728, True), "33554432", "1284.21", "104.51", "182.90", "0")
    check_half(row(df, 1048576, False), "262144", "67.31", "15.58", "27.26", "0")
    check_half(row(df, 1048576, True), "262144", "65.27", "16.07", "28.11", "0")
    check_half(row(df, 8, False), "2", "34.84", "0.00", "0.00", "0")
    r = row(df, 8, False)
    # printed 0.00: recomputed with nccl-tests' definitions, S/t and x 2(n-1)/n
    assert r["algbw_GBps"] == pytest.approx(8 / 34.84e-6 / 1e9) and r["busbw_GBps"] == pytest.approx(
        r["algbw_GBps"] * 2 * 7 / 8)
    assert set(df.world_size) == {8} and set(df.nnodes) == {1} and set(df.ranks_per_node) == {8}
    assert hosts(df) == [["dkh"]]
    assert set(df.device_name) == {"NVIDIA A100-SXM4-80GB"}
    assert set(df.nccl_version) == {"2.19.3"} and set(df.op) == {"sum"} and set(df.root) == {-1}
    assert set(df.iters) == {20} and set(df.warmup) == {1} and set(df.repetition) == {0}
    assert parsed.warnings == [] and not parsed.failed
    plan = json.loads(df.plan.iloc[0])
    assert plan["program"] == "all_reduce_perf" and plan["nccl_tests_version"] == "2.19.4"


def test_two_hosts_over_roce():
    _, df = load("all_gather_v2.19.6_2node_roce.txt")
    check_half(row(df, 17179869184, False), "2147483648", "361820", "47.48", "23.74", "0")
    check_half(row(df, 17179869184, True), "2147483648", "354934", "48.40", "24.20", "0")
    check_half(row(df, 536870912, True), "67108864", "13778.0", "38.97", "19.48", "0")
    assert hosts(df) == [["spark-101", "spark-102"]]
    assert set(df.world_size) == {2} and set(df.nnodes) == {2} and set(df.ranks_per_node) == {1}
    assert df.op.isna().all() and set(df.nccl_version) == {"2.28.9"} and set(df.device_name) == {"NVIDIA GB10"}


def test_stderr_noise_before_the_header():
    _, df = load("all_gather_v2.18.0_2ranks_stderr_noise.txt")
    assert len(df) == 16
    check_half(row(df, 67108864, False), "8388608", "23431.8", "2.86", "1.43", "0")
    check_half(row(df, 67108864, True), "8388608", "23288.1", "2.88", "1.44", "0")
    assert set(df.world_size) == {2} and hosts(df) == [["lab"]]
    assert set(df.iters) == {50} and set(df.warmup) == {10} and set(df.nccl_version) == {"2.29.7"}
    assert json.loads(df.plan.iloc[0])["program"] == "all_gather_perf_mpi"


def test_legacy_error_column_with_na_and_an_info_line():
    parsed, df = load("all_reduce_legacy_8xA100_nocheck.txt")
    assert len(df) == 64 and parsed.skipped == {"of size 0": 4}
    check_half(row(df, 4294967296, False), "1073741824", "32070", "133.92", "234.37", "N/A")
    check_half(row(df, 4294967296, True), "1073741824", "32052", "134.00", "234.50", "N/A")
    check_half(row(df, 128, True), "32", "43.78", "0.00", "0.01", "N/A")
    assert df.wrong.isna().all() and df.check_error.isna().all()
    assert set(df.world_size) == {8} and set(df.op) == {"sum"} and df.nccl_version.isna().all()


def test_legacy_all_gather_size_zero_rows_are_dropped():
    parsed, df = load("all_gather_legacy_8xA100_nocheck.txt")
    assert parsed.skipped == {"of size 0": 10} and (df.size_bytes > 0).all()
    check_half(row(df, 8589934592, False), "268435456", "33646", "255.31", "223.39", "N/A")
    check_half(row(df, 4194304, False), "131072", "100.7", "41.64", "36.43", "N/A")
    check_half(row(df, 4194304, True), "131072", "99.56", "42.13", "36.86", "N/A")
    assert df.op.isna().all() and set(df.root) == {-1}


def test_sixteen_ranks_on_two_hosts():
    _, df = load("all_reduce_2node_16xH100.txt")
    assert len(df) == 62
    assert set(df.world_size) == {16} and set(df.nnodes) == {2} and set(df.ranks_per_node) == {8}
    assert hosts(df) == [["ztan-mig-235z", "ztan-mig-gq73"]]
    assert set(df.device_name) == {"NVIDIA H100 80GB HBM3"}
    check_half(row(df, 8589934592, False), "2147483648", "47535", "180.71", "338.82", "0")
    check_half(row(df, 8589934592, True), "2147483648", "47743", "179.92", "337.35", "0")
    check_half(row(df, 1024, True), "256", "123.1", "0.01", "0.02", "0")
    assert set(df.collective) == {"all_reduce"}  # from the file name: this log has no banner


def test_failed_check_pasted_without_hash():
    parsed, df = load("all_gather_legacy_8xV100_failed_check_pasted.txt")
    assert len(df) == 2 and parsed.failed
    r = row(df, 4294967296, False)
    assert r["count"] == 134217728 and r["time_us"] == 29122 and r["algbw_GBps"] == 129.05
    assert r["busbw_GBps"] == 129.05 and r["check_error"] == 1.0 and pd.isna(r["wrong"])
    assert row(df, 4294967296, True)["time_us"] == 29169
    assert df.world_size.isna().all()  # no Rank lines, and busbw/algbw = 1 does not pin n down
    assert any("data check failed" in w for w in parsed.warnings)


def test_non_mpi_build_with_duplicated_headers_and_no_rows_is_bad_input_with_the_diagnosis():
    with pytest.raises(BadInput) as exc:
        load(NO_ROWS)
    msg = str(exc.value)
    assert f"{NO_ROWS} line 14:" in msg and "no nccl-tests result rows" in msg
    assert SINGLE_RANK_HINT in msg and "\n" not in msg


def test_single_rank_busbw_zero_symptom():
    parsed, df = load("all_reduce_single_rank_busbw0_partial.txt")
    assert parsed.warnings == [SINGLE_RANK_HINT]
    assert set(df.world_size) == {1} and (df.busbw_GBps == 0).all()
    # two processes printed the same sizes: repetitions 0 and 1, in the order printed
    check_half(row(df, 134217728, False, 0), "33554432", "631.9", "212.41", "0.00", "0")
    check_half(row(df, 134217728, False, 1), "33554432", "419.3", "320.07", "0.00", "0")
    check_half(row(df, 134217728, True, 0), "33554432", "0.51", "263017.30", "0.00", "0")
    check_half(row(df, 536870912, False, 1), "134217728", "842.5", "637.23", "0.00", "0")
    check_half(row(df, 268435456, True), "67108864", "0.31", "857621.27", "0.00", "0")


# ---- synthetic shapes ---------------------------------------------------------------------------

CURRENT = (DATA / "all_reduce_v2.19.4_1node_8xA100.txt").read_text()


def same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = ["collective", "dtype", "op", "root", "size_bytes", "count", "in_place", "world_size", "nnodes",
            "ranks_per_node", "time_us", "algbw_GBps", "busbw_GBps", "wrong", "repetition", "iters", "warmup"]
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


def test_mpirun_tag_output_prefixes_and_other_ranks_noise():
    lines = []
    for i, line in enumerate(CURRENT.splitlines()):
        lines.append(f"[1,0]<stdout>:{line}")
        if i % 7 == 3:
            lines.append(f"[1,{1 + i % 3}]<stderr>:dkh:584420:584420 [1] NCCL INFO cudaDriverVersion 12020")
            lines.append(f"[1,{1 + i % 3}]<stdout>:some library said hello")
    parsed = text_parsed("\n".join(lines) + "\n")
    same_rows(frame(parsed), frame(text_parsed(CURRENT)))
    assert parsed.warnings == []


def test_srun_label_prefixes():
    labelled = "".join(f"0: {line}\n" for line in CURRENT.splitlines())
    same_rows(frame(text_parsed(labelled)), frame(text_parsed(CURRENT)))


def test_mpich_prepend_rank_prefixes():
    """mpiexec -prepend-rank (MPICH, Hydra) puts "[N] " before each line (NVIDIA/nccl#1453's log,
    tests/data/nccl_debug/)."""
    labelled = "".join(f"[0] {line}\n" for line in CURRENT.splitlines())
    parsed = text_parsed(labelled)
    same_rows(frame(parsed), frame(text_parsed(CURRENT)))
    assert {(r["nccl_algo"], r["nccl_proto"]) for r in parsed.records} == {(None, None)}


def test_tagged_processes_each_printing_their_own_header_is_the_single_rank_symptom():
    head = ("# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
            "#  Rank  0 Group  0 Pid {pid} on {host} device  0 [0000:04:00] NVIDIA H100 80GB HBM3\n#\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
            "algbw   busbw #wrong\n")
    rows = ["     1048576        262144     float     sum      -1    10.00  104.86    0.00      0     0.30  "
            "3495.25    0.00      0", "     2097152        524288     float     sum      -1    19.00  110.38    "
            "0.00      0     0.30  6990.51    0.00      0"]
    text = ""
    for r, host in ((0, "node1"), (1, "node2")):
        text += "".join(f"[1,{r}]<stdout>:{line}\n" for line in head.format(pid=100 + r, host=host).splitlines())
    for line in rows:
        text += f"[1,1]<stdout>:{line}\n[1,0]<stdout>:{line}\n"
    parsed = text_parsed(text)
    df = frame(parsed)
    assert parsed.warnings == [SINGLE_RANK_HINT]
    assert set(df.world_size) == {1} and len(df) == 8 and set(df.repetition) == {0, 1}


def test_s_timestamp_column():
    header = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
              "algbw   busbw  #wrong            timestamp\n"
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  "
              "(GB/s)  (GB/s)          %Y-%m-%d %H:%M:%S\n")
    rows = ("     1048576        262144     float     sum      -1    67.31   15.58   27.26       0    65.27   "
            "16.07   28.11       0    2025-03-04 10:11:12\n"
            "     2097152        524288     float     sum      -1    81.12   25.85   45.24       0    80.97   "
            "25.90   45.32       0    2025-03-04 10:11:13\n")
    text = CURRENT.split("#       size")[0] + header + rows
    parsed = text_parsed(text)
    df = frame(parsed)
    assert len(df) == 4
    check_half(row(df, 2097152, True), "524288", "80.97", "25.90", "45.32", "0")
    check_half(row(df, 1048576, False), "262144", "67.31", "15.58", "27.26", "0")


def test_s_timestamp_sets_started_at_on_import(tmp_path):
    f = tmp_path / "all_reduce_perf.log"
    f.write_text("     1048576        262144     float     sum      -1    67.31   15.58   27.26       0    65.27   "
                 "16.07   28.11       0    2025-03-04 10:11:12\n")
    df = frame(parse_file(f, "20250101-000000-abcdef"))
    local = dt.datetime(2025, 3, 4, 10, 11, 12).astimezone(dt.timezone.utc)  # nccl-tests prints local time
    assert df.started_at.iloc[0] == pd.Timestamp(local)


PER_ITER_HEADER = (
    "#                                              out-of-place (+ per-iteration)                                "
    "in-place (+ per-iteration)\n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    "
    "i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% \n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     "
    "(us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) \n")


def test_i_per_iteration_columns():
    rows = ("     1048576        262144     float     sum      -1    67.31   15.58   27.26       0    61.02    "
            "80.44    79.90     5.21    65.27   16.07   28.11       0    60.11    77.03    76.50     4.80\n"
            "   134217728      33554432     float     sum      -1  1295.41  103.61  181.32       0  1280.00  "
            "1320.50  1319.00     0.55  1284.21  104.51  182.90       0  1270.10  1302.30  1301.90     0.61\n")
    text = CURRENT.split("#       size")[0].rstrip("#\n") + "\n# Per-Iteration Report: CUDA event timing; i_* uses " \
        "max over process rows \n#\n" + PER_ITER_HEADER + rows
    df = frame(text_parsed(text))
    assert len(df) == 4
    r = row(df, 134217728, True)
    check_half(r, "33554432", "1284.21", "104.51", "182.90", "0")
    assert (r["time_us_min"], r["time_us_max"], r["time_us_p99"]) == (1270.10, 1302.30, 1301.90)
    r = row(df, 1048576, False)
    assert (r["time_us_min"], r["time_us_max"], r["time_us_p99"]) == (61.02, 80.44, 79.90)


def test_i_columns_with_timestamp():
    rows = ("     1048576        262144     float     sum      -1    67.31   15.58   27.26       0    61.02    "
            "80.44    79.90     5.21    65.27   16.07   28.11       0    60.11    77.03    76.50     4.80  "
            "2025-03-04 10:11:12\n")
    header = PER_ITER_HEADER.replace("i_cv% \n", "i_cv%            timestamp\n", 1)
    df = frame(text_parsed(header + rows))
    assert len(df) == 2 and row(df, 1048576, True)["time_us_p99"] == 76.50


def test_pasted_without_hash_reads_like_the_original():
    pasted = "\n".join(line.lstrip("#") for line in CURRENT.splitlines()) + "\n"
    a, b = text_parsed(pasted), text_parsed(CURRENT)
    same_rows(frame(a), frame(b))
    assert set(frame(a).hosts.iloc[0]) == {"dkh"} and set(frame(a).nccl_version) == {"2.19.3"}


def test_windows_line_endings_and_colour_codes():
    text = CURRENT.replace("\n", "\r\n").replace("# Using devices", "\x1b[1m# Using devices\x1b[0m")
    same_rows(frame(text_parsed(text)), frame(text_parsed(CURRENT)))


def test_nccl_info_lines_interleaved_give_transport_and_version():
    body = CURRENT.replace("# nccl-tests version 2.19.4 nccl-headers=21903 nccl-library=21903\n", "")
    lines = body.splitlines()
    info = ["dkh:584419:584419 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            "NCCL version 2.18.3+cuda12.2",
            "dkh:584419:584480 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
            "dkh:584419:584480 [0] NCCL INFO Channel 01/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA"]
    at = next(i for i, line in enumerate(lines) if line.startswith("        1024"))
    lines[at:at] = info
    parsed = text_parsed("\n".join(lines) + "\n")
    df = frame(parsed)
    assert len(df) == 50 and set(df.transport) == {"NET/IB,P2P/IPC"} and set(df.nccl_version) == {"2.18.3"}


def test_rows_from_two_interleaved_processes_after_duplicated_headers():
    dup = (DATA / NO_ROWS).read_text()
    rows = ("  1310720000     327680000     float     sum    2861.4  458.07    0.00  0e+00    0.49  2.7e+06    0.00"
            "  0e+00\n")
    parsed = text_parsed(dup + rows + rows.replace("2861.4  458.07", "2799.0  468.28"))  # algbw = size / time
    df = frame(parsed)
    assert parsed.warnings == [SINGLE_RANK_HINT]
    assert set(df.world_size) == {1} and list(df.repetition) == [0, 0, 1, 1]
    assert list(df.time_us) == [2861.4, 0.49, 2799.0, 0.49] and set(df.check_error) == {0.0}
    assert df.algbw_GBps.iloc[1] == 2.7e6


def test_two_tests_in_one_log():
    ag = (DATA / "all_gather_v2.19.6_2node_roce.txt").read_text()
    df = frame(text_parsed(CURRENT + ag, name="cluster.log"))
    assert set(df.collective) == {"all_reduce", "all_gather"}
    assert set(df[df.collective == "all_gather"].world_size) == {2}
    assert set(df[df.collective == "all_reduce"].world_size) == {8}


def test_oldest_header_spelling_and_a_broadcast_root_column():
    text = ("#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw"
            "      res\n"
            "     1048576        262144   float     sum    67.31  15.58  27.26    0e+00    65.27  16.07  28.11"
            "    0e+00\n")
    df = frame(text_parsed(text))
    assert len(df) == 2 and set(df.check_error) == {0.0} and df.wrong.isna().all()
    bcast = ("#       size         count      type    root     time   algbw   busbw  #wrong     time   algbw   busbw "
             " #wrong\n     1048576        262144     float       3    67.31   15.58   15.58       0    65.27   "
             "16.07   16.07       0\n")
    df = frame(text_parsed(bcast, name="broadcast_perf.log"))
    assert set(df.collective) == {"broadcast"} and set(df.root) == {3} and df.op.isna().all()


def test_collective_override_and_none_found():
    headerless = "     1048576        262144     float     sum      -1    67.31   15.58   27.26       0    65.27   " \
                 "16.07   28.11       0\n"
    with pytest.raises(BadInput, match=r"x\.log line 1: cannot tell which collective.*--collective"):
        text_parsed(headerless, name="x.log")
    df = frame(text_parsed(headerless, name="x.log", collective="allreduce"))
    assert set(df.collective) == {"all_reduce"}


def test_file_and_program_names():
    assert collective_from_program("./build/all_gather_perf_mpi") == "all_gather"
    assert collective_from_program("alltoall_perf") == "all_to_all"
    assert collective_from_program("sendrecv_perf") == "sendrecv"
    assert collective_from_program("reduce_scatter_perf") == "reduce_scatter"
    assert collective_from_program("scatter_perf") == "scatter"
    assert collective_from_filename("node3_reduce_scatter_perf.out") == "reduce_scatter"
    assert collective_from_filename("run.log") is None
    assert nccl_version_string(21903) == "2.19.3" and nccl_version_string("2708") == "2.7.8"
    assert nccl_version_string(22703) == "2.27.3"


# ---- -J JSON ------------------------------------------------------------------------------------


def json_doc(**over) -> str:
    """As nccl-tests' util.cu writes it: compact, booleans as strings, NaN as "nan", root padded."""
    doc = {
        "version": 2, "start_time": "2025-06-01 12:00:00",
        "args": ["./build/all_reduce_perf", "-b", "8", "-e", "16M", "-f", "2048", "-I", "1", "-J", "r.json"],
        "env": ["NCCL_DEBUG=WARN", "HOME=/root", "NCCL_IB_HCA=mlx5_0", "MY_SECRET_TOKEN=abc"],
        "nccl_version": 22703,
        "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 8, "maximum_bytes": 16777216, "step_factor": 2048,
                   "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                   "blocking_collectives": "false", "per_iter_timing": "true", "parallel_init": "false",
                   "devices": [{"rank": 0, "group": 0, "pid": 11, "hostname": "gpu1", "device": 0,
                                "device_hex": "0000:04:00", "device_info": "NVIDIA H100 80GB HBM3"},
                               {"rank": 1, "group": 0, "pid": 12, "hostname": "gpu2", "device": 0,
                                "device_hex": "0000:04:00", "device_info": "NVIDIA H100 80GB HBM3"}]},
        "results": [
            {"size": 0, "count": 0, "type": "float", "redop": "sum", "root": "    -1",
             "out_of_place": {"time": 30.0, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0.0},
             "in_place": {"time": 30.0, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0.0},
             "actual_iterations": 20, "experiment_name": ""},
            {"size": 8, "count": 2, "type": "float", "redop": "sum", "root": "    -1",
             "out_of_place": {"time": 35.12, "alg_bw": 0.000228, "bus_bw": 0.000228, "nwrong": 0.0},
             "out_of_place_per_iter": {"min_us": 33.0, "max_us": 40.5, "avg_us": 35.1, "p50_us": 35.0,
                                       "p95_us": 39.0, "p99_us": 40.0, "stdev_us": 1.5, "cv_pct": "nan",
                                       "times_us": [35.0, 33.0, 40.5]},
             "in_place": {"time": 36.0, "alg_bw": "nan", "bus_bw": "nan", "nwrong": None},
             "actual_iterations": 20, "experiment_name": ""},
            {"size": 16777216, "count": 4194304, "type": "float", "redop": "sum", "root": "    -1",
             "out_of_place": {"time": 180.25, "alg_bw": 93.078, "bus_bw": 93.078, "nwrong": 2.0},
             "in_place": {"time": "nan", "alg_bw": "nan", "bus_bw": "nan", "nwrong": None},
             "actual_iterations": 20, "experiment_name": ""}],
        "out_of_bounds": {"count": 1, "okay": "false"},
        "average_bus_bandwidth": {"bandwidth": 46.5, "okay": "unchecked"},
        "errors": [], "end_time": "2025-06-01 12:00:09",
    }
    doc.update(over)
    return json.dumps(doc, separators=(",", ":"))


def test_json_document(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json_doc())
    parsed = parse_file(f, "20250101-000000-abcdef", label="j")
    df = frame(parsed)
    assert parsed.fmt == "json" and parsed.failed and parsed.skipped == {"of size 0": 2, "without a time": 1}
    assert len(df) == 3 and set(df.collective) == {"all_reduce"} and set(df.root) == {-1}
    r = row(df, 8, False)
    assert r["time_us"] == 35.12 and r["algbw_GBps"] == 0.000228 and r["wrong"] == 0 and r["iters"] == 20
    assert list(r["samples_us"]) == [35.0, 33.0, 40.5]
    assert (r["time_us_min"], r["time_us_max"], r["time_us_p99"]) == (33.0, 40.5, 40.0)
    r = row(df, 8, True)  # "nan" bandwidths: S/t, and nwrong null (-c 0 or not checked)
    assert r["algbw_GBps"] == pytest.approx(8 / 36e-6 / 1e9) and pd.isna(r["wrong"])
    assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 1 / 2)
    assert row(df, 16777216, False)["wrong"] == 2
    assert set(df.world_size) == {2} and set(df.nnodes) == {2} and set(df.nccl_version) == {"2.27.3"}
    assert set(df.label) == {"j"} and set(df.warmup) == {5}
    env = json.loads(df.env.iloc[0])
    assert env == {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_0"}  # allow-listed, no secrets
    assert df.started_at.iloc[0].year == 2025
    assert any("data check failed" in w for w in parsed.warnings)


def test_json_cut_short_names_the_line(tmp_path):
    text = json_doc().replace(",", ",\n")
    f = tmp_path / "cut.json"
    f.write_text(text[: len(text) // 2])
    with pytest.raises(BadInput, match=r"cut\.json line [0-9]+: not valid JSON"):
        parse_file(f, "20250101-000000-abcdef")


@pytest.mark.parametrize("change, match", [
    ({"results": "none"}, "without a 'results' list"),
    ({"results": [{"size": "big"}]}, r"results\[0\]\.size"),
    ({"results": [{"size": 8, "count": 2, "type": "float", "root": "x"}]}, r"results\[0\]\.root"),
    ({"results": [{"size": 8, "count": 2, "type": "float", "redop": "sum", "root": "-1",
                   "out_of_place": {"time": "fast"}}]}, r"out_of_place\.time"),
    ({"results": []}, "holds no result rows"),
])
def test_bad_json(tmp_path, change, match):
    f = tmp_path / "all_reduce.json"
    f.write_text(json_doc(**change))
    with pytest.raises(BadInput, match=match):
        parse_file(f, "20250101-000000-abcdef")


# ---- bad input ----------------------------------------------------------------------------------


def test_binary_junk_names_the_line(tmp_path):
    f = tmp_path / "all_reduce.log"
    f.write_bytes(CURRENT.encode()[:200] + b"\n\x00\x01\x02\xff" * 50)
    with pytest.raises(BadInput, match=r"all_reduce\.log line 4: binary data"):
        parse_file(f, "20250101-000000-abcdef")
    f.write_bytes(bytes(range(128, 256)) * 40)
    with pytest.raises(BadInput, match=r"line 1: binary data"):
        parse_file(f, "20250101-000000-abcdef")


def test_truncated_last_row_names_the_line(tmp_path):
    f = tmp_path / "all_reduce.log"
    lines = CURRENT.splitlines()
    cut = "\n".join(lines[:24]) + "\n" + lines[24][:60]
    f.write_text(cut)
    with pytest.raises(BadInput, match=r"all_reduce\.log line 25: .*truncated"):
        parse_file(f, "20250101-000000-abcdef")


def test_row_that_does_not_match_its_header(tmp_path):
    lines = CURRENT.splitlines()
    lines[20] = lines[20] + "   0.5   1.5"
    with pytest.raises(BadInput, match=r"line 21: a result row with 15 fields does not match the column header "
                                       r"at line 16 \(13 fields\)"):
        text_parsed("\n".join(lines) + "\n")


def test_unknown_header(tmp_path):
    text = CURRENT.replace("#wrong     time", "#wrong   i_foo     time", 1)
    with pytest.raises(BadInput, match=r"line 16: an nccl-tests column header commbench does not know"):
        text_parsed(text)


@pytest.mark.parametrize("content", ["", "\n\n", "hello world\n", "# nThread 1 nGpus 1\n#\n"])
def test_no_rows(tmp_path, content):
    f = tmp_path / "all_reduce.log"
    f.write_text(content)
    with pytest.raises(BadInput, match=r"no nccl-tests result rows"):
        parse_file(f, "20250101-000000-abcdef")


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        parse_file(tmp_path / "nope.log", "x")
    with pytest.raises(BadInput, match="is a folder"):
        parse_file(tmp_path, "x")


# ---- the import command -------------------------------------------------------------------------


def cli(*args: str, capsys) -> tuple[int, str, str]:
    from commbench.cli.app import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_import_command_writes_one_file_per_log_and_never_overwrites(tmp_path, capsys):
    a, b = DATA / "all_reduce_v2.19.4_1node_8xA100.txt", DATA / "all_gather_v2.19.6_2node_roce.txt"
    code, out, err = cli("nccl-tests", "import", str(a), str(b), "--out", str(tmp_path / "r"), "--label", "x",
                         capsys=capsys)
    assert code == 0 and err == ""
    files = sorted((tmp_path / "r").glob("*.parquet"))
    assert len(files) == 2 and out.count("imported ") == 2
    total = sum(pq.read_table(f).num_rows for f in files)
    assert total == 50 + 12
    code, out, err = cli("nccl-tests", "import", str(a), "--out", str(tmp_path / "one.parquet"), capsys=capsys)
    assert code == 0
    code, out, err = cli("nccl-tests", "import", str(a), "--out", str(tmp_path / "one.parquet"), capsys=capsys)
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1


def test_import_command_bad_file_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "all_reduce.log"
    bad.write_bytes(b"\x00\x00junk")
    code, out, err = cli("nccl-tests", "import", str(DATA / "all_reduce_v2.19.4_1node_8xA100.txt"), str(bad),
                         "--out", str(tmp_path / "r"), capsys=capsys)
    assert code == 2 and err.startswith("commbench: ") and "all_reduce.log line 1: binary data" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_import_command_failed_check_exits_1_and_symptom_warns(tmp_path, capsys):
    code, out, err = cli("nccl-tests", "import", str(DATA / "all_gather_legacy_8xV100_failed_check_pasted.txt"),
                         "--out", str(tmp_path / "f.parquet"), capsys=capsys)
    assert code == 1 and "data check failed" in err and (tmp_path / "f.parquet").exists()
    code, out, err = cli("nccl-tests", "import", str(DATA / "all_reduce_single_rank_busbw0_partial.txt"),
                         "--out", str(tmp_path / "s.parquet"), capsys=capsys)
    assert code == 0
    assert [line for line in err.splitlines() if "warning" in line] == [
        f"commbench: warning: {DATA / 'all_reduce_single_rank_busbw0_partial.txt'}: {SINGLE_RANK_HINT}"]


# ---- anything at all: a result or BadInput ------------------------------------------------------

SAMPLE_LINES = [line for name in SAMPLES for line in (DATA / name).read_text().splitlines()] + \
    PER_ITER_HEADER.splitlines() + ["[1,0]<stdout>:", "0: ", "NCCL INFO via NET/IB/0", "{", "  -1  ", "N/A"]


def _tokens_mutated(line: str, data) -> str:
    toks = line.split(" ")
    if toks and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(toks) - 1))
        toks[i] = data.draw(st.sampled_from(["", "N/A", "nan", "-1", "1e+400", "99999999999999999999", "0", "x",
                                             "#wrong", "1.5", "-0", "\u0663", "1_000", "inf", "0.00"]))
    return " ".join(toks)


def _parse_any(text: str) -> None:
    for parse in (text_parsed, json_parsed):
        try:
            parsed = parse(text)
        except BadInput as exc:
            assert "\n" not in str(exc)
            continue
        rows_table(parsed.records)  # whatever was accepted fits the schema


def json_parsed(text: str) -> Parsed:
    builder = RecordBuilder(base_columns("20250101-000000-abcdef", "", pd.Timestamp.now(tz="UTC"), {}, {}),
                            None, "all_reduce", "r.json")
    return parse_json_document(text, "r.json", builder)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
                           | st.sampled_from(["nan", "true", "false", "    -1", "float", "sum"]),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["size", "count", "type", "redop", "root", "out_of_place", "in_place",
                                                "time", "alg_bw", "bus_bw", "nwrong", "results", "config",
                                                "devices", "rank", "hostname", "nccl_version", "times_us",
                                                "out_of_place_per_iter", "actual_iterations", "args"]),
                               inner, max_size=6), max_leaves=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
@pytest.mark.failure(row="nccl-tests-parser-arbitrary-text")
def test_arbitrary_json_gives_rows_or_bad_input(value):
    doc = json.loads(json_doc())
    doc["results"] = value if isinstance(value, list) else [value]
    _parse_any(json.dumps(doc))
    _parse_any(json.dumps(value))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
@example("0 0 float\n")
@example("1 1 float sum -1 1 1 1 0 1 1 1 0\n")
@example("99999999999999999999 1 float sum -1 1 1 1 0 1 1 1 0\n")
@example("8 2 float sum -1 0 0 0 0 0 0 0 0\n")
@example("{\"results\": [1]}")
@pytest.mark.failure(
    row="nccl-tests-parser-arbitrary-text",
    section="Fuzzing (Hypothesis): a value or `BadInput`, never another exception",
    failure="nccl-tests parser: arbitrary text, JSON and bytes; real logs cut at any byte or with bytes changed",
)
def test_arbitrary_text_gives_rows_or_bad_input(text):
    _parse_any(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_sample_lines_give_rows_or_bad_input(data):
    lines = data.draw(st.lists(st.sampled_from(SAMPLE_LINES), min_size=1, max_size=25))
    _parse_any("\n".join(_tokens_mutated(line, data) for line in lines) + data.draw(st.sampled_from(["", "\n"])))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
@pytest.mark.failure(row="nccl-tests-parser-arbitrary-text")
def test_arbitrary_bytes_give_rows_or_bad_input(tmp_path_factory, blob):
    f = tmp_path_factory.mktemp("b") / "all_reduce.log"
    f.write_bytes(blob)
    try:
        parsed = parse_file(f, "20250101-000000-abcdef")
    except BadInput:
        return
    rows_table(parsed.records)


# ---- the run command's argv (no process started) --------------------------------------------------


def test_run_argv_is_a_list_for_each_launcher(monkeypatch):
    monkeypatch.setattr("commbench.integrations.nccl_tests.run.shutil.which", lambda name: f"/usr/bin/{name}")
    args = ["-b", "8", "-e", "1G", "-f", "2", "-g", "1"]
    assert build_argv("/x/all_reduce_perf", args, "none", None, []) == ["/x/all_reduce_perf", *args]
    assert build_argv("/x/all_reduce_perf", args, "mpirun", 16, ["--hostfile", "h"]) == [
        "/usr/bin/mpirun", "-np", "16", "--hostfile", "h", "/x/all_reduce_perf", *args]
    assert build_argv("/x/all_reduce_perf", args, "srun", 4, ["--mpi=pmix"]) == [
        "/usr/bin/srun", "--ntasks", "4", "--mpi=pmix", "/x/all_reduce_perf", *args]
    with pytest.raises(BadInput, match="--np starts several processes"):
        build_argv("/x/all_reduce_perf", args, "none", 2, [])
    monkeypatch.setattr("commbench.integrations.nccl_tests.run.shutil.which", lambda name: None)
    with pytest.raises(BadInput, match="mpirun is not on PATH"):
        build_argv("/x/all_reduce_perf", args, "mpirun", 2, [])


def test_a_json_path_given_by_the_user_is_kept():
    assert user_json_path(["-b", "8", "-J", "out.json"]) == "out.json"
    assert user_json_path(["--output_file=o.json"]) == "o.json"
    assert user_json_path(["-Jx.json"]) == "x.json"
    assert user_json_path(["-b", "8"]) is None


def test_cuda_graph_launches_are_kept_from_the_header_and_from_json(tmp_path):
    """-G N: the text header's `graph: N` and -J's config.graph, in each row's plan, so that
    `nccl-tests side-by-side` pairs a -G run with `sweep --cuda-graph` only."""
    text = Path(__file__).parent.parent / "data" / "nccl-tests" / "all_gather_v2.18.0_2ranks_stderr_noise.txt"
    plain = frame(parse_file(text, "20250101-000000-abcdef"))
    assert {json.loads(p)["graph"] for p in plain.plan} == {0}
    headed = tmp_path / "all_gather_graph.txt"
    headed.write_text(text.read_text().replace("validation: 1 graph: 0", "validation: 1 graph: 1"))
    assert {json.loads(p)["graph"] for p in frame(parse_file(headed, "20250101-000000-abcdef")).plan} == {1}
    doc = json.loads(json_doc())
    doc["config"]["graph"] = 1
    f = tmp_path / "g.json"
    f.write_text(json.dumps(doc))
    assert {json.loads(p)["graph"] for p in frame(parse_file(f, "20250101-000000-abcdef")).plan} == {1}


@pytest.mark.parametrize("field, header", [
    ("nThread",
     "# nThread 99999999999999999999 nGpus 8 minBytes 1 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20"),
    ("iters", "# nThread 1 nGpus 8 minBytes 1 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 99999999999999999999"),
    ("warmup iters", "# nThread 1 nGpus 8 minBytes 1 maxBytes 8 step: 2(factor) warmup iters: 2147483648 iters: 20"),
])
def test_a_header_count_past_a_c_int_is_refused_in_one_line(field, header):
    # found by test_mutated_sample_lines_give_rows_or_bad_input: the count overflowed the int32 column on write
    row = "           4             1   float     sum    34.73    0.00    0.00    N/A    35.30    0.00    0.00    N/A"
    with pytest.raises(BadInput, match=f"{field} '[0-9]+' is more than nccl-tests can run"):
        text_parsed("\n".join([header, row]))
    assert text_parsed("\n".join([header.replace("99999999999999999999", "7").replace("2147483648", "7"), row]))
