"""docs/ARCHITECTURE.md's module tables are the modules' docstrings (tools/archdoc.py generates them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("archdoc", ROOT / "tools" / "archdoc.py")
archdoc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(archdoc)


def test_module_tables_are_the_docstrings():
    text = archdoc.DOC.read_text()
    generated = archdoc.generate(text)
    assert generated == text, (
        f"docs/ARCHITECTURE.md differs from the docstrings at: {', '.join(archdoc.differences(text, generated))}; "
        "run python tools/archdoc.py"
    )


def test_generation_follows_the_code(tmp_path):
    """A changed docstring changes its row, a new module gets a row at the end of its table, a removed
    one loses its row, and the hand-kept order and text around the tables stay."""
    pkg = tmp_path / "commbench"
    (pkg / "core").mkdir(parents=True)
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "b.py").write_text('"""B does | this.\n\nDetails."""\n')
    (pkg / "core" / "a.py").write_text('"""A, first\nparagraph."""\n')
    doc = ("intro\n<!-- modules: core -->\n| module | job |\n|---|---|\n| `core/b.py` | old |\n"
           "| `core/gone.py` | removed |\n<!-- /modules -->\nafter\n")
    assert archdoc.generate(doc, pkg) == (
        "intro\n<!-- modules: core -->\n| module | job |\n|---|---|\n| `core/b.py` | B does \\| this. |\n"
        "| `core/a.py` | A, first paragraph. |\n<!-- /modules -->\nafter\n")


def test_quoted_facts_follow_the_code(tmp_path):
    """The schema version the page quotes is core/columns.py's: a stale one is rewritten and --check names it."""
    pkg = tmp_path / "commbench"
    (pkg / "core").mkdir(parents=True)
    (pkg / "core" / "columns.py").write_text('"""Columns."""\n\nSCHEMA_VERSION = 7\n')
    doc = "results (schema_version 3)\n"
    new = archdoc.generate(doc, pkg)
    assert new == "results (schema_version 7)\n"
    assert archdoc.differences(doc, new) == ["schema_version"]
    assert archdoc.generate(new, pkg) == new
