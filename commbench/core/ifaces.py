"""`--iface`: one interface for every rank, or a comma list that gives local rank i the i-th
(rail-aligned ranks, as NCCL pairs each GPU with the NIC nearest it), checked against what the
launcher says of this host's ranks.

`--iface eth0` sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME to eth0 in every rank, as before.
`--iface eth0,eth1` sets them, in each rank's own process, to the one name its local rank gets:
local rank 0 eth0, local rank 1 eth1. A list shorter than the local ranks is shared block-wise
(4 local ranks, eth0,eth1: ranks 0 and 1 on eth0, 2 and 3 on eth1), as GPUs on one PCIe switch
share its NIC; a longer one is bad input, since a name would carry nothing. With NCCL, where the
rank's interface is the netdev of an RDMA port (RoCE, IPoIB) and NCCL_IB_HCA is not set, the rank
also gets NCCL_IB_HCA==<device>:<port> of that port, so that its IB traffic takes the same rail.

Not gloo's list: GLOO_SOCKET_IFNAME=eth0,eth1 set by hand (or as an --env axis) gives ONE process
several gloo devices, its pairs spread over both. `--iface` never passes a list on: each rank gets
one name. The choice needs the launcher to say which local rank a process is and how many share
its host (torchrun's and `lab run`'s LOCAL_RANK and LOCAL_WORLD_SIZE, srun's SLURM_LOCALID and
tasks per node, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK and _LOCAL_SIZE, MPICH's MPI_LOCALRANKID
and MPI_LOCALNRANKS; commbench's own --nproc ranks); where it does not, a list is bad input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from commbench.core.errors import BadInput

# The launchers' own words for a process's local rank and its host's rank count: detect()
# (core/launch.py) fills them in with defaults where they are missing, so this asks the environment.
_LOCAL_VARS = (("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"),
               ("SLURM_LOCALID", "SLURM_TASKS_PER_NODE"),
               ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"), ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"))
_TOLD_BY = {"torchrun": "LOCAL_RANK and LOCAL_WORLD_SIZE", "lab": "LOCAL_RANK and LOCAL_WORLD_SIZE",
            "slurm": "SLURM_LOCALID and SLURM_TASKS_PER_NODE",
            "mpi": "OMPI_COMM_WORLD_LOCAL_RANK and _LOCAL_SIZE, or MPI_LOCALRANKID and MPI_LOCALNRANKS"}
_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # an interface name as the kernel allows it (IFNAMSIZ - 1)


def names(value: str) -> list[str]:
    """The names of an --iface value: one, or a comma list of interface names (no NCCL ^/= syntax)."""
    if "," not in value:
        return [value]
    parts = [p.strip() for p in value.split(",")]
    for part in parts:
        if not _NAME.fullmatch(part):
            what = "an empty name" if not part else f"{part!r}, which is not an interface name"
            raise BadInput(f"--iface {value} has {what}: give interface names, one per local rank, "
                           "e.g. --iface eth0,eth1 (NCCL's ^ and = go in NCCL_SOCKET_IFNAME itself)")
    return parts


def is_list(value: str | None) -> bool:
    return bool(value) and len(names(str(value))) > 1


def local_ranks_told(environ: Mapping[str, str]) -> bool:
    """Whether the launcher's environment names this process's local rank and its host's rank count."""
    return any(rank in environ and size in environ and environ[size] for rank, size in _LOCAL_VARS)


def pick(choices: list[str], local_rank: int, local_world: int) -> str:
    """Local rank `local_rank` of `local_world`'s name: the i-th, a shorter list shared block-wise."""
    return choices[local_rank * len(choices) // max(local_world, 1)] if local_rank < local_world else choices[-1]


def check(value: str, local_world: int, told: bool, launcher: str) -> list[str]:
    """The names of `value`, refused where they cannot be given one per local rank."""
    found = names(value)
    if len(found) == 1:
        return found
    if not told:
        raise BadInput(f"--iface {value} gives local rank i the i-th interface, but {launcher} does not say "
                       f"which local rank this is (no {_TOLD_BY.get(launcher, _TOLD_BY['torchrun'])}): set them, "
                       f"or give one interface, e.g. --iface {found[0]}")
    if len(found) > local_world:
        more = f"--nproc {len(found)}" if launcher.startswith("--nproc") else f"start {len(found)} ranks a host"
        raise BadInput(f"--iface {value} names {len(found)} interfaces for {local_world} rank(s) on this host "
                       f"({launcher}): local rank i takes the i-th, so give at most {local_world}, e.g. --iface "
                       f"{','.join(found[:local_world])}, or {more}")
    return found


def for_rank(value: str, local_rank: int, local_world: int, told: bool = True, launcher: str = "the launcher") -> str:
    """This rank's one interface of an --iface value (checked)."""
    return pick(check(value, local_world, told, launcher), local_rank, local_world)


def rank_environ(iface: str, backend: str, ports: Iterable[Mapping[str, Any]] = (),
                 environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that put one rank's traffic on `iface`: GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME,
    and with NCCL NCCL_IB_HCA==<device>:<port> where an RDMA port of `ports` (net/netinfo.py
    rdma_ports) has `iface` as its netdev and `environ` sets no NCCL_IB_HCA of its own."""
    env = {"GLOO_SOCKET_IFNAME": iface, "NCCL_SOCKET_IFNAME": iface}
    if backend == "nccl" and not (environ or {}).get("NCCL_IB_HCA"):
        port = next((p for p in ports if p.get("netdev") == iface and p.get("device")), None)
        if port is not None:
            env["NCCL_IB_HCA"] = f"={port['device']}:{port.get('port') or 1}"
    return env
