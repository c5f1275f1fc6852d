"""The generated blocks of a hand-kept page: lines between a begin marker and an end marker are
rebuilt from the code, everything else is kept as written (tools/archdoc.py, tools/reliabilitydoc.py)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path


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


def check_or_write(
    doc: Path, root: Path, new: str, differing: Callable[[str, str], list[str]], source: str, script: str, check: bool
) -> int:
    """--check: exit 1 naming what differs from `source` (the page is left alone); else write the
    page when it changed. The exit code of both tools."""
    old = doc.read_text()
    if check:
        if new != old:
            print(
                f"{doc.relative_to(root)} differs from {source} at: {'; '.join(differing(old, new))}; "
                f"run python tools/{script}",
                file=sys.stderr,
            )
            return 1
        return 0
    if new != old:
        doc.write_text(new)
    return 0
