"""The world size of nccl-tests rows whose log does not print it whole: no Rank lines at all, or
the tail of a log whose first Rank lines were cut (as users paste it). The rows' busbw/algbw ratio
is the collective's bus factor of the rank count (2(n-1)/n for all_reduce, (n-1)/n for the gather
family; nccl-tests' doc/PERFORMANCE.md), and a Rank line it does show says the count is above that
rank's number; the two must agree, and the answer says how it was found, in one line."""

from __future__ import annotations

from dataclasses import dataclass

from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.arith import MAX_WORLD, world_range
from commbench.integrations.nccl_tests.model import Half


@dataclass(frozen=True)
class Found:
    world: int | None
    note: str | None  # the one line saying how (or that it could not be told); None: nothing to say


def infer_world(collective: str, halves: list[Half], shown: tuple[int, int] | None, where: str) -> Found:
    """The rank count every row's busbw/algbw fits, above the highest rank `shown` (lowest, highest
    rank number of cut Rank lines; None: the log has none). BadInput when the ratio and the rank
    numbers disagree (a rank past the count every row gives)."""
    lo, hi, told = 1, MAX_WORLD, False
    for h in halves:
        fits = world_range(h, collective)
        if fits is not None:
            lo, hi, told = max(lo, fits[0]), min(hi, fits[1]), True
    if shown is None:  # no Rank lines: the ratio's count when every row gives the same, else unknown
        return Found(lo if told and lo == hi else None, None)
    if told and lo > hi:  # the rows themselves fit no one rank count: left unknown, as without Rank lines
        return Found(None, f"world size unknown: the busbw/algbw ratios of its rows fit no one rank count of "
                           f"{collective}" + _cut(shown))
    floor = shown[1] + 1
    if told and hi < floor:
        raise BadInput(f"{where}: its rows' busbw/algbw ratio says {_counts(lo, hi)} of {collective}, but it shows "
                       f"rank {shown[1]}: not the numbers nccl-tests printed (lines spliced from two runs?), so "
                       "nothing was imported")
    lo = max(lo, floor)
    if told and lo == hi:
        return Found(lo, f"world size {lo} from the busbw/algbw ratio" + _cut(shown, ", which agree" * (lo == floor)))
    if not told or lo == floor:  # the ratio does not tell, or allows the count the highest rank gives
        return Found(floor, f"world size {floor} from the highest rank number it shows" + _cut(shown)
                     + ("; the busbw/algbw ratio agrees" if told else "; the busbw/algbw ratio does not tell"))
    return Found(None, f"world size unknown: {_counts(lo, hi)} fit the busbw/algbw ratio" + _cut(shown))


def _cut(shown: tuple[int, int] | None, after: str = "") -> str:
    return f": the log's rank lines are cut (it shows ranks {shown[0]}..{shown[1]}{after})" if shown else ""


def _counts(lo: int, hi: int) -> str:
    return f"{lo} ranks" if lo == hi else f"{lo} to {hi} ranks"
