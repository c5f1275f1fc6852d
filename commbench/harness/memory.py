"""Will it fit? The memory a run needs, estimated before anything is allocated: the largest point
of a sweep here; the buffers of a ZeRO step, a bucket reduction and the DeepSpeed engine's model
in their workloads (workloads/zero.py, workloads/buckets.py), all checked by `check_need`."""

from __future__ import annotations

import psutil
import torch

from commbench.harness.data import check_bytes
from commbench.core.vocab import get_dtype
from commbench.core.errors import BadInput
from commbench.harness.plan import SweepPlan
from commbench.core.units import format_size

HEADROOM = 0.9  # of the free memory a run may plan to use


def bytes_per_rank(plan: SweepPlan, world: int) -> int:
    itemsize = get_dtype(plan.dtype).itemsize
    need = 0
    for collective in plan.entries():
        for layout, _ in plan.points(collective, world):
            buffers = (layout.send_numel + layout.recv_numel) * itemsize
            scratch = check_bytes(max(layout.send_numel, layout.recv_numel)) if plan.check else 0
            need = max(need, buffers + scratch)
    return need


def free_bytes(device: torch.device) -> tuple[int, str]:
    """The memory free where the ranks allocate: the GPU's, or this host's."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0], f"GPU {device.index}"
    return psutil.virtual_memory().available, "this host"


def check_need(need_per_rank: int, ranks_here: int, device: torch.device, what: str, fix: str) -> None:
    """One line of bad input when `what` (each rank's `need_per_rank` bytes; on CPU, every local
    rank's together) does not fit in the free memory."""
    have, where = free_bytes(device)
    need_total = need_per_rank if device.type == "cuda" else need_per_rank * ranks_here
    if need_total > HEADROOM * have:
        raise BadInput(f"{what} needs about {format_size(need_total)} on {where} "
                       f"({ranks_here} rank(s)) but only {format_size(have)} is free: {fix}")


def check_fits(plan: SweepPlan, world: int, ranks_here: int, device: torch.device) -> None:
    hint = " or --no-check" if plan.check else ""
    check_need(bytes_per_rank(plan, world), ranks_here, device, "the largest point", f"lower --max-bytes{hint}")
