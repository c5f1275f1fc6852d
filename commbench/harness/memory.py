"""Will it fit? The memory a run needs, estimated before anything is allocated: the largest point
of a sweep here; the buffers of a ZeRO step, a bucket reduction and the DeepSpeed engine's model
in their workloads (workloads/zero.py, workloads/buckets.py), all checked by `check_need`.

On a GPU the bound is the GPU's free memory. On CPU it is the tightest of the host's free memory,
the room its cgroup leaves (a Slurm job's or a container's limit: cgroup v2 memory.max, v1
memory.limit_in_bytes, less what is in use, over this process's cgroup and those above it) and
what RLIMIT_AS (ulimit -v) leaves each rank; the refusal names the bound that binds."""

from __future__ import annotations

import os
import resource

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


CGROUP_ROOT = "/sys/fs/cgroup"
_NO_LIMIT = 1 << 62  # cgroup v1 writes "no limit" as 9223372036854771712


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # v2's "max": no limit


def cgroup_room(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> tuple[int, str] | None:
    """The memory this process's cgroup (a Slurm job's, a container's) still allows: the least of
    limit - usage over its memory cgroup and every cgroup above it (cgroup v2 memory.max and
    memory.current; v1 memory.limit_in_bytes and memory.usage_in_bytes), and where that was; None
    when no cgroup above it has a limit or none can be read."""
    try:
        with open(proc_cgroup, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 16).splitlines()
    except OSError:
        return None
    found: list[tuple[int, str]] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one hierarchy at the root
            base, files = root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, files = os.path.join(root, "memory"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        for depth in range(len(parts), -1, -1):
            folder = os.path.join(base, *parts[:depth])
            limit = _read_int(os.path.join(folder, files[0]))
            if limit is None or limit >= _NO_LIMIT:
                continue
            used = _read_int(os.path.join(folder, files[1])) or 0
            found.append((max(0, limit - used), f"the cgroup limit {format_size(limit)} of {folder} "
                                                f"({files[0]}) less {format_size(used)} in use"))
    return min(found, key=lambda x: x[0]) if found else None


def address_space_room() -> tuple[int, str] | None:
    """What RLIMIT_AS (ulimit -v) leaves this process: its soft limit less the address space it
    maps now; None when unlimited. Each rank is a process of its own with this limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    mapped = psutil.Process().memory_info().vms
    return max(0, soft - mapped), (f"the address-space limit (ulimit -v, RLIMIT_AS) {format_size(soft)} less "
                                   f"{format_size(mapped)} this rank maps already")


def host_bounds(ranks_here: int) -> list[tuple[int, int, str]]:
    """(bytes left, ranks sharing them, what bounds them) for the ranks of this host on CPU: the
    host's free memory and the cgroup's room (shared by its ranks), RLIMIT_AS's (each rank's own)."""
    bounds = [(psutil.virtual_memory().available, ranks_here, "the free memory of this host")]
    if (group := cgroup_room()) is not None:
        bounds.append((group[0], ranks_here, group[1]))
    if (space := address_space_room()) is not None:
        bounds.append((space[0], 1, space[1]))
    return bounds


def check_need(need_per_rank: int, ranks_here: int, device: torch.device, what: str, fix: str) -> None:
    """One line of bad input when `what` (each rank's `need_per_rank` bytes; on CPU, every local
    rank's together) does not fit in the free memory: on CPU the tightest of the host's free memory,
    this process's cgroup (a Slurm job's limit) and RLIMIT_AS, named in the line."""
    if device.type == "cuda":
        bounds = [(torch.cuda.mem_get_info(device)[0], 1, f"GPU {device.index} (free)")]
    else:
        bounds = host_bounds(ranks_here)
    # the bound that binds most: the largest share of it the ranks under it need
    have, sharing, where = max(bounds, key=lambda b: need_per_rank * b[1] / max(b[0], 1))
    need = need_per_rank * sharing
    if need > HEADROOM * have:
        ranks = f"{sharing} rank(s)" if sharing == ranks_here else f"each of the {ranks_here} ranks"
        raise BadInput(f"{what} needs about {format_size(need)} ({ranks}) but only {format_size(have)} is left "
                       f"under {where}: {fix}")


def check_fits(plan: SweepPlan, world: int, ranks_here: int, device: torch.device) -> None:
    hint = " or --no-check" if plan.check else ""
    check_need(bytes_per_rank(plan, world), ranks_here, device, "the largest point", f"lower --max-bytes{hint}")
