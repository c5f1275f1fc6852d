"""core/grouplabel.py is the one home of a layout group's label ('dp1', 'dp1 solo', 'dp0 [0,2]'): no
module puts one together in Python or in SQL, and its Python and SQL forms, both built from its
PARTS, write the same label for the same row."""

from __future__ import annotations

import pandas as pd

from commbench.analysis.points import points
from commbench.analysis.points.pointtable import Query, frame_source, gate_groups
from commbench.core import grouplabel
from commbench.core.columns import GROUP_KEY

from unit.oncescan import label_copies, scan_package
from unit.synthetic import frame, make_rows


def test_the_scan_finds_a_label_put_together():
    assert label_copies('name = f"{dim}{index} [{ranks}]"\n') == [(1, ["f-string"])]
    assert label_copies('name = f"{row[\'group_dim\']}{row[\'group_index\']}"\n') == [(1, ["f-string"])]
    assert label_copies('line = f"   dp{row[\'group_index\']} [{row[\'group_ranks\']}]"\n') == [(1, ["f-string"])]
    assert label_copies('name = dim + str(int(index))\n') == [(1, ["sum"])]
    assert label_copies('text = text + (" solo" if solo else "")\n') == [(1, ["solo"])]
    assert not label_copies('x = f"{size}{unit}"\n')
    assert not label_copies('x = f"{dim} groups, {kind}"\n')
    assert not label_copies('"""\'dp1\', \'dp1 solo\'"""\n')  # a docstring's example is no copy


def test_a_planted_sql_label_is_found():
    planted = ('SQL = ("CASE WHEN group_dim IS NULL THEN NULL ELSE group_dim || CAST(group_index AS VARCHAR) "\n'
               '       "|| CASE WHEN concurrent = false THEN \' solo\' ELSE \'\' END END")\n')
    assert label_copies(planted) == [(1, ["SQL"])]
    assert label_copies('q = f"SELECT {col} || group_index AS g FROM rows"\n') == [(1, ["SQL"])]
    assert not label_copies('q = "SELECT count(*) FROM rows WHERE group_dim IS NULL"\n')


def test_no_module_but_the_home_puts_a_label_together():
    found = list(scan_package(label_copies, skip=("core/grouplabel.py",)))
    assert not found, ("a group's label put together by hand (call commbench/core/grouplabel.py's group_label, "
                       "label_of or label_sql):\n" + "\n".join(found))


def test_the_label_of_a_gate_entry_is_the_point_keys_group_part():
    assert tuple(p.column for p in grouplabel.parts(ranks=False)) == GROUP_KEY


def test_the_python_labels():
    assert grouplabel.group_label("dp", 1) == "dp1"
    assert grouplabel.group_label("dp", 1, False) == "dp1 solo"
    assert grouplabel.group_label("dp", 0, True, "0,2") == "dp0 [0,2]"
    assert grouplabel.group_label("dp", 0, 0, "0,2") == "dp0 [0,2] solo"
    assert grouplabel.group_label("split", 1.0, True, float("nan")) == "split1"  # a pandas float column's cells
    assert grouplabel.group_label(None, 1) == grouplabel.group_label(float("nan"), 1) == ""
    assert grouplabel.group_label("dp", pd.NA, pd.NA, pd.NA) == "dp"


def _rows(tmp_path) -> pd.DataFrame:
    """Real rows through the writer and read_results: a plain run's, a layout run's (concurrent and
    solo, two groups) and an nccl-tests split log's (its groups name no ranks)."""
    plain = make_rows(collectives=("all_reduce",), sizes=(1024,), placements=(True,), repetitions=1)
    grouped = []
    for index, ranks in ((0, "0,2"), (1, "1,3")):
        for concurrent in (True, False):
            for r in make_rows(collectives=("all_reduce",), sizes=(1024, 1 << 20), placements=(True,), repetitions=1):
                r.update(group_dim="dp", group_index=index, group_ranks=ranks, concurrent=concurrent)
                grouped.append(r)
    split = make_rows(collectives=("all_gather",), sizes=(1024,), placements=(True,), repetitions=1)
    for i, r in enumerate(split):
        r.update(group_dim="split", group_index=i, concurrent=True, workload="nccl-tests")
    return frame(plain + grouped + split, tmp_path)


def test_python_and_sql_write_the_same_label_for_each_row(tmp_path):
    rows = _rows(tmp_path)
    q = Query(frame_source(rows, "labelled"), "labelled")
    got = q.run(f"SELECT {grouplabel.label_sql(q.source.columns)} AS with_ranks, "
                f"{grouplabel.label_sql(q.source.columns, ranks=False)} AS without FROM rows ORDER BY gi")
    records = rows.to_dict("records")
    assert got.column("with_ranks").to_pylist() == [grouplabel.label_of(r) for r in records]
    assert got.column("without").to_pylist() == [grouplabel.label_of(r, ranks=False) for r in records]
    assert {grouplabel.label_of(r) for r in records} == {"", "dp0 [0,2]", "dp0 [0,2] solo", "dp1 [1,3]",
                                                         "dp1 [1,3] solo", "split0"}


def test_the_engines_curves_and_gate_groups_carry_the_python_label(tmp_path):
    rows = _rows(tmp_path)
    curves = points.medians(rows)
    assert set(curves[points.GROUP]) == {grouplabel.label_of(r) for r in rows.to_dict("records")}
    path = tmp_path / "run.parquet"
    groups = gate_groups([path], ("sweep", "nccl-tests"))
    assert set(groups["group"]) == {grouplabel.label_of(r, ranks=False) or None for r in rows.to_dict("records")}


def test_rows_without_group_columns_have_no_label():
    assert grouplabel.label_sql(["collective", "size_bytes"]) is None
    assert grouplabel.label_sql(["group_dim", "group_index", "concurrent"]) is None  # no ranks to write
    assert grouplabel.label_sql(["group_dim", "group_index", "concurrent"], ranks=False) is not None
