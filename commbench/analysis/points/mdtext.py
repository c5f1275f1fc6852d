"""Markdown pieces every view shares: a value from a results file made inert for a Markdown cell, and
a table of such cells (the report's Markdown, nccl-tests side by side).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from commbench.core.outtext import LINE_LIMIT, markdown


def md(value: Any) -> str:
    """Text from a results file, safe in a Markdown table cell: no HTML, links, images, emphasis,
    code or column breaks can come out of it, control characters shown as escapes, one line, bounded
    (core/outtext.py `markdown`)."""
    return markdown(value, LINE_LIMIT)


def md_table(headers: Sequence[str], rows: Iterable[Sequence], right: Iterable[int] = ()) -> str:
    right = set(right)
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(md(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
