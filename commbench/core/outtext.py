"""Text from files made inert for each kind of output, in one place (issue #39): a terminal line
(`terminal`), Markdown for a ticket (`markdown`), a CSV cell a spreadsheet opens (`csv_cell`) and a
figure's title or label (`figure`); each shows at most a bound of a value (`bounded`).

A terminal line shows control and bidirectional characters as escapes and stays one line
(core/safetext.py `escaped`); `lines` does so line by line (a report's preformatted block). Markdown
escapes each character that could make a link, an image, emphasis, code, a column break, HTML, math
or an autolink (`(`, `)` and `!` are inert once the brackets are escaped), so a value stays text. A
CSV cell that a spreadsheet would evaluate (`=`, `+`, `-`, `@`, TAB, CR first) gets a leading single
quote, as OWASP's CSV injection page recommends; the writer quotes every text cell. A figure's text
loses its control characters (they make an SVG invalid XML) and `$` cannot start mathtext. Every
bound cuts the raw value before it is escaped, so a 10 MiB name costs its first characters only, and
says how long the value was: `first 200 characters… (10,485,760 characters)`.
"""

from __future__ import annotations

import re
from typing import Any

from commbench.core.safetext import escaped

LIMIT = 200  # characters of one value from a file, shown
LINE_LIMIT = 1000  # characters of a line composed of several values (a report's cell, a Markdown line)
SUMMARY_LIMIT = 100_000  # characters of a verdict's summary, which names every entry that failed

_CUT = "…"


def bounded(text: Any, limit: int = LIMIT) -> str:
    """str(text), or its first `limit` characters, an ellipsis and its full length."""
    value = "" if text is None else str(text)
    if len(value) <= limit:
        return value
    return f"{value[:limit]}{_CUT} ({len(value):,} characters)"


def terminal(text: Any, limit: int = LIMIT) -> str:
    """One terminal line: control and bidi characters as escapes (`\\x1b`, `\\u202e`), bounded."""
    return escaped(bounded(text, limit))


def lines(text: Any, limit: int = LINE_LIMIT) -> str:
    """Text of several lines (a report's preformatted block) as `terminal` lines, each bounded."""
    value = "" if text is None else str(text)
    if len(value) <= limit and value.isprintable():  # most cells of a report: two checks
        return value
    if "\n" not in value:
        return terminal(value, limit)
    return "\n".join(terminal(line, limit) for line in value.split("\n"))


# What Markdown (CommonMark, GitHub's tables, strikethrough and math) acts on inside a line: "[" and
# "]" escaped leave "(", ")" and "!" no link or image to make; "_" only where it may open or close
# emphasis (not inside a word: all_reduce stays as it is).
_MD_ACTIVE = re.compile(r"([\\`*\[\]|~#$]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_MD_ENTITY = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_AUTOLINK = re.compile(r"(?i)(?<=www)\.|:(?=//)")  # GitHub links a bare www.x.com or https://x by itself


def markdown(text: Any, limit: int = LIMIT) -> str:
    """One line of inert Markdown: no link, image, HTML, emphasis, code, column break or math can
    come out of it; control characters shown as escapes."""
    line = terminal(text, limit)
    if any(ch in _MD_ENTITY for ch in line):
        line = "".join(_MD_ENTITY.get(ch, ch) for ch in line)
    line = _MD_ACTIVE.sub(r"\\\1", line)
    if "." in line or ":" in line:
        line = _MD_AUTOLINK.sub(lambda m: "\\" + m.group(0), line)
    return line


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: Any) -> str:
    """A CSV text cell a spreadsheet shows as text: control characters as escapes, and a leading
    single quote where it would start a formula (write it with csv.QUOTE_NONNUMERIC)."""
    value = "" if text is None else str(text)
    shown = escaped(value)
    if value.startswith(_FORMULA_START) or shown.startswith(_FORMULA_START):
        return "'" + shown
    return shown


def figure(text: Any, limit: int = LIMIT) -> str:
    """A figure's title, label or legend entry: no control or bidi character, no mathtext, bounded."""
    value = bounded(text, limit)
    if not value.isprintable():
        value = "".join(ch for ch in value if ch.isprintable())
    return value.replace("$", r"\$")
