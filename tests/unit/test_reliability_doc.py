"""docs/RELIABILITY.md stays true: its tables are the tests' own failure markers (tools/reliabilitydoc.py
generates them), every test it names (`FILE::NAME`, then `::NAME` for more in the same file) exists,
and every test file of issue 8's promises is named there."""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "RELIABILITY.md"
_spec = importlib.util.spec_from_file_location("reliabilitydoc", ROOT / "tools" / "reliabilitydoc.py")
reliabilitydoc = sys.modules["reliabilitydoc"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(reliabilitydoc)


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
    defined: dict[str, list[str]] = {}  # a file parsed once, however many of its tests the page names
    for rel, pattern in names:
        path = ROOT / "tests" / rel
        assert path.exists(), rel
        if rel not in defined:
            defined[rel] = [n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)]
        if not fnmatch.filter(defined[rel], pattern):
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


def test_failure_tables_are_the_markers():
    text = reliabilitydoc.DOC.read_text()
    generated = reliabilitydoc.generate(text)
    assert generated == text, (
        f"docs/RELIABILITY.md differs from the tests' failure markers at: "
        f"{'; '.join(reliabilitydoc.differences(text, generated))}; run python tools/reliabilitydoc.py"
    )


def test_every_table_is_generated():
    """Every table of the page lies between failure markers: none is left to drift by hand."""
    inside = False
    for line in DOC.read_text().splitlines():
        if reliabilitydoc.BEGIN.match(line):
            inside = True
        elif line == reliabilitydoc.END:
            inside = False
        elif line.startswith("|"):
            assert inside, f"a table row outside <!-- failures: ... -->: {line[:80]}"


def test_generation_follows_the_markers(tmp_path):
    """A changed marker changes its row; a new row, and a new test of a row, go at the end; the
    hand-kept order, header and text around the tables stay; a `|` is escaped."""
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_a.py").write_text(
        "import pytest\n\n\n"
        '@pytest.mark.failure(row="r1", section="S", failure="one", does="new | text")\n'
        "def test_one(): pass\n\n\n"
        '@pytest.mark.failure(row="r2", section="S", failure="two", does="b")\n'
        '@pytest.mark.failure(row="r1", cases="x-*", note="why")\n'
        "def test_two(): pass\n\n\n"
        '@pytest.mark.failure(row="r2", name="test_th*")\n'
        "def test_three(): pass\n\n\n"
        '@pytest.mark.failure(section="S", failure="new", does="c")\n'
        "def test_four(): pass\n"
    )
    (tmp_path / "test_b.py").write_text(
        'import pytest\n\n\n@pytest.mark.failure(row="r2")\ndef test_b(): pass\n'
    )
    doc = ("intro\n<!-- failures: S -->\n| risk | what commbench does | test |\n|---|---|---|\n"
           "| two | b | unit/test_a.py::test_two |\n| one | old | unit/test_a.py::test_one |\n"
           "| gone | x | unit/test_a.py::test_gone |\n<!-- /failures -->\nafter\n")
    assert reliabilitydoc.generate(doc, tmp_path) == (
        "intro\n<!-- failures: S -->\n| risk | what commbench does | test |\n|---|---|---|\n"
        "| two | b | unit/test_a.py::test_two; test_b.py::test_b; unit/test_a.py::test_th* |\n"
        "| one | new \\| text | unit/test_a.py::test_one, ::test_two[x-*] (why) |\n"
        "| new | c | unit/test_a.py::test_four |\n<!-- /failures -->\nafter\n")
