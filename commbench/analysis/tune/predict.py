"""A measured curve as a model of the fabric: each collective's median time per op at any size
between the sizes a sweep measured (interpolated in log size and log time), at the world size
and dtype it was measured at, and a schedule's communication time per step from it.

Nothing is extrapolated: a size outside the measured range, another world size or dtype, or a
collective the sweep did not run is refused with one line naming the sweep that would cover it.
Placement: out-of-place where the sweep measured it (a ZeRO schedule's buffers are separate),
else what was measured.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.core import workloadspec
from commbench.analysis.points import pointtable
from commbench.core.errors import BadInput
from commbench.core.units import format_size
from commbench.core.vocab import get_dtype, resolve

if TYPE_CHECKING:
    import pandas as pd

# Workloads whose rows are one collective per size (a sweep, or nccl-tests imported)
CURVE_WORKLOADS = workloadspec.names(drawn_as=workloadspec.CURVE)


def _canonical(collective: str) -> str:
    entries = resolve(collective)
    return entries[0].name if len(entries) == 1 else collective


def flag_size(n: int) -> str:
    """Bytes as sweep's -b/-e read them: 8, 4K, 64M, 2G where whole, else the byte count."""
    for shift, unit in ((40, "T"), (30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _pow2_floor(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass
class Curve:
    # (collective, world, dtype) -> sorted [(size_bytes, median us)] of the chosen placement
    points: dict[tuple[str, int, str], list[tuple[int, float]]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def collectives(self) -> list[str]:
        return sorted({c for c, _, _ in self.points})

    def worlds(self, collective: str | None = None) -> list[int]:
        return sorted({w for c, w, _ in self.points if collective in (None, c)})

    def dtypes(self, collective: str, world: int) -> list[str]:
        return sorted({d for c, w, d in self.points if c == collective and w == world})

    def measured(self, collective: str, world: int, dtype: str) -> list[tuple[int, float]]:
        """The (size, median us) points time_us interpolates between; refused like time_us."""
        name, dt = _canonical(collective), get_dtype(dtype).name
        if name not in self.collectives():
            raise BadInput(f"the curve ({self._named()}) has no {name} rows: sweep it, e.g. "
                           f"commbench sweep --collective {name} -d {dt}, and pass that file to --curve")
        if world not in self.worlds(name):
            have = ", ".join(str(w) for w in self.worlds(name))
            raise BadInput(f"the curve's {name} was measured at {have} ranks, the schedule runs on {world}: "
                           f"sweep at {world} ranks (--nproc {world} or your launcher)")
        if dt not in self.dtypes(name, world):
            have = ", ".join(self.dtypes(name, world))
            raise BadInput(f"the curve's {name} at {world} ranks is {have}, the schedule's dtype is {dt}: "
                           f"sweep with -d {dt}")
        return self.points[(name, world, dt)]

    def time_us(self, collective: str, size_bytes: int, world: int, dtype: str) -> float:
        """Median time per op at `size_bytes`: the measured median at a measured size, else the
        straight line in log size / log time between the two measured sizes around it."""
        pts = self.measured(collective, world, dtype)
        sizes = [s for s, _ in pts]
        lo, hi = sizes[0], sizes[-1]
        if not lo <= size_bytes <= hi:
            name = _canonical(collective)
            b, e = min(lo, _pow2_floor(size_bytes)), max(hi, _pow2_ceil(size_bytes))
            raise BadInput(f"{name} of {format_size(size_bytes)} is outside the curve's measured "
                           f"{format_size(lo)}..{format_size(hi)} ({world} ranks, {get_dtype(dtype).name}): "
                           f"sweep --collective {name} -b {flag_size(b)} -e {flag_size(e)} covers it")
        i = bisect.bisect_left(sizes, size_bytes)
        if sizes[i] == size_bytes:
            return pts[i][1]
        (s0, t0), (s1, t1) = pts[i - 1], pts[i]
        w = (math.log(size_bytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))

    def _named(self) -> str:
        if len(self.sources) <= 2:
            return ", ".join(self.sources)
        return f"{self.sources[0]} and {len(self.sources) - 1} more"


def curve_from_frame(frame: pd.DataFrame, sources: list[str]) -> Curve:
    """Rows of sweeps in memory -> a Curve (load_curve's, over a frame)."""
    return _curve(pointtable.frame_source(frame, "curve"), [str(s) for s in sources])


def load_curve(paths: list[str]) -> Curve:
    """The curve of one or more sweep results files, aggregated where they lie."""
    if not paths:
        raise BadInput("--curve needs a results file: pass the output of `commbench sweep`")
    return _curve(pointtable.open_source(paths), [str(p) for p in paths])


def _curve(source: pointtable.Source, sources: list[str]) -> Curve:
    """The median time over repetitions and files per point (analysis/points/pointtable.py, curve_points),
    out-of-place rows where a collective has them at that world size and dtype, else its in-place
    rows."""
    named = ", ".join(sources)
    settings, points = curve_points(source, CURVE_WORKLOADS)
    if not points:
        raise BadInput(f"{named} hold(s) no sweep rows: pass the results of `commbench sweep` "
                       "(or `commbench nccl-tests import`) to --curve")
    if len(settings) > 1:
        raise BadInput(f"{named} hold(s) sweeps of several settings ({', '.join(sorted(settings))}): "
                       "pass the sweep of one setting to --curve")
    by_line: dict[tuple, dict[bool, list[tuple[int, float]]]] = {}
    for coll, world, dtype, in_place, size, time_us in points:
        by_line.setdefault((str(coll), int(world), str(dtype)), {}).setdefault(bool(in_place), []).append(
            (int(size), float(time_us)))
    curve = Curve(sources=list(sources))
    for key in sorted(by_line):
        placed = by_line[key]
        curve.points[key] = sorted(placed.get(False) or placed[True])
    return curve


def curve_points(source: pointtable.Source, workloads: Sequence[str]) -> tuple[list[str], list[tuple]]:
    """(the settings the rows hold, [(collective, world_size, dtype, in_place, size_bytes, median
    time_us)]): the rows of `workloads` (or without one) measured (no failed status) at a positive
    size and time, the median over every repetition and file of a point (predict's curve)."""
    q = pointtable.Query(source, "curve")
    has = source.columns
    col = {n: (pointtable.quote(n) if n in has else "NULL")
           for n in ("workload", "status", "settings", "in_place", "dtype", "world_size")}
    kept = " AND ".join([
        f"({col['workload']} IS NULL OR {col['workload']} IN ({', '.join(repr(w) for w in workloads)}))",
        f"({col['status']} IS NULL OR {col['status']} = 'ok')",
        "coalesce(time_us > 0 AND size_bytes > 0, false)",
        f"collective IS NOT NULL AND {col['world_size']} IS NOT NULL AND {col['dtype']} IS NOT NULL"])  # all three
    if "time_us" not in has:
        return [], []
    settings = q.run(f"SELECT DISTINCT coalesce(CAST({col['settings']} AS VARCHAR), '') AS s FROM rows WHERE {kept}")
    got = q.run(f"SELECT collective, {col['world_size']} AS world_size, {col['dtype']} AS dtype, "
                f"coalesce(CAST({col['in_place']} AS BOOLEAN), false) AS in_place, size_bytes, "
                f"median(CAST(time_us AS DOUBLE)) AS t FROM rows WHERE {kept} GROUP BY ALL")
    points = list(zip(*[got.column(n).to_pylist() for n in ("collective", "world_size", "dtype", "in_place",
                                                            "size_bytes", "t")])) if got.num_rows else []
    return settings.column("s").to_pylist(), points


def predict_us(curve: Curve, comms: list[tuple[str, int, int]], world: int, dtype: str) -> float:
    """A step's communication time: each (collective, bytes per call, calls per step) term's
    time per call from the curve, times its calls, summed (the calls issued one after another)."""
    return sum(curve.time_us(op, size, world, dtype) * calls for op, size, calls in comms if calls)
