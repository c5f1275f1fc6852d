"""core/columns.py is the one home of the key columns: no module writes out a tuple of them (a
point's key, a curve's line, a link's ends come from the registry's roles, e.g. columns.POINT_KEY,
LINE_KEY, LINK_KEY, TOPOLOGY_COLUMNS)."""

from __future__ import annotations

from commbench.core.columns import POINT_KEY

from unit.oncescan import literal_lists, scan_package

KEYS = set(POINT_KEY)
MOST = 2  # two columns are a pair a module picks (collective and size_bytes); three are a key
# TEMPORARY (issue #56): analysis/ still writes out 21 tuples of key columns (most pick the columns a
# view shows or groups by, in its own order); they are to come from columns.py's roles. Their count
# may only fall.
PENDING = ("analysis/",)
PENDING_MOST = 21


def tuples_of_keys(tree):
    return literal_lists(tree, KEYS, MOST)


def test_the_scan_finds_a_tuple_of_key_columns():
    assert tuples_of_keys('KEY = ("collective", "dtype", "op")\n') == [(1, ["collective", "dtype", "op"])]
    assert tuples_of_keys('for col in ["world_size", "nnodes", "ranks_per_node"]:\n    pass\n')
    assert not tuples_of_keys('X = ("collective", "size_bytes")\n')
    assert not tuples_of_keys('X = ("time_us", "busbw_GBps", "algbw_GBps")\n')  # values, not keys


def test_no_module_but_the_registry_writes_out_key_columns():
    every = list(scan_package(tuples_of_keys, skip=("core/columns.py",)))
    found = [f for f in every if not any(f.startswith(f"commbench/{p}") for p in PENDING)]
    assert len(every) - len(found) <= PENDING_MOST, "a new tuple of key columns in analysis/:\n" + "\n".join(every)
    assert not found, ("key columns listed by hand (take them from commbench/core/columns.py's roles):\n"
                       + "\n".join(found))
