"""A `commbench buckets` run drawn in its user's units.

The user gave bucket sizes in elements (`--bucket-size 1e5,1e6`, as DeepSpeed's
reduce_bucket_size counts them), and each row's time is one whole step reduced in buckets of that
size. So a figure of buckets lines only reads "vs bucket size", ticks the measured bucket sizes in
elements with their bytes below, and labels a time axis per step, not per operation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

from commbench.analysis.tune.zerogrid import bucket_text
from commbench.core.errors import BadInput
from commbench.core.units import format_size
from commbench.core.vocab import get_dtype

if TYPE_CHECKING:
    from matplotlib.axes import Axes

TIME_LABEL = "Time per step (µs)"
MAX_TICKS = 10  # measured sizes labelled one by one up to this many; decades of elements beyond


def units(lines: Sequence) -> tuple[str, int] | None:
    """(dtype, bytes per element) of buckets lines that share one known dtype; None otherwise (the
    axis then stays in bytes: elements of two dtypes are not one scale)."""
    dtypes = {str(ln.key["dtype"]) for ln in lines}
    if len(dtypes) != 1:
        return None
    name = dtypes.pop()
    try:
        return name, get_dtype(name).itemsize
    except BadInput:  # a dtype name this commbench does not know (a foreign file)
        return None


def bucket_axis(ax: Axes, dtype_units: tuple[str, int]) -> None:
    """The x axis of a buckets figure: bucket sizes in elements, their bytes below."""
    import math

    from matplotlib.ticker import NullLocator

    name, itemsize = dtype_units
    measured = sorted({float(x) for line in ax.get_lines() for x in cast("Iterable[float]", line.get_xdata()) if x > 0})
    if len(measured) > MAX_TICKS:
        lo, hi = (math.floor(math.log10(v / itemsize)) for v in (measured[0], measured[-1]))
        measured = [10.0 ** k * itemsize for k in range(lo, hi + 2)
                    if measured[0] <= 10.0 ** k * itemsize <= measured[-1]] or measured[:1]
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(measured, [f"{bucket_text(round(b / itemsize))}\n({format_size(b)})" for b in measured])
    for t in ax.get_xticklabels():
        t.set_rotation(0)
        t.set_horizontalalignment("center")
    ax.set_xlabel(f"Bucket size in elements (reduce_bucket_size; {name} bytes below): each point is one step's "
                  "gradients reduced in buckets of this size")
