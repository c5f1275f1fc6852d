"""Text that came from outside (environment variables, files, results, sysfs) made safe to print on
a terminal: no control character (an escape sequence could recolour, move the cursor, retitle the
window or hide what follows), no line break, no bidirectional override.

Two forms: `printable`
puts '?' in their place (report tables, labels), `escaped` shows them as Python-style escapes
(`\\x1b`, `\\u202e`), so that doctor can say what a variable really holds.
"""

from __future__ import annotations

from typing import Any

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

# Nesting of the values escaped_tree walks (doctor's facts are 4 levels deep); deeper is cut.
MAX_TREE_DEPTH = 32


def printable(text: str) -> str:
    """Values come from the files (labels, environment): keep each on one line, without control bytes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escaped(text: Any) -> str:
    """str(text) on one line, every character that is not printable written as its escape."""
    line = str(text)
    if line.isprintable():
        return line
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in line)


def escaped_tree(value: Any, depth: int = 0) -> Any:
    """A copy of dicts, lists and tuples whose every string (keys too) is `escaped`; other values as they are."""
    if isinstance(value, str):
        return escaped(value)
    if depth >= MAX_TREE_DEPTH:
        return "(cut: nested too deeply)" if isinstance(value, (dict, list, tuple)) else value
    if isinstance(value, dict):
        return {escaped_tree(k, depth + 1): escaped_tree(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [escaped_tree(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(escaped_tree(v, depth + 1) for v in value)
    return value
