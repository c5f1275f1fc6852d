"""`commbench nccl-tests import`'s parsers at the importer's limit: a text log and a -J document of
--bench-rows result rows (100,000 by default: 50,000 row lines, MAX_NCCL_TESTS_LOG_ROWS, each
line an out-of-place and an in-place row), generated from a recorded log (conftest.py).

Timed: importer.parse_file, what the import runs per file before writing (decode, the row
bound, the parser, the record builder); writing the parquet is ResultWriter's cost
(test_harness_costs.py)."""

from __future__ import annotations

import pytest

RUN_ID = "20261201-000000-bench1"
ROUNDS = 3  # a round is seconds: three are enough for a median


def check(parsed, log, fmt: str) -> None:
    assert parsed.fmt == fmt and not parsed.failed and not parsed.warnings and not parsed.skipped
    assert len(parsed.records) == log.records
    first, last = parsed.records[0], parsed.records[-1]
    assert (first["collective"], first["size_bytes"], first["world_size"], first["in_place"]) == \
        ("all_reduce", 8, 8, False)
    assert last["size_bytes"] == 134217728 and last["in_place"]
    # the 25 sizes printed once a cycle (--bench-rows is a multiple of 50): the repetition counts cycles
    assert last["repetition"] == log.lines // 25 - 1
    assert {r["repetition"] for r in parsed.records if r["size_bytes"] == 8} == set(range(log.lines // 25))


@pytest.mark.benchmark(group="nccl-tests import: parse one log")
def test_parse_text_log(benchmark, nccl_text_log):
    from commbench.integrations.nccl_tests.importer import parse_file

    parsed = benchmark.pedantic(parse_file, (nccl_text_log.path, RUN_ID), rounds=ROUNDS, iterations=1)
    check(parsed, nccl_text_log, "text")


@pytest.mark.benchmark(group="nccl-tests import: parse one log")
def test_parse_json_document(benchmark, nccl_json_log):
    from commbench.integrations.nccl_tests.importer import parse_file

    parsed = benchmark.pedantic(parse_file, (nccl_json_log.path, RUN_ID), rounds=ROUNDS, iterations=1)
    check(parsed, nccl_json_log, "json")
