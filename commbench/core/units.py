"""Sizes as people type them (binary K/M/G, like nccl-tests) and as tables print them."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from commbench.core.errors import BadInput

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\d*\.\d+)(?:e(\d+))?\s*([KMGT]?)(?:I?B)?\s*$",
                   re.IGNORECASE | re.ASCII)
_MAX_SIZE = (1 << 63) - 1  # sizes are stored as int64


def parse_size(text: str, what: str = "size") -> int:
    """'64M' -> 67108864. K/M/G/T are binary (1024), as in nccl-tests; '1e6' is accepted.

    Raises BadInput for anything else, zero or negative included.
    """
    raw = str(text)
    m = _SIZE.match(raw) if len(raw) <= 64 else None
    if not m:
        raise BadInput(
            f"{what} {raw!r} is not a size: use a whole number of bytes with an optional "
            "binary unit, e.g. 8, 4K, 64M, 1G"
        )
    # Exact arithmetic: a float would round 2**53 + 1 and overflow on 1e400.
    digits, exponent = m.group(1), int(m.group(2) or 0)
    mantissa = Fraction(digits)
    if mantissa == 0:
        raise BadInput(f"{what} {raw!r} must be at least 1 byte")
    # mantissa >= 10**-decimals, so this bound keeps 10**exponent cheap and the answer exact.
    if exponent - len(digits.partition(".")[2]) > 19:
        raise BadInput(f"{what} {raw!r} is too large: sizes go up to {_MAX_SIZE} bytes")
    value = mantissa * 10**exponent * _UNITS[m.group(3).upper()]
    if value.denominator != 1:
        raise BadInput(f"{what} {raw!r} is not a whole number of bytes: use e.g. 1536 or 1.5K")
    if value > _MAX_SIZE:
        raise BadInput(f"{what} {raw!r} is too large: sizes go up to {_MAX_SIZE} bytes")
    return int(value)


MAX_LIST = 10_000  # items of a comma-separated list of sizes or counts


def _items(text: str, what: str, most: int, example: str) -> list[str]:
    """The items of a comma-separated list, counted before any is parsed."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise BadInput(f"{what} is empty: give comma-separated {example}")
    if len(parts) > most:
        raise BadInput(f"{what} lists {len(parts):,} items; the most is {most:,}: give fewer")
    return parts


def parse_size_list(text: str, what: str = "--sizes", most: int = MAX_LIST) -> list[int]:
    return [parse_size(p, what) for p in _items(text, what, most, "sizes, e.g. 1K,64K,4M")]


def parse_count_list(text: str, what: str, most: int = MAX_LIST) -> list[int]:
    """'1e6,5e7,5e8' -> element counts (bucket sizes), each as parse_count reads it."""
    return [parse_count(p, what) for p in _items(text, what, most, "element counts, e.g. 1e6,5e7,5e8")]


