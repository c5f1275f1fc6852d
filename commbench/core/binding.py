"""Rank binding (`--bind auto|none|cores|numa`): which CPUs each local rank may run on.

Left to the scheduler, ranks' threads migrate and wait on each other; MPI binds by default, and
on a GPU node the cores of the GPU's NUMA node are the ones near its PCIe root. `auto` binds to
the GPU's NUMA cores under NCCL, else to cores where each rank gets AUTO_CPUS_PER_RANK of them,
else not at all (what one CPU a rank costs: AUTO_CPUS_PER_RANK; benchmarks/bind.py).

The local spawner pins each child before it starts (`pinned`, around the process start: the new
interpreter inherits the mask, so torch sizes its intra-op pool to it and every thread it starts
stays there). Under an external launcher a rank rebinds itself only when --bind was given
(`apply`, every thread of the process): srun --cpu-bind and mpirun --bind-to have already placed it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from commbench.core.errors import BadInput

MODES = ("auto", "none", "cores", "numa")
NODE_ROOT = "/sys/devices/system/node"
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
MOST_CPUS = 1 << 16  # a cpulist naming more CPUs than this is no machine's
# --bind auto pins ranks to cores only where each gets at least this many: a gloo rank runs its
# main thread and gloo's own threads, and alone on one CPU they take turns. Measured on 2 CPUs,
# 2 ranks (benchmarks/bind.py): pinned, 16-64 MiB gained 6-13% but at 1 KiB..512 KiB a tenth of
# the iterations hit a 4 ms scheduler tick (p90/median 10-18 against 1.4-2.4 unpinned), and with
# another job on one core the pinned rank lost up to 40% from 1 MiB (it cannot move).
AUTO_CPUS_PER_RANK = 2


def check_mode(value: str | None, flag: str = "--bind") -> str:
    """The --bind value, or one line naming the choices."""
    text = str(value).strip().lower() if value is not None else "auto"
    if text not in MODES:
        raise BadInput(f"{flag} {str(value)[:40]!r} is not a binding: use one of {', '.join(MODES)} "
                       f"(e.g. {flag} cores)")
    return text


def parse_cpulist(text: str) -> set[int]:
    """A Linux cpulist ("0-3,8", "0,2", "") -> the CPU numbers; ValueError when it is none."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in str(text).strip().split(","))):
        m = _RANGE.fullmatch(part)
        if not m:
            raise ValueError(f"{part!r} is not a CPU number or range")
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low or high - low >= MOST_CPUS:
            raise ValueError(f"{part!r} is not a CPU range")
        cpus.update(range(low, high + 1))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    """CPU numbers -> the kernel's cpulist form: sorted, runs as "a-b", joined by commas."""
    ordered = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)


def split_cores(cpus: Iterable[int], nranks: int) -> tuple[list[set[int]], bool]:
    """`cpus` shared out among `nranks`: evenly and contiguously (the first ranks take one more where
    they do not divide), so a rank's threads share caches; with more ranks than CPUs each rank gets
    one CPU, round-robin, and the second value says they share."""
    ordered = sorted(set(cpus))
    if not ordered or nranks < 1:
        raise ValueError("no CPUs to share out")
    if nranks > len(ordered):
        return [{ordered[r % len(ordered)]} for r in range(nranks)], True
    base, extra = divmod(len(ordered), nranks)
    shares, start = [], 0
    for r in range(nranks):
        size = base + (1 if r < extra else 0)
        shares.append(set(ordered[start:start + size]))
        start += size
    return shares, False


def numa_nodes(root: str | Path = NODE_ROOT) -> dict[int, set[int]]:
    """NUMA node -> its CPUs, from sysfs node*/cpulist (nodes without CPUs left out); {} when the
    kernel shows no NUMA information."""
    nodes: dict[int, set[int]] = {}
    try:
        entries = sorted(Path(root).iterdir())
    except OSError:
        return {}
    for entry in entries:
        m = re.fullmatch(r"node(\d+)", entry.name)
        if not m:
            continue
        try:
            cpus = parse_cpulist((entry / "cpulist").read_text())
        except (OSError, ValueError):
            continue
        if cpus:
            nodes[int(m.group(1))] = cpus
    return nodes


