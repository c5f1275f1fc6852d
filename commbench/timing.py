"""Per-iteration timers and the adaptive iteration count.

CPU (gloo): perf_counter around each blocking call. GPU (NCCL): a pair of CUDA events around
each call, read after one synchronize, so the host never waits inside the loop. The loops
below do nothing but call the op and store a number into a list allocated beforehand.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol

import torch


class Timer(Protocol):
    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        """Seconds per iteration, one entry per call."""


class CpuTimer:
    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        out = [0.0] * iters
        clock = time.perf_counter
        for i in range(iters):
            t0 = clock()
            call()
            out[i] = clock() - t0
        return out


class CudaTimer:
    def run(self, call: Callable[[], None], iters: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            call()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def timer_for(device: torch.device) -> Timer:
    return CudaTimer() if device.type == "cuda" else CpuTimer()


def adaptive_iters(seconds_per_iter: float, time_budget: float, min_iters: int, max_iters: int) -> int:
    """Enough iterations to fill the time budget, within [min_iters, max_iters]."""
    if seconds_per_iter <= 0:
        return max_iters
    return max(min_iters, min(max_iters, math.ceil(time_budget / seconds_per_iter)))