def counted(n: int, noun: str) -> str:
    """'1 point', '3 points': a count with its noun (regular plurals only)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def format_size(nbytes: int | float) -> str:
    """Human label with binary units: 8 B, 4 KiB, 1.5 MiB, 16 GiB."""
    n = float(nbytes)
    if n != n or n in (float("inf"), float("-inf")):
        return f"{n} B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        # round first, so 1048575 B reads 1.0 MiB rather than 1024.0 KiB
        if abs(round(n, 1)) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?|\d*\.\d+)(?:e(\d+))?\s*([KMBT]?)\s*$", re.IGNORECASE | re.ASCII)
_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def format_us(us: float | None) -> str:
    """A time in the unit a reader takes in at a glance, three figures: 287 us, 4.50 ms, 41.2 ms,
    356 ms, 1.20 s ("n/a" when unknown). The one time format of the tables and findings (tune,
    zero, replay, compare's replay lines, the straggler findings)."""
    if us is None or not math.isfinite(us):
        return "n/a"
    for scale, unit in ((1e6, "s"), (1e3, "ms")):
        if abs(us) >= scale:
            v = us / scale
            decimals = 2 if abs(v) < 10 else 1 if abs(v) < 100 else 0
            return f"{v:,.{decimals}f} {unit}"
    return f"{us:.0f} us"


def parse_count(text: str, what: str) -> int:
    """Decimal counts as people write model and bucket sizes: '1.3B', '125M', '5e8' -> elements."""
    raw = str(text)
    m = _COUNT.match(raw) if len(raw) <= 32 else None
    if not m:
        raise BadInput(f"{what} {raw!r} is not a count: use e.g. 5e8, 125M, 1.3B")
    digits, exponent = m.group(1), int(m.group(2) or 0)
    # As in parse_size: a nonzero mantissa is at least 10**-decimals, so past this bound the count is
    # beyond int64 whatever it is, and 10**exponent is never computed ('1e99999999' would take minutes).
    if Fraction(digits) == 0 or exponent - len(digits.partition(".")[2]) > 19:
        raise BadInput(f"{what} {raw!r} is out of range: use a count from 1 up to about 9e18")
    value = Fraction(digits) * 10 ** exponent * _COUNT_UNITS[m.group(3).upper()]
    if value < 1 or value > _MAX_SIZE:
        raise BadInput(f"{what} {raw!r} is out of range: use a count from 1 up to about 9e18")
    return int(value)


# Rates. Two ways of writing them meet here: tc's (`lab --rate 1gbit`: the token tc itself reads)
# and the way link speeds are quoted (`plot --line-rate 400Gbps`, 50GB/s). Decimal prefixes in
# both. A lowercase b is bits, an uppercase B bytes, as link speeds are written, so "mbps" is
# megabits here, where tc would read megaBYTES: tc-only text (tc=True) takes tc's bit units alone.
_RATE = re.compile(r"^\s*(?P<num>\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+-]?\d+))?\s*(?P<prefix>[kKmMgGtT]?)"
                   r"(?P<unit>(?i:bit)|bps|b/s|bits?/s|Bps|B/s|bytes?/s)\s*$", re.ASCII)
_TC_RATE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<prefix>[kmgt]?)bit$", re.IGNORECASE | re.ASCII)
_RATE_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BYTE_UNITS = ("Bps", "B/s", "byte/s", "bytes/s")
TC_EXAMPLES = "100mbit, 1gbit, 800mbit"


def parse_rate(text: str, what: str = "rate", tc: bool = False) -> float:
    """A rate in bits per second: '1gbit' and '1Gbps' -> 1e9, '50GB/s' -> 4e11.

    Bits: bit, kbit, mbit, gbit, tbit (tc's units, any case), Gbps, Gb/s, Gbit/s; bytes: GB/s,
    GBps. tc=True: only tc's bit units, written as tc reads them (the lab hands the text to tc).
    Raises BadInput naming `what` and the value for anything else, zero and infinity included.
    """
    raw = str(text)
    if tc:
        m = _TC_RATE.match(raw.strip()) if len(raw) <= 64 else None
        value = float(m.group("num")) * _RATE_PREFIX[m.group("prefix").lower()] if m else 0.0
        if value <= 0:
            bytes_hint = ("; tc reads 'bps' as bytes per second: write bits, e.g. 8gbit for 1gbps"
                          if raw.strip().lower().endswith("bps") else "")
            raise BadInput(f"{what} {raw!r} is not a tc rate: use e.g. {TC_EXAMPLES}{bytes_hint}")
        return value
    m = _RATE.match(raw) if len(raw) <= 64 else None
    if not m:
        raise BadInput(f"{what} {raw!r} is not a rate: give a number and a unit, "
                       "e.g. 400Gbps, 1gbit, 100000Mbps or 50GB/s")
    try:
        value = float(m.group("num")) * 10.0 ** int(m.group("exp") or 0) * _RATE_PREFIX[m.group("prefix").lower()]
    except OverflowError:
        value = math.inf
    if m.group("unit") in _BYTE_UNITS:
        value *= 8.0
    if not math.isfinite(value) or value <= 0:
        raise BadInput(f"{what} {raw!r} must be a positive, finite rate, e.g. 400Gbps or 1gbit")
    return value
