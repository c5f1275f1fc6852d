"""The column registry (core/columns.py) is the one declaration of the result columns: the
parquet schema, the doc's table and every list of columns analysis reads come from it."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from commbench.core import columns
from commbench.core.results import SCHEMA

ROOT = Path(__file__).resolve().parents[2]


def test_the_schema_is_the_registry():
    assert SCHEMA.names == list(columns.NAMES)
    assert all(SCHEMA.field(c.name).type == c.type for c in columns.REGISTRY)
    assert len(set(columns.NAMES)) == len(columns.REGISTRY)


def test_every_column_is_documented_as_the_registry_says():
    doc = (ROOT / "docs" / "RESULTS.md").read_text()
    assert columns.with_table(doc) == doc, \
        "docs/RESULTS.md's column table differs: run python -m commbench.core.columns"
    table = doc.split(columns.TABLE_BEGIN)[1].split(columns.TABLE_END)[0]
    documented = [line.split("|")[1].strip() for line in table.splitlines()[3:] if line.startswith("|")]
    assert documented == list(columns.NAMES)
    assert f"`schema_version` (now {columns.SCHEMA_VERSION})" in doc


def test_every_column_has_a_meaning_a_type_and_a_version():
    for c in columns.REGISTRY:
        assert c.filled and isinstance(c.type, pa.DataType), c.name
        assert 1 <= c.since <= columns.SCHEMA_VERSION, c.name
        assert set(c.writers) <= set(columns.ALL_WORKLOADS), c.name
    assert columns.REQUIRED_COLUMNS == ("collective", "size_bytes", "busbw_GBps", "schema_version")


def test_the_point_key_is_what_compare_pairs_on():
    assert columns.POINT_KEY[:2] == ("collective", "dtype")
    assert {"size_bytes", "in_place", "world_size", "settings", "rail", "src_host"} <= set(columns.POINT_KEY)
    assert "run_id" not in columns.POINT_KEY and "time_us" not in columns.POINT_KEY
    assert set(columns.GROUP_KEY) <= set(columns.POINT_KEY) and set(columns.LAYOUT_POINT) <= set(columns.POINT_KEY)
    assert set(columns.RUN_POINT_KEY) - set(columns.POINT_KEY) == {"root", "confirm"}
    assert set(columns.INT_KEYS) == {c for c in columns.POINT_KEY if pa.types.is_integer(columns.BY_NAME[c].type)}


# A module's named list of columns (NAME = (...), [...] or {...}, comments and line breaks
# allowed) of three or more key columns and nothing else: a key list written out by hand. Only
# the registry may hold one; a list of what a command reads (keys and values), or a function's
# own display order, is not a key list.
_LITERAL = re.compile(r"^[A-Z_]+\s*(?::[^=]+)?=\s*[(\[{]((?:\s*\"[a-z_]+\"\s*,?\s*(?:#[^\n]*)?)+)[)\]}]", re.M)


def test_no_list_of_key_columns_is_written_out_but_in_the_registry():
    key = set(columns.RUN_POINT_KEY)
    found = []
    for path in sorted((ROOT / "commbench").rglob("*.py")):
        if path.name == "columns.py":
            continue
        for m in _LITERAL.finditer(path.read_text()):
            names = re.findall(r'"([a-z_]+)"', m.group(1))
            if len(names) >= 3 and set(names) <= key:
                found.append(f"{path.relative_to(ROOT)}: {', '.join(names)}")
    assert not found, "key columns listed by hand (derive them from commbench/core/columns.py):\n" + "\n".join(found)
