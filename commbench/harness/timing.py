"""Per-iteration timers (perf_counter; CUDA events; with --cuda-graph one captured graph of 20 calls a
point, timed per replay) and the adaptive iteration count (`StopRule`: warm-up share, precision target,
time budget).

CPU (gloo): perf_counter around each blocking call. GPU (NCCL): a pair of CUDA events around
each call, read after one synchronize, so the host never waits inside the loop. With
--cuda-graph (as nccl-tests -G): GRAPH_OPS calls captured once per point into one CUDA graph,
a pair of events around each replay, each sample a replay's time over GRAPH_OPS. The loops
below do nothing but call the op and store a number into a list allocated beforehand.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol
from collections.abc import Callable, Sequence

import torch

from commbench.core.options import GRAPH_OPS
from commbench.core.stats import median_ci_halfwidth


class Timer(Protocol):
    # Calls each sample stands for (1; GRAPH_OPS for a graph replay): an iteration's real cost is
    # its sample times this, which is what a time budget spends.
    @property
    def ops_per_sample(self) -> int: ...

    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        """Seconds per call, one entry per iteration (a call, or a replay of ops_per_sample calls)."""


class CpuTimer:
    ops_per_sample = 1

    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        out = [0.0] * iters
        clock = time.perf_counter
        for i in range(iters):
            t0 = clock()
            call()
            out[i] = clock() - t0
        return out


def _between_events(step: Callable[[], None], iters: int) -> list[float]:
    """Seconds of each of `iters` steps, each between its own pair of CUDA events, read after one
    synchronize at the end (the host never waits inside the loop)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


class CudaTimer:
    ops_per_sample = 1

    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        return _between_events(call, iters)


class CudaGraphTimer:
    """--cuda-graph: the first run of a new callable (a point's warm-up) calls it once eagerly on
    a side stream (NCCL connects, torch allocates), then captures `ops` calls into one graph;
    every iteration is one replay between its own pair of events. Only the last point's graph is
    kept, so graphs do not pile up over a sweep. Capture is thread-local, as nccl-tests' is: the
    process group's watchdog thread keeps querying its events meanwhile."""

    def __init__(self, ops: int = GRAPH_OPS):
        self.ops_per_sample = ops
        self._call: Callable[[], None] | None = None
        self._graph: torch.cuda.CUDAGraph | None = None

    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        replays = _between_events(self._graph_of(call).replay, iters)
        return [t / self.ops_per_sample for t in replays]

    def _graph_of(self, call: Callable[[], None]) -> torch.cuda.CUDAGraph:
        # _call and _graph are set together; `==`, not `is`: a bound method is made anew each time
        if self._graph is not None and call == self._call:
            return self._graph
        self._call, self._graph = None, None  # the last point's graph and its memory go first
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                for _ in range(self.ops_per_sample):
                    call()
        except RuntimeError as exc:
            raise GraphCaptureFailed(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        self._call, self._graph = call, graph
        return graph


class GraphCaptureFailed(RuntimeError):
    """torch could not capture the collective in a CUDA graph (the session names the point)."""


def timer_for(device: torch.device, graph_ops: int = 0) -> Timer:
    """perf_counter on CPU; CUDA events on a GPU, around each call or (graph_ops) each replay."""
    if device.type != "cuda":
        return CpuTimer()
    return CudaGraphTimer(graph_ops) if graph_ops else CudaTimer()


def adaptive_iters(seconds_per_iter: float, time_budget: float, min_iters: int, max_iters: int) -> int:
    """Enough iterations to fill the time budget, within [min_iters, max_iters]."""
    if seconds_per_iter <= 0:
        return max_iters
    return max(min_iters, min(max_iters, math.ceil(time_budget / seconds_per_iter)))


WARMUP_SHARE = 0.25  # of the time budget: the most warm-up may take beyond its first iteration


@dataclass(frozen=True)
class StopRule:
    """When the adaptive count stops: once the median is known to `precision` (the 95% CI
    half-width of the median over the median, from order statistics: stats.median_ci_halfwidth),
    or the timed iterations have used `time_budget` seconds, or at `max_iters`; never before
    `min_iters`. precision 0 never stops early (fill the budget)."""

    time_budget: float
    min_iters: int
    max_iters: int
    precision: float

    def warmups(self, pace_s: float, warmup: int) -> int:
        """Warm-up iterations in all, up to `warmup`: the first two always run (where `warmup`
        allows), then more while those after the first fit in WARMUP_SHARE of the time budget at
        `pace_s`, the faster of the first two (maxima over ranks), so a slow first call, as the
        first point of a run often has, or one stall sets no pace. Two warm-ups are enough for a
        large message (measured: the first timed iteration after even one is not slower than the
        median, benchmarks/README.md), while five of them at 64 MiB cost half of its timed loop."""
        if pace_s <= 0:
            return warmup
        fit = 1 + math.floor(WARMUP_SHARE * self.time_budget / pace_s)
        return max(min(warmup, 2), min(warmup, fit))

    def next_batch(self, slowest: Sequence[float]) -> int:
        """How many iterations to time next (0: stop), from the per-iteration maxima over ranks so
        far. Every rank holds the same maxima, so every rank takes the same decision without
        another collective. Batches grow toward the count the CI predicts (its half-width falls as
        1/sqrt(n)), so a point checks its precision a handful of times, never per iteration."""
        n = len(slowest)
        if n >= self.max_iters:
            return 0
        if n < self.min_iters:
            return self.min_iters - n
        spent = math.fsum(slowest)
        left = self.time_budget - spent
        if left <= 0:
            return 0
        width = median_ci_halfwidth(slowest) if self.precision > 0 else math.inf
        if width <= self.precision:
            return 0
        # the mean, not the median: a CPU's stalls (a rank descheduled for a 4 ms tick) are part of
        # what the next batch costs, and the median's pace overran a 2 s budget by 30% at 64 MiB
        per_iter = spent / n
        affordable = self.max_iters - n if per_iter <= 0 else math.ceil(left / per_iter)
        if self.precision <= 0:
            wanted = affordable
        elif math.isfinite(width):
            wanted = math.ceil(n * (width / self.precision) ** 2 * 1.2) - n  # 20% over the prediction
            wanted = min(max(wanted, math.ceil(n / 4)), 3 * n)  # grow by 25%..300% per check
        else:
            wanted = n  # too few for an interval yet (under 6 at 95%): double
        return max(1, min(wanted, affordable, self.max_iters - n))
