"""Compare's likely cause from the wire counters of the points that need them, read by the engine.

Per point, whether counters were read and whether a trouble counter moved comes from the
wire_trouble flag (a bool a row; the wire JSON where no file has the flag); then the wire JSON of
only the flagged rows of the points whose cause is asked, a batch at a time, summed per host,
place and counter as core/wire.totals sums them, and judged by wireview.cause_of.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from commbench.analysis.points.pointtable import KEY_COLUMNS, Aggregate, Query, quote
from commbench.analysis.wire import wireview
from commbench.core import wire

WIRE_BATCH = 10_000  # wire JSON values held at once while their trouble counters are summed


def likely_causes(before: Aggregate, after: Aggregate, keys: Iterable[tuple]) -> dict[tuple, str]:
    """wireview.likely_causes over two aggregated sides, with the same answers: per point, whether
    counters were read and whether a trouble counter moved (from the wire_trouble flag, a bool a
    row), then the wire JSON of only the flagged rows of the points whose cause is asked, a batch at
    a time, summed per host, place and counter as core/wire.totals sums them."""
    if before.query is None or after.query is None or "wire" not in after.query.source.columns:
        return {}
    b_flags, a_flags = wire_flags(before.query), wire_flags(after.query)
    wanted = [k for k in keys if b_flags.get(k, (False, False))[0] and a_flags.get(k, (False, False))[1]]
    if not wanted:
        return {}
    b_totals, a_totals = wire_totals(before.query, set(wanted)), wire_totals(after.query, set(wanted))
    b_count, a_count = (dict(zip(agg.keys, agg.counts.tolist())) for agg in (before, after))
    out = {}
    for k in wanted:
        cause = wireview.cause_of(b_totals.get(k, []), b_count[k], a_totals.get(k, []), a_count[k])
        if cause:
            out[k] = cause
    return out


def wire_flags(q: Query) -> dict[tuple, tuple[bool, bool]]:
    """Per point (its key as aggregate gives it): (counters were read in a row, a trouble counter
    moved in one), as wireview.row_flags reads the rows: the wire_trouble flag where a file has
    it, the JSON where no file has it, nothing read where there is no wire column."""
    keys = q.key_exprs()
    if "wire_trouble" in q.source.columns:
        got = q.run(f"SELECT {', '.join(keys)}, bool_or(wire_trouble IS NOT NULL) AS r, "
                    "bool_or(coalesce(CAST(wire_trouble AS BOOLEAN), false)) AS t FROM rows WHERE NOT excluded "
                    "GROUP BY ALL")
        return dict(zip(zip(*[got.column(n).to_pylist() for n in KEY_COLUMNS]),
                        zip(got.column("r").to_pylist(), got.column("t").to_pylist())))
    if "wire" not in q.source.columns:
        return {}
    out: dict[tuple, tuple[bool, bool]] = {}
    for key, value in _key_values(q, "wire", "wire IS NOT NULL"):
        state = wire.is_clean(value)
        read, trouble = out.get(key, (False, False))
        out[key] = (read or state is not None, trouble or state is False)
    return out


def wire_totals(q: Query, wanted: set) -> dict[tuple, list]:
    """Per point of `wanted`: its trouble counters summed over its flagged rows (every row with
    counters where no file has the flag: a clean row adds nothing), wireview.summed_by_point."""
    flagged = ("coalesce(CAST(wire_trouble AS BOOLEAN), false)" if "wire_trouble" in q.source.columns
               else "true")
    return wireview.summed_by_point(_key_values(q, "wire", f"{flagged} AND wire IS NOT NULL"), wanted)


def _key_values(q: Query, column: str, where: str) -> Iterator[tuple[tuple, object]]:
    """(point key, value of `column`) of the rows that pass `where`, in row order, a batch at a time."""
    sql = (f"SELECT {', '.join(q.key_exprs())}, {quote(column)} AS value FROM rows WHERE NOT excluded AND "
           f"({where}) ORDER BY gi")
    for batch in q.batches(sql):
        keys = zip(*[batch.column(n).to_pylist() for n in KEY_COLUMNS])
        yield from zip(keys, batch.column("value").to_pylist())
