"""The wire's gauges in `commbench export` (docs/METRICS.md): per workload, the trouble counters
(drops, errors, retransmissions) that moved in its latest run that read counters, summed over its points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.core import wire

if TYPE_CHECKING:
    from commbench.analysis.points.pointtable import Query
    from commbench.analysis.points.section import Gauges


def wire_metrics(q: Query, m: Gauges) -> None:
    """Per workload: the trouble counters that moved in its latest run that read counters, summed
    over its points; a counter that moved in an earlier run (of the inputs) and not in it reads 0."""
    has = q.source.columns
    if "wire" not in has:
        return
    flag = "wire_trouble IS NOT NULL" if "wire_trouble" in has else "wire IS NOT NULL"
    trouble = "coalesce(CAST(wire_trouble AS BOOLEAN), false)" if "wire_trouble" in has else "wire IS NOT NULL"
    latest = dict(q.run(f"SELECT {q.workload_sql()} AS w, arg_max(CAST(run_id AS VARCHAR), started_at) AS r "
                        f"FROM rows WHERE {flag} GROUP BY ALL").to_pandas().itertuples(index=False))
    if not latest:
        return
    sums: dict[tuple[str, str, str, str, str], int] = {}
    sql = (f"SELECT {q.workload_sql()} AS w, CAST(run_id AS VARCHAR) AS r, wire FROM rows WHERE NOT excluded "
           f"AND {trouble} ORDER BY gi")
    for batch in q.batches(sql):
        for w, r, value in zip(*(batch.column(n).to_pylist() for n in ("w", "r", "wire"))):
            for t in wire.troubles(value):
                key = (w, t.host, t.where, t.counter, t.kind)
                sums[key] = sums.get(key, 0) + (t.delta if latest.get(w) == r else 0)
    for (w, host, where, counter, kind), total in sorted(sums.items()):
        m.set("wire_trouble", "Trouble counters (drops, errors, retransmissions, ...) that moved during the "
              "latest run of a workload, summed over its points.",
              {"workload": w, "host": host, "where": where, "counter": counter, "kind": kind}, total)
