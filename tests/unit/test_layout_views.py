"""Layout runs' views (issue #38, docs/LAYOUTS.md "Views"): compare's group column and verdict per
group dimension, gate's bands per group, plot's curve per group, the report's Layout section."""

from __future__ import annotations

import pandas as pd

from commbench.analysis import compare as cmp
from tests.unit.synthetic import make_rows

GROUPS = {0: "0,2", 1: "1,3"}


def layout_rows(speed: float = 400.0, run_id: str = "20250101-000000-abcdef", repetitions: int = 7,
                solo_speed: float | None = None, sizes=(1 << 20, 1 << 24), slow_group: int | None = None) -> list[dict]:
    """A layout run's rows: dp groups 0 and 1, each all at once (concurrent) and alone (solo)."""
    rows = []
    for index, ranks in GROUPS.items():
        for concurrent in (True, False):
            s = (solo_speed or speed) if not concurrent else speed
            s = s / 2 if slow_group == index and concurrent else s
            for r in make_rows(collectives=("all_reduce",), sizes=sizes, placements=(True,),
                               repetitions=repetitions, run_id=run_id, speed_gbps=s, seed=index):
                r.update(group_dim="dp", group_index=index, group_ranks=ranks, group_hosts="node01,node02",
                         concurrent=concurrent, world_size=2, nnodes=2, ranks_per_node=1)
                rows.append(r)
    return rows


def test_compare_of_two_layout_runs_has_a_group_column_and_a_verdict_per_dimension():
    before = pd.DataFrame(layout_rows())
    after = pd.DataFrame(layout_rows(speed=200.0, solo_speed=400.0, run_id="20250102-000000-abcdef"))
    c = cmp.compare_frames(before, after)
    assert len(c.points) == 8  # 2 sizes x 2 groups x (concurrent, solo): never merged as duplicates
    text = cmp.render_table(c)
    header = text.splitlines()[0]
    assert "group" in header
    assert "dp1 solo" in text and "dp0 " in text
    lines = [line for line in text.splitlines() if line.startswith("dp groups")]
    assert lines[0].startswith("dp groups, all at once: 2 of 2 slower (median -")
    assert "dp0 regression" in lines[0] and "dp1 regression" in lines[0]
    assert lines[1].startswith("dp groups, each alone: 2 of 2 unchanged")
    assert c.verdict == "regression"
    assert "dp groups, all at once" in cmp.render_markdown(c)


def test_compare_of_plain_runs_has_no_group_column():
    text = cmp.render_table(cmp.compare_frames(pd.DataFrame(make_rows(repetitions=3)),
                                               pd.DataFrame(make_rows(repetitions=3, run_id="20250102-000000-abcdef"))))
    assert "group" not in text.splitlines()[0] and "groups," not in text
