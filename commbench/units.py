"""Sizes as people type them (binary K/M/G, like nccl-tests) and as tables print them."""

from __future__ import annotations

import re

from commbench.errors import BadInput

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\d*\.\d+)(?:e(\d+))?\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str, what: str = "size") -> int:
    """'64M' -> 67108864. K/M/G/T are binary (1024), as in nccl-tests; '1e6' is accepted.

    Raises BadInput for anything else, zero or negative included.
    """
    raw = str(text)
    m = _SIZE.match(raw)
    if not m:
        raise BadInput(
            f"{what} {raw!r} is not a size: use a whole number of bytes with an optional "
            "binary unit, e.g. 8, 4K, 64M, 1G"
        )
    number = float(m.group(1)) * (10 ** int(m.group(2)) if m.group(2) else 1)
    value = number * _UNITS[m.group(3).upper()]
    if value != int(value):
        raise BadInput(f"{what} {raw!r} is not a whole number of bytes: use e.g. 1536 or 1.5K")
    value = int(value)
    if value <= 0:
        raise BadInput(f"{what} {raw!r} must be at least 1 byte")
    return value


def parse_size_list(text: str, what: str = "--sizes") -> list[int]:
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise BadInput(f"{what} is empty: give comma-separated sizes, e.g. 1K,64K,4M")
    return [parse_size(p, what) for p in parts]


def format_size(nbytes: int | float) -> str:
    """Human label with binary units: 8 B, 4 KiB, 1.5 MiB, 16 GiB."""
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
