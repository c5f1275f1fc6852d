"""The arithmetic of a printed nccl-tests row, checked before it is imported: its count against its
size and type, and its busbw against its algbw and the collective's bus factor for its rank count,
each within the precision nccl-tests printed. A row that fails either is not what nccl-tests printed
(a log edited by hand, columns swapped, lines spliced from two runs).

What nccl-tests prints (src/common.cu setupArgs and writeBenchmarkLinePreamble, the *GetCollByteCount
and *GetBw functions of src/*.cu; commbench's copy is core/vocab.py): the size is the larger of a
rank's send and receive buffers and the count is `paramcount`, so size = count x element size where
the count is the whole buffer, and count x element size x ranks where it is one rank's chunk (vocab's
`per_rank_count`; nccl-tests since 2.x rounds that chunk to 16 bytes, older builds did not, so that
is not checked). busbw = algbw x the bus factor of the rank count, each printed with `%6.2f` (fewer
decimals when wider: getFloatStr), so they agree within half a unit of the last digit of each.
"""

from __future__ import annotations

import bisect
import functools
import math

from commbench.core import vocab
from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.model import Half

# nccl-tests types commbench does not measure (src/common.cu wordSize); the others are vocab's.
OTHER_TYPE_BYTES = {"uint32": 4, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1}
MAX_WORLD = 4096  # the rank counts tried when a log does not say how many ranks ran (records.py's too)
_REL = 1e-9  # a float's own error, far below any printed digit


def half_unit(token: str) -> float:
    """Half a unit of the last digit `token` was printed with: '12.34' 0.005, '1234.5' 0.05,
    '1.2e+05' 5000; 0.005 for what is not a plain printed number (a -J document's full value)."""
    text = token.strip().lower()
    mantissa, _, exp = text.partition("e")
    decimals = len(mantissa.partition(".")[2]) if "." in mantissa else 0
    try:
        power = int(exp) if exp else 0
    except ValueError:
        return 0.005
    # '1e+400' is no number nccl-tests prints (it parses to inf, which the row's checks refuse);
    # beyond a float's range the printed precision says nothing
    return 0.5 * 10.0 ** max(-400, min(300, power - decimals))


def element_bytes(dtype: str) -> int | None:
    """The bytes of one element of a type as nccl-tests names it, None for one it does not know."""
    if dtype.lower() in OTHER_TYPE_BYTES:
        return OTHER_TYPE_BYTES[dtype.lower()]
    try:
        return vocab.get_dtype(dtype).itemsize
    except BadInput:
        return None


def _modelled(spec: vocab.CollectiveSpec) -> bool:
    """Whether the collective's counts follow from size and ranks (not alltoallv's run-time pattern)."""
    try:
        spec.for_size(1024, 4, 2)
    except ValueError:
        return False
    return True


def count_problem(h: Half, collective: str, world: int | None) -> str | None:
    """What is wrong with the row's count for its size and type, or None."""
    spec, item = vocab.known(collective), element_bytes(h.dtype)
    if spec is None or item is None or not _modelled(spec) or h.size == 0:
        return None
    unit = h.count * item  # one count's bytes
    what = f"count {h.count} of {h.dtype} ({item} B each)"
    if not spec.per_rank_count:
        if unit == h.size:
            return None
        right = f"count {h.size // item}" if h.size % item == 0 else "no count (it is not a whole number of elements)"
        return (f"size {h.size} B with {what}: {collective} prints size = count x element size = {unit} B; "
                f"this size has {right}")
    if world is not None:
        if unit * world == h.size:
            return None
        right = f"count {h.size // world // item}" if h.size % (item * world) == 0 else "no count"
        return (f"size {h.size} B with {what} on {world} ranks: {collective} prints size = count x element size x "
                f"ranks = {unit * world} B; this size has {right}")
    if unit and h.size % unit == 0 and h.size // unit <= MAX_WORLD:
        return None
    return (f"size {h.size} B with {what}: {collective} prints size = count x element size x ranks, a whole "
            f"multiple of {unit} B (at most {MAX_WORLD} ranks)")


def algbw_problem(h: Half, collective: str) -> str | None:
    """What is wrong with the row's algbw for its size and time, or None: nccl-tests' algbw is the
    size over the time it prints (each collective's *GetBw: count x element size [x ranks] / time),
    both rounded as printed; before 2.0 the gather family's was (ranks - 1) of its ranks' chunks
    over the time (with busbw = algbw). Not judged under -C (the time printed is CPU time, the
    bandwidths still of the wall time), for hypercube and alltoallv (other bytes: (n-1) chunks, the
    largest rank's), nor where the time or algbw was printed as 0."""
    t, alg, spec = h.time, h.algbw, vocab.known(collective)
    if h.cputime or not t or not alg or not h.size or not math.isfinite(t) or not math.isfinite(alg):
        return None
    if spec is None or spec not in vocab.COLLECTIVES:  # hypercube's and alltoallv's algbw are of other bytes
        return None
    tol_t = h.time_unit if h.time_unit is not None else 0.005
    tol_alg = h.alg_unit if h.alg_unit is not None else 0.005
    low = (alg - tol_alg) * (t - tol_t) * 1e3 / h.size - _REL  # algbw x time / size: 1 as nccl-tests prints
    high = (alg + tol_alg) * (t + tol_t) * 1e3 / h.size + _REL
    if low <= 1.0 <= high:
        return None
    legacy = spec.per_rank_count and busbw_problem(h, collective, None) is None \
        and abs((h.busbw or 0) - alg) <= tol_alg + (h.bus_unit or 0.005)
    factors = _factors(collective)
    at = bisect.bisect_left(factors, low)  # the least factor (ranks - 1) / ranks at or above `low`
    if legacy and at < len(factors) and factors[at] <= high:
        return None
    return f"algbw {alg:g} GB/s is not size {h.size} B / time {t:g} us = {h.size / t / 1e3:.4g} GB/s"


