"""The values one printed nccl-tests row can hold, checked as it is read, before its arithmetic
(arith.py): a type and a reduction nccl-tests names (src/common.cu test_typenames, test_opnames), a
time and bandwidths it can print (util.cu writeBenchmarkLineBody: size / time, so a time of nan, a
run of no iterations, only beside bandwidths of nan, and no infinite bandwidth beside a time), no
busbw past any interconnect, a count of 0 beside a size of 0. A bandwidth of nan beside a time is
recomputed from them (records.py), as one printed as 0.00 is.

A value nccl-tests cannot print refuses the log: one line naming the row and the field (BadInput).
A row it does print that commbench does not keep (size 0, a time of nan or printed as 0) is left
out: `keep` says why, and the importer names such rows in one warning per reason."""

from __future__ import annotations

import math

from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.arith import element_bytes
from commbench.integrations.nccl_tests.model import Half

# What nccl-tests prints in the redop column (mulsum: ncclRedOpCreatePreMulSum; none: no reduction).
PRINTED_OPS = ("sum", "prod", "max", "min", "avg", "mulsum", "none")
# busbw past this is no link of any machine (NVLink 5 is 1,800 GB/s a GPU); nccl-tests prints one
# above 999,999 as '1e+06', whose last digit says nothing, so the bound is what judges it.
MAX_BUSBW_GBPS = 100_000.0

# Why a row nccl-tests prints is left out (the import summary's "N half-rows ... skipped").
SIZE_0 = "of size 0"
NO_TIME = "without a time"
WHY = {SIZE_0: "nccl-tests prints them (-b 0, the gather family's smallest sizes); commbench keeps no row of "
               "zero bytes",
       NO_TIME: "a time of nan (a run of no iterations) or printed as 0 measures nothing"}


def keep(h: Half, at: str) -> str | None:
    """None for a row to keep; the reason (SIZE_0, NO_TIME) for one nccl-tests prints but commbench
    leaves out; BadInput naming `at` (the file and line) and the field for a value it cannot print."""
    if element_bytes(h.dtype) is None:
        raise BadInput(f"{at}: type {h.dtype[:40]!r} is not a data type nccl-tests prints (int8, uint8, int32, "
                       "uint32, int64, uint64, half, float, double, bfloat16, f8e4m3, f8e5m2)")
    if h.op is not None and h.op.lower() not in PRINTED_OPS:
        raise BadInput(f"{at}: redop {h.op[:40]!r} is not a reduction nccl-tests prints ({', '.join(PRINTED_OPS)})")
    if h.size == 0 and h.count != 0:
        raise BadInput(f"{at}: count {h.count} with size 0 B: nccl-tests prints size = count x element size, so a "
                       "size of 0 has count 0")
    _bandwidths(h, at)
    if h.size == 0:
        return SIZE_0
    if h.time is None or h.time == 0:
        return NO_TIME
    return None


def _bandwidths(h: Half, at: str) -> None:
    """The time and bandwidths of one half as nccl-tests computes them: algbw = size / time."""
    t = h.time
    if t is not None and math.isinf(t):
        raise BadInput(f"{at}: time {t:g} us: a finite time of 0 or more was expected")
    for name, bw in (("algbw", h.algbw), ("busbw", h.busbw)):
        if t is None and bw is not None:
            raise BadInput(f"{at}: time nan beside {name} {bw:g}: nccl-tests prints a time of nan only for a run of no "
                           f"iterations, whose {name} is nan too")
        if t and bw is not None and math.isinf(bw):
            raise BadInput(f"{at}: {name} {bw:g} beside time {t:g} us: {name} is size / time, finite for any time "
                           "above 0")
    if h.busbw is not None and math.isfinite(h.busbw) and h.busbw > MAX_BUSBW_GBPS:
        raise BadInput(f"{at}: busbw {h.busbw:g} GB/s: at most {MAX_BUSBW_GBPS:,.0f} GB/s was expected, more than "
                       "any interconnect carries")
