"""Will the largest point fit? Estimated before anything is allocated."""

from __future__ import annotations

import psutil
import torch

from commbench.harness.data import check_bytes
from commbench.core.vocab import get_dtype
from commbench.core.errors import BadInput
from commbench.harness.plan import SweepPlan
from commbench.core.units import format_size


def bytes_per_rank(plan: SweepPlan, world: int) -> int:
    itemsize = get_dtype(plan.dtype).itemsize
    need = 0
    for collective in plan.entries():
        for layout, _ in plan.points(collective, world):
            buffers = (layout.send_numel + layout.recv_numel) * itemsize
            scratch = check_bytes(max(layout.send_numel, layout.recv_numel)) if plan.check else 0
            need = max(need, buffers + scratch)
    return need


def check_fits(plan: SweepPlan, world: int, ranks_here: int, device: torch.device) -> None:
    need = bytes_per_rank(plan, world)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        have, where, need_total = free, f"GPU {device.index}", need
    else:
        have, where, need_total = psutil.virtual_memory().available, "this host", need * ranks_here
    if need_total > 0.9 * have:
        hint = " or --no-check" if plan.check else ""
        raise BadInput(f"the largest point needs about {format_size(need_total)} on {where} "
                       f"({ranks_here} rank(s)) but only {format_size(have)} is free: "
                       f"lower --max-bytes{hint}")
