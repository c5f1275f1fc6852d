"""core/columns.py is the one home of the key columns: no module writes out a tuple of them (a
point's key, a curve's line, a link's ends come from the registry's roles, e.g. columns.POINT_KEY,
LINE_KEY, LINK_KEY, TOPOLOGY_COLUMNS)."""

from __future__ import annotations

from commbench.core.columns import POINT_KEY

from .oncescan import literal_lists, scan_package

KEYS = set(POINT_KEY)
MOST = 2  # two columns are a pair a module picks (collective and size_bytes); three are a key
# analysis/ joins once it has moved into its feature folders (issue #56).
PENDING = ("analysis/",)


def tuples_of_keys(tree):
    return literal_lists(tree, KEYS, MOST)


def test_the_scan_finds_a_tuple_of_key_columns():
    assert tuples_of_keys('KEY = ("collective", "dtype", "op")\n') == [(1, ["collective", "dtype", "op"])]
    assert tuples_of_keys('for col in ["world_size", "nnodes", "ranks_per_node"]:\n    pass\n')
    assert not tuples_of_keys('X = ("collective", "size_bytes")\n')
    assert not tuples_of_keys('X = ("time_us", "busbw_GBps", "algbw_GBps")\n')  # values, not keys


def test_no_module_but_the_registry_writes_out_key_columns():
    found = [f for f in scan_package(tuples_of_keys, skip=("core/columns.py",))
             if not any(f.startswith(f"commbench/{p}") for p in PENDING)]
    assert not found, ("key columns listed by hand (take them from commbench/core/columns.py's roles):\n"
                       + "\n".join(found))
