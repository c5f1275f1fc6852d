"""The sweep plan: what to measure, as a typed, serialisable dataclass stored with results."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.core.vocab import Layout, chunk_elements, get_dtype
from commbench.core.errors import BadInput
from commbench.core.options import RunOptions
from commbench.core.settings import combinations, from_plan

if TYPE_CHECKING:  # torch: a plan is built and checked before torch is loaded, so bad flags fail fast
    from commbench.harness.collectives import Collective

PLACEMENTS = ("out", "in", "both")


MAX_POINTS = 10_000  # sizes in one sweep's grid (each is a point per collective and placement)
MAX_RUN_POINTS = 100_000  # rows of one run: sizes x collectives x placements x settings x repetitions


def _next(size: int, step_factor: float, step_bytes: int | None) -> int:
    nxt = int(size * step_factor) if step_factor > 1 else size + int(step_bytes or 0)
    return nxt if nxt > size else size + 1


def grid_length(min_bytes: int, max_bytes: int, step_factor: float, step_bytes: int | None) -> int:
    """The number of sizes size_grid would make, counted before any list is built: by arithmetic
    for -i steps, by walking the sizes (no list) for -f, stopping at MAX_POINTS + 1."""
    if step_factor == 1:
        return (max_bytes - min_bytes) // max(1, int(step_bytes or 1)) + 1
    n, size = 0, min_bytes
    while size <= max_bytes and n <= MAX_POINTS:
        n, size = n + 1, _next(size, step_factor, step_bytes)
    return n


def check_points(n: int, fix: str) -> None:
    """More than MAX_POINTS sizes is bad input (a walk stops counting at MAX_POINTS + 1)."""
    if n > MAX_POINTS:
        count = f"more than {MAX_POINTS:,}" if n == MAX_POINTS + 1 else f"{n:,}"
        raise BadInput(f"the size grid has {count} sizes; the most is {MAX_POINTS:,}: {fix}")


def size_grid(min_bytes: int, max_bytes: int, step_factor: float = 2.0, step_bytes: int | None = None) -> list[int]:
    """nccl-tests' loop: from -b up to -e, times -f (or plus -i when the factor is 1)."""
    if min_bytes > max_bytes:
        raise BadInput(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}: swap them or raise -e")
    if not math.isfinite(step_factor):
        raise BadInput(f"--step-factor {step_factor} is not a finite number: e.g. -f 2")
    if step_factor < 1 or (step_factor == 1 and not step_bytes):
        raise BadInput("--step-factor must be more than 1 (or 1 with --step-bytes): e.g. -f 2")
    check_points(grid_length(min_bytes, max_bytes, step_factor, step_bytes), "raise -i or -f, or narrow -b/-e")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(int(size))
        size = _next(size, step_factor, step_bytes)
    return sizes


@dataclass(frozen=True)
class Point:
    """One measured configuration: a collective at one real size and placement."""

    collective: str
    requested_bytes: int
    size_bytes: int  # what nccl-tests prints and commbench stores
    count: int
    in_place: bool


@dataclass
class SweepPlan(RunOptions):
    collectives: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # requested byte sizes, before nccl-tests rounding
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    placement: str = "both"

    def entries(self) -> list[Collective]:
        from commbench.harness.collectives import BY_NAME

        return [BY_NAME[c] for c in self.collectives]

    def placements_for(self, collective: Collective) -> list[bool]:
        """The in_place flags to run for one collective, in nccl-tests column order."""
        wanted = ["out", "in"] if self.placement == "both" else [self.placement]
        return [p == "in" for p in wanted if collective.supports(p)]

    def points(self, collective: Collective, world: int, rank: int = 0) -> list[tuple[Layout, list[Point]]]:
        """Every size of the grid, rounded as nccl-tests rounds it for `world` ranks and the plan's dtype.

        Sizes that round to zero elements, or to a size already in the list, are dropped so
        that each stored point is unique.
        """
        itemsize = get_dtype(self.dtype).itemsize
        seen: set[int] = set()
        out = []
        for requested in self.sizes:
            layout = collective.for_size(requested, itemsize, world, rank)
            size = layout.size_bytes(itemsize)
            if layout.send_numel == 0 or layout.recv_numel == 0 or size in seen:
                continue
            seen.add(size)
            pts = [Point(collective.name, requested, size, layout.count, ip) for ip in self.placements_for(collective)]
            out.append((layout, pts))
        return out


def validate(plan: SweepPlan, world: int) -> None:
    """Checks that need the world size; everything else is checked while parsing."""
    if world < 1:
        raise BadInput(f"world size {world} is not valid: run at least one rank")
    if not 0 <= plan.root < world:
        raise BadInput(f"--root {plan.root} is not a rank of this run (0..{world - 1}): pick a rank in range")
    if world < 2 and "sendrecv" in plan.collectives:
        raise BadInput("sendrecv needs at least 2 ranks: raise --nproc or leave sendrecv out")
    rows = plan.repetitions * max(1, len(combinations(from_plan(plan.axes)))) * len(plan.sizes) * sum(
        len(plan.placements_for(c)) for c in plan.entries())
    if rows > MAX_RUN_POINTS:
        raise BadInput(f"this sweep is {rows:,} points (sizes x collectives x placements x settings x --repetitions); "
                       f"the most is {MAX_RUN_POINTS:,}: fewer --repetitions, sizes or collectives")
    itemsize = get_dtype(plan.dtype).itemsize
    for collective in plan.entries():
        if not plan.placements_for(collective):
            raise BadInput(f"{collective.name} cannot run with placement {plan.placement!r}: "
                           f"use --placement {collective.placements[0]} or both")
        if not plan.points(collective, world):
            smallest = next(count * itemsize for count in range(1, chunk_elements(itemsize) * world + 1)
                            if collective.layout(count, itemsize, world, 0).recv_numel > 0
                            and collective.layout(count, itemsize, world, 0).send_numel > 0)
            raise BadInput(f"every size rounds to 0 elements for {collective.name} on {world} ranks: "
                           f"raise --max-bytes to at least {smallest}")
