"""Test-only fault switches, read from COMMBENCH_TEST_FAULT (never set in normal use).

    COMMBENCH_TEST_FAULT=corrupt:R     rank R corrupts one element of its checked output
"""

from __future__ import annotations

import os


def _parse() -> dict[str, str]:
    spec = os.environ.get("COMMBENCH_TEST_FAULT", "")
    out = {}
    for part in filter(None, spec.split(",")):
        name, _, arg = part.partition(":")
        out[name.strip()] = arg.strip()
    return out


def corrupts_output(rank: int) -> bool:
    arg = _parse().get("corrupt")
    return arg is not None and arg.isdigit() and int(arg) == rank
