"""nccl-tests split logs (NCCL_TESTS_SPLIT): the rows are the printing rank's group's, so import
keeps that group: its size as world_size, its index (the Rank lines' Group) in group_index, and
busbw as the log printed it (per group, as nccl-tests' README says)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from commbench.integrations.nccl_tests.importer import import_files, parse_file

from unit.test_nccl_tests_parse import json_doc

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
SPLIT = DATA / "all_reduce_split_mod8_2node_16xH100.txt"  # made by make_split_fixture.py (README.md)


def printed_busbw(path: Path) -> list[float]:
    """Every half's busbw as the log prints it, read straight from its rows (fields 7 and 11)."""
    rows = [line.split() for line in path.read_text().splitlines() if line.strip() and line.split()[0].isdigit()]
    return [float(f[i]) for f in rows for i in (7, 11)]


def test_split_rows_are_the_groups():
    parsed = parse_file(SPLIT, "20250101-000000-abcdef")
    recs = parsed.records
    assert len(recs) == 62
    assert {r["world_size"] for r in recs} == {2}  # MOD 8 on 16 ranks: groups {r, r + 8}
    assert {r["group_index"] for r in recs} == {0}  # rank 0's Group prints the results
    # as sweep --split writes its rows (every group at once), so compare pairs the two (issue #38)
    assert {(r["group_dim"], r["concurrent"]) for r in recs} == {("split", True)}
    assert {(r["nnodes"], r["ranks_per_node"]) for r in recs} == {(2, 1)}
    assert all(r["busbw_GBps"] == r["algbw_GBps"] for r in recs if r["busbw_GBps"])  # all_reduce of 2: factor 1
    plan = json.loads(recs[0]["plan"])
    assert (plan["split_ranks"], plan["split_groups"]) == (16, 8)


def test_every_printed_busbw_is_kept():
    recs = parse_file(SPLIT, "20250101-000000-abcdef").records
    printed = printed_busbw(SPLIT)
    for r, bus in zip(recs, printed):
        if bus:  # 0.00 is below the print precision: commbench recomputes it (algbw x the group's factor)
            assert r["busbw_GBps"] == bus


def test_unsplit_log_has_no_group():
    recs = parse_file(DATA / "all_reduce_2node_16xH100.txt", "20250101-000000-abcdef").records
    assert {r["group_index"] for r in recs} == {None}
    assert {(r["group_dim"], r["concurrent"]) for r in recs} == {(None, None)}
    assert {r["world_size"] for r in recs} == {16}


def test_split_json_devices_keep_the_group(tmp_path):
    doc = json.loads(json_doc())
    doc["config"]["devices"] = [{**d, "rank": r, "group": r % 2, "hostname": f"gpu{r // 2}"}
                                for r, d in enumerate(doc["config"]["devices"] * 2)]
    f = tmp_path / "all_reduce.json"
    f.write_text(json.dumps(doc))
    recs = parse_file(f, "20250101-000000-abcdef").records
    assert {(r["world_size"], r["group_index"], tuple(r["hosts"])) for r in recs} == {(2, 0, ("gpu0", "gpu1"))}


def test_the_group_reaches_the_results_file(tmp_path):
    out = tmp_path / "split.parquet"
    assert import_files([str(SPLIT)], str(out), echo=lambda m: None) == 0
    table = pq.read_table(out, columns=["group_index", "group_dim", "concurrent", "world_size", "busbw_GBps",
                                        "schema_version"])
    assert set(table.column("group_index").to_pylist()) == {0}
    assert set(table.column("group_dim").to_pylist()) == {"split"}
    assert set(table.column("concurrent").to_pylist()) == {True}
    assert set(table.column("world_size").to_pylist()) == {2}
    assert max(table.column("busbw_GBps").to_pylist()) == max(printed_busbw(SPLIT))
