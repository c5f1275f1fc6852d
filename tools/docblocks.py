"""The generated blocks of a hand-kept page: lines between a begin marker and an end marker are
rebuilt from the code, everything else is kept as written (tools/archdoc.py, tools/reliabilitydoc.py)."""

from __future__ import annotations

import re
from collections.abc import Callable


def rewrite_blocks(
    text: str, begin: re.Pattern[str], end: str, doc: str, rebuild: Callable[[str, list[str]], list[str]]
) -> tuple[str, list[str]]:
    """`text` with each block after a line matching `begin` and before the line `end` replaced by
    rebuild(the begin match's first group, the block's old lines); also the groups, in order."""
    out: list[str] = []
    seen: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        start = begin.match(line)
        if not start:
            continue
        block = []
        while i < len(lines) and lines[i] != end:
            block.append(lines[i])
            i += 1
        if i == len(lines):
            raise SystemExit(f"{doc}: '{line}' has no '{end}'")
        seen.append(start.group(1))
        out += rebuild(start.group(1), block)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), seen
