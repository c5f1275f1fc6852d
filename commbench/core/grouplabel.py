"""A layout group's label ('dp1', 'dp1 solo', 'dp0 [0,2]'; docs/LAYOUTS.md), declared once: the
Python function (table lines, compare's verdicts, gate entries, the report's Layout section) and
the SQL expression (the engine's curves and gate groups) are both built from PARTS, so a group
reads the same wherever it is named (tests/unit/test_group_label_once.py fails on a second copy).

A row of no group (group_dim null) has no label: '' in Python, and in SQL what the caller asks."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """One column's share of the label: `before` + its value + `after`, nothing where the cell is
    missing or empty. A flag writes `before` alone, where the column is false."""

    column: str
    before: str = ""
    after: str = ""
    whole: bool = False  # an integer column: its value without a fraction (a pandas float column's 1.0 is '1')
    flag: bool = False


HEAD = "group_dim"  # no dimension, no group: the label is empty
RANKS = "group_ranks"  # the one part a caller may leave out (a gate entry and compare name no ranks)
PARTS = (
    Part(HEAD),
    Part("group_index", whole=True),
    Part(RANKS, before=" [", after="]"),
    Part("concurrent", before=" solo", flag=True),  # --solo: the group ran with the others idle
)


def parts(ranks: bool = True) -> tuple[Part, ...]:
    return PARTS if ranks else tuple(p for p in PARTS if p.column != RANKS)


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA (whose truth is undefined, so it is told by its type's name)."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or type(value).__name__ == "NAType"


def _text(part: Part, value: Any) -> str:
    if _missing(value):
        return ""
    if part.flag:
        return part.before if value is False or value == 0 else ""
    text = str(int(value)) if part.whole and value != "" else str(value)
    return f"{part.before}{text}{part.after}" if text else ""


def label_of(row: Mapping[str, Any], ranks: bool = True) -> str:
    """A row's label (a mapping of PARTS' columns; one it lacks is missing); '' off a layout run."""
    if _missing(row.get(HEAD)):
        return ""
    return "".join(_text(p, row.get(p.column)) for p in parts(ranks))


def group_label(dim: Any, index: Any, concurrent: Any = True, ranks: Any = None) -> str:
    """'dp1', 'dp1 solo', 'dp0 [0,2]'; '' for a row of no group. Unsanitised: callers pass it through
    core/outtext.py's sanitiser for where it goes (terminal, markdown, figure)."""
    return label_of({HEAD: dim, "group_index": index, "concurrent": concurrent, RANKS: ranks}, ranks=ranks is not None)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql(part: Part) -> str:
    column = f'"{part.column}"'
    if part.flag:
        return f"CASE WHEN {column} = false THEN {_literal(part.before)} ELSE '' END"
    value = f"CAST(TRY_CAST({column} AS BIGINT) AS VARCHAR)" if part.whole else f"CAST({column} AS VARCHAR)"
    return f"coalesce({_literal(part.before)} || nullif({value}, '') || {_literal(part.after)}, '')"


def label_sql(columns: Iterable[str], ranks: bool = True) -> str | None:
    """A row's label as SQL (DuckDB), '' off a layout run, as label_of writes it; None where the rows
    lack one of its columns (no file of a layout run among them), for the caller to write its own
    no-label value."""
    used = parts(ranks)
    if not {p.column for p in used} <= set(columns):
        return None
    return f"CASE WHEN \"{HEAD}\" IS NULL THEN '' ELSE {' || '.join(_sql(p) for p in used)} END"
