"""Test-only fault switches, read from COMMBENCH_TEST_FAULT (never set in normal use).

    COMMBENCH_TEST_FAULT=corrupt:R     rank R corrupts one element of its checked output
    COMMBENCH_TEST_FAULT=delay:R:MS    rank R sleeps MS milliseconds before each timed call of the
                                       collective, as a straggler would: the other ranks wait for
                                       it inside their timed calls (tests/integration/test_stragglers.py);
                                       R+R+...: several ranks, e.g. all ranks of one host (a slow host)

Several switches: comma-separated, e.g. corrupt:1,delay:2:20.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from collections.abc import Callable

from commbench.core.errors import BadInput
from commbench.harness.timing import Timer


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


def delay_s(rank: int) -> float:
    """Seconds `rank` sleeps before each timed call (delay:R:MS or delay:R+R:MS); 0.0 for every other rank."""
    arg = _parse().get("delay")
    if arg is None:
        return 0.0
    who, _, ms = arg.partition(":")
    try:
        targets, seconds = [int(r) for r in who.split("+")], float(ms) / 1e3
    except ValueError:
        targets, seconds = [-1], -1.0
    if min(targets) < 0 or not seconds >= 0:
        raise BadInput(f"COMMBENCH_TEST_FAULT delay:{arg} is not delay:RANK:MILLISECONDS: e.g. delay:2:20, "
                       "or delay:2+3:20 for two ranks")
    return seconds if rank in targets else 0.0


@dataclass
class LateTimer:
    """Test-only: a timer that sleeps before each call, outside the span it times. The rank
    reaches the collective late, as a straggler does, and the other ranks wait for it inside
    their own timed calls. Warm-up iterations are late too, as they would be for a real one."""

    inner: Timer
    delay_s: float

    @property
    def ops_per_sample(self) -> int:
        return self.inner.ops_per_sample

    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        out: list[float] = []
        for _ in range(iters):
            time.sleep(self.delay_s)
            out += self.inner.run(call, 1)
        return out


def late_timer(timer: Timer, rank: int) -> Timer:
    """`timer` itself unless COMMBENCH_TEST_FAULT delays `rank`: read once, before anything is
    timed, so the timed loop of every other run is exactly the timer's own."""
    delay = delay_s(rank)
    return LateTimer(timer, delay) if delay > 0 else timer
