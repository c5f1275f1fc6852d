"""docs/RELIABILITY.md stays true: every test it names (`FILE::NAME`, then `::NAME` for more in
the same file) exists, and every test file of issue 8's promises is named there."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "RELIABILITY.md"


def named_tests() -> list[tuple[str, str]]:
    found = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("|"):
            continue
        current = None
        for m in re.finditer(r"([\w/]+\.py)?::([\w*]+)", line):
            current = m.group(1) or current
            assert current, f"'::{m.group(2)}' without a file before it: {line}"
            found.append((current, m.group(2)))
    return found


def test_every_named_test_exists():
    names = named_tests()
    assert len(names) >= 50, names
    missing = []
    for rel, pattern in names:
        path = ROOT / "tests" / rel
        assert path.exists(), rel
        defined = [n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)]
        if not fnmatch.filter(defined, pattern):
            missing.append(f"{rel}::{pattern}")
    assert missing == []


def test_the_reliability_tests_are_all_in_the_doc():
    files = {rel for rel, _ in named_tests()}
    for rel in ("integration/test_lost_rank.py", "integration/test_result_store.py",
                "integration/test_security_run.py", "unit/test_security.py", "unit/test_fuzz.py",
                "test_cli_bad_input_all.py", "test_cli_bad_input.py", "integration/test_sweep_ranks.py",
                "unit/test_failure_paths.py"):
        assert rel in files, rel
    for rel in ("integration/test_lost_rank.py", "integration/test_result_store.py",
                "integration/test_security_run.py", "unit/test_security.py", "unit/test_fuzz.py",
                "unit/test_failure_paths.py"):
        tree = ast.parse((ROOT / "tests" / rel).read_text())
        tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
        named = {name for r, name in named_tests() if r == rel}
        unnamed = {t for t in tests if not any(fnmatch.fnmatch(t, n) for n in named)}
        # the scan's own checks and the commands' smoke test back the rows, they are not failure modes
        unnamed -= {"test_the_package_does_start_processes_with_argv_lists", "test_the_scan_passes_argv_use",
                    "test_the_commands_ran", "test_parse_count_is_exact_for_whole_numbers",
                    "test_parse_count_of_a_fraction_rounds_down_or_refuses"}
        assert unnamed == set(), (rel, unnamed)