def busbw_problem(h: Half, collective: str, world: int | None) -> str | None:
    """What is wrong with the row's busbw for its algbw, collective and rank count, or None. A
    bandwidth printed as 0 (below the print precision, or a build that prints none) is not judged."""
    spec = vocab.known(collective)
    alg, bus = h.algbw, h.busbw
    if spec is None or spec not in vocab.COLLECTIVES or not alg or not bus:
        return None
    tol_alg = h.alg_unit if h.alg_unit is not None else 0.005
    tol_bus = h.bus_unit if h.bus_unit is not None else 0.005

    def fits(factor: float) -> bool:
        return abs(bus - alg * factor) <= tol_bus + factor * tol_alg + _REL * max(alg, bus)

    # nccl-tests before 2.0 printed the gather/scatter family with algbw over (ranks - 1) chunks and
    # busbw = algbw (factor 1): a legacy log's rows fit that too.
    if spec.per_rank_count and fits(1.0):
        return None
    if world is not None:
        factor = spec.busbw_factor(world)
        if fits(factor):
            return None
        swapped = abs(alg - bus * factor) <= tol_alg + factor * tol_bus + _REL * max(alg, bus)
        return (f"busbw {bus:g} is not algbw {alg:g} x {factor:.4g} (the bus factor of {collective} on {world} ranks) "
                f"= {alg * factor:.2f}" + (": algbw and busbw are swapped" if swapped else ""))
    factors = _factors(collective)
    lo = (bus - tol_bus) / (alg + tol_alg) - _REL
    hi = (bus + tol_bus) / max(alg - tol_alg, 1e-300) + _REL
    at = bisect.bisect_left(factors, lo)
    if at < len(factors) and factors[at] <= hi:
        return None
    return (f"busbw {bus:g} / algbw {alg:g} = {bus / alg:.4g} is the bus factor of {collective} on no number of "
            f"ranks" + (": algbw and busbw are swapped?" if bus < alg else ""))


def world_range(h: Half, collective: str) -> tuple[int, int] | None:
    """The rank counts (lowest, highest) whose bus factor makes the row's busbw of its algbw within
    the precision each was printed with; None when the row says nothing of the rank count (a
    collective whose factor is the same on every count, an algbw printed as 0, a busbw printed as
    0 beside an algbw under 1 GB/s). The factors grow with the count, so the fits are one run."""
    by_world = _by_world(collective)
    alg, bus = h.algbw, h.busbw
    if len(set(by_world[1:])) < 2 or not alg or bus is None or (not bus and alg < 1.0):
        return None
    tol_alg = h.alg_unit if h.alg_unit is not None else 0.005
    tol_bus = h.bus_unit if h.bus_unit is not None else 0.005
    lo = (bus - tol_bus) / (alg + tol_alg) - _REL
    hi = (bus + tol_bus) / max(alg - tol_alg, 1e-300) + _REL
    first, last = bisect.bisect_left(by_world, lo), bisect.bisect_right(by_world, hi)
    return (first + 1, last) if first < last else (0, 0)  # (0, 0): no count fits


@functools.cache
def _by_world(collective: str) -> list[float]:
    """The bus factors of `collective` on 1..MAX_WORLD ranks, in the order of the count."""
    spec = vocab.known(collective)
    return [spec.busbw_factor(n) for n in range(1, MAX_WORLD + 1)] if spec else []


@functools.cache
def _factors(collective: str) -> list[float]:
    """The bus factors of `collective` on 1..MAX_WORLD ranks, sorted."""
    spec = vocab.known(collective)
    return sorted({spec.busbw_factor(n) for n in range(1, MAX_WORLD + 1)}) if spec else []


class Refusals:
    """The rows a log's arithmetic refused, by kind: how many, their lines, the first one's words."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[tuple[int, str]]] = {}
        self.rows = 0  # every row judged

    def judge(self, h: Half, collective: str, world: int | None) -> None:
        self.rows += 1
        for kind, problem in (("count", count_problem(h, collective, world)),
                              ("busbw", busbw_problem(h, collective, world)), ("algbw", algbw_problem(h, collective))):
            if problem is not None:
                self.by_kind.setdefault(kind, []).append((h.line, problem))

    def message(self, where: str, unit: str = "line") -> str | None:
        """One line naming the first refused row, its problem and how many rows failed; None if none."""
        if not self.by_kind:
            return None
        kind, found = next(iter(self.by_kind.items()))
        line, problem = found[0]
        lines = sorted({n for n, _ in found})
        shown = ", ".join(map(str, lines[:8])) + (f" and {len(lines) - 8} more" if len(lines) > 8 else "")
        others = "".join(f"; {len(v)} fail the {k} check" for k, v in self.by_kind.items() if k != kind)
        return (f"{where} {unit} {line}: {problem}; {len(found)} of {self.rows} half-rows fail this check "
                f"({unit}{'s' if len(lines) > 1 else ''} {shown}){others}: not the numbers nccl-tests printed "
                "(an edited log, swapped columns, lines spliced from two runs)")

    def raise_any(self, where: str, unit: str = "line") -> None:
        """Bad input (one line) when a row was refused: nothing of the log is imported."""
        text = self.message(where, unit)
        if text is not None:
            raise BadInput(f"{text}, so nothing was imported: import the log nccl-tests wrote, or delete those rows")