def plan(mode: str, nranks: int, allowed: Iterable[int], *, nodes: dict[int, set[int]] | None = None,
         gpu_cpus: list[set[int] | None] | None = None) -> tuple[list[set[int]] | None, list[str]]:
    """Each local rank's CPUs under `mode` (None: leave them to the scheduler), and notes to print.

    allowed: the CPUs this process may use (os.sched_getaffinity); nodes: numa_nodes(); gpu_cpus:
    under auto on a GPU node, per local rank the CPUs of its GPU's NUMA node (None where unknown)."""
    allowed = set(allowed)
    if mode == "none":
        return None, []
    if mode == "numa":
        return _numa_plan(nranks, allowed, nodes or {})
    notes: list[str] = []
    if mode == "auto" and gpu_cpus is not None:
        near = [set(c) & allowed if c else set() for c in gpu_cpus[:nranks]]
        if len(near) == nranks and all(near):
            return near, []
        notes.append("--bind auto: the CPU affinity of some GPU is unknown (nvidia-smi topo -m): binding to cores")
    if mode == "auto" and len(allowed) < AUTO_CPUS_PER_RANK * nranks:
        return None, notes  # a rank alone on one CPU stalls its own threads (see AUTO_CPUS_PER_RANK)
    shares, shared = split_cores(allowed, nranks)
    if shared:
        notes.append(f"--bind {mode}: {nranks} ranks on {len(allowed)} CPU(s): each rank gets one, "
                     "shared round-robin")
    return shares, notes


def _numa_plan(nranks: int, allowed: set[int], nodes: dict[int, set[int]]) -> tuple[list[set[int]], list[str]]:
    usable = [cpus & allowed for _, cpus in sorted(nodes.items()) if cpus & allowed]
    if not usable:
        raise BadInput(f"--bind numa: this machine shows no NUMA nodes with usable CPUs ({NODE_ROOT}/node*/cpulist): "
                       "use --bind cores or --bind none")
    notes = [f"--bind numa: {nranks} ranks on {len(usable)} NUMA node(s): ranks share nodes round-robin"] \
        if nranks > len(usable) else []
    return [usable[r % len(usable)] for r in range(nranks)], notes


def allowed_cpus() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def current_cpulist() -> str:
    """This thread's CPUs as a cpulist: what the results record for the rank."""
    return format_cpulist(allowed_cpus())


@contextlib.contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """The calling thread on `cpus` for the block, then back: a process started inside inherits
    the mask from its first instruction (before torch or OpenMP size their thread pools)."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def apply(cpus: set[int]) -> None:
    """This whole process (every thread it has now, and those they start) on `cpus`."""
    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def gpu_cpus(topology: dict[str, Any] | None, nranks: int, visible: str | None = None,
             gpus: list[dict[str, Any]] | None = None) -> list[set[int] | None] | None:
    """Per local rank (rank r drives the r-th visible GPU), the CPUs of its GPU's NUMA node, from
    `nvidia-smi topo -m` as net/netinfo.py parse_topo_matrix reads it ("CPU Affinity" column);
    None for a rank whose GPU or affinity is unknown, None overall without a topology.

    visible: CUDA_VISIBLE_DEVICES (indices, or UUIDs matched against `nvidia-smi -L`'s `gpus`)."""
    if not topology or not topology.get("affinity"):
        return None
    physical: list[int | None] = list(range(nranks))
    if visible is not None and visible.strip():
        by_uuid = {g["uuid"]: g["index"] for g in gpus or [] if g.get("uuid")}
        physical = []
        for item in (v.strip() for v in visible.split(",")):
            if item.isdigit():
                physical.append(int(item))
            else:
                physical.append(next((i for u, i in by_uuid.items() if item and u.startswith(item)), None))
    out: list[set[int] | None] = []
    for r in range(nranks):
        index = physical[r] if r < len(physical) else None
        cell = (topology["affinity"].get(f"GPU{index}") or {}).get("cpu") if index is not None else None
        try:
            out.append(parse_cpulist(cell) or None if cell else None)
        except ValueError:  # "N/A": nvidia-smi does not know
            out.append(None)
    return out


def collisions(ranks: list[dict[str, Any]]) -> list[str]:
    """Warnings for local ranks that an external launcher bound to the same CPUs: each rank is bound
    (fewer CPUs than its host has, `ncpus`) and shares a CPU with another bound rank of its host, so
    they take turns (issue #40: mpirun's default --bind-to core with -np 2 mapped oddly put both ranks
    on `cpus 0`). `ranks`: rank, host, cpus (a cpulist), ncpus, per rank. One line per host."""
    lines = []
    by_host: dict[str, list[tuple[int, set[int]]]] = {}
    for r in ranks:
        try:
            cpus = parse_cpulist(r.get("cpus") or "")
        except ValueError:
            continue
        if cpus and r.get("ncpus") and len(cpus) < int(r["ncpus"]):
            by_host.setdefault(str(r.get("host")), []).append((int(r["rank"]), cpus))
    for host, bound in by_host.items():
        shared = sorted({rank for rank, cpus in bound for other, theirs in bound if other != rank and cpus & theirs})
        if not shared:
            continue
        where = ", ".join(f"rank {rank} cpus {format_cpulist(cpus)}" for rank, cpus in bound if rank in shared)
        lines.append(f"ranks {', '.join(map(str, shared))} on {host} are bound to the same CPUs ({where}): they take "
                     "turns and measure the scheduler; fix: `mpirun --bind-to none`, or `--map-by slot:PE=N` (N CPUs "
                     "per rank), or srun --cpu-bind=cores, or commbench --bind cores")
    return lines
