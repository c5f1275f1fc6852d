"""Joining the run: the control plane's store, every rank counted in (harness/arrival.py), then the
process group on it, all within --timeout. A rank that cannot join says in one line where it tried
and what to check; rank 0 names a rank that never came. A workload that can measure without the
absent ranks (`pairs`) goes on: the ranks that joined get a control plane of their own and their
environment renumbered in order, and rank 0 learns who is absent.
"""

from __future__ import annotations

import dataclasses
import functools
import socket
from datetime import timedelta

import torch.distributed as dist

from commbench.core.errors import RuntimeFailure
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness import arrival
from commbench.harness.control import ControlPlane


def join_group(plan: RunOptions, backend: str, env: RankEnv,
                go_on: bool = False) -> tuple[ControlPlane, RankEnv, arrival.Joined | None]:
    """The control plane's store, every rank counted in, then the process group on it, all within
    --timeout (harness/arrival.py): rank 0 names a rank that never came; a rank that cannot join
    says where it tried and what to check. With `go_on` the ranks that came go on without the
    others: the plane and the environment returned are theirs, renumbered (and Joined says who)."""
    deadline = arrival.reach_rank0(env, plan.timeout)  # c10d's own connect retries print native stack frames
    try:
        control = ControlPlane.serve(env.master_addr, env.master_port, env.rank, env.world_size,
                                     local_addr(env.master_addr), plan.timeout)
    except (RuntimeError, ValueError) as exc:
        raise _not_joined(env, exc) from None
    quiet = functools.cache(functools.partial(_quiet, control))  # once
    joined = None
    try:
        joined = arrival.arrive(control.main, env, plan.timeout, deadline, quiet, go_on)  # or who is not in
        if joined is not None:
            control, env = _rejoin(control, env, joined)
        dist.init_process_group(backend, store=control.group_store(), rank=env.rank, world_size=env.world_size,
                                timeout=timedelta(seconds=plan.timeout))
    except (RuntimeError, ValueError) as exc:  # DistError and gloo's connect errors are RuntimeErrors
        quiet()
        raise _not_joined(env, exc) from None
    except RuntimeFailure:
        quiet()
        raise
    return control, env, joined


def _rejoin(control: ControlPlane, env: RankEnv, joined: arrival.Joined) -> tuple[ControlPlane, RankEnv]:
    """The ranks that joined, without the absent ones: a control plane of their own (keys under a
    prefix of rank 0's store, which stays up) and their environment, renumbered in order."""
    control.close()
    control.gather(1.0)  # its start-time gather waits for ranks that will never come: ended here
    env = dataclasses.replace(env, rank=joined.rank_of(env.rank), world_size=len(joined.ranks))
    store = dist.PrefixStore("commbench/joined", control.main)
    return ControlPlane.on(store, env.rank, env.world_size, local_addr(env.master_addr), control.timeout,
                           control.iface), env


def _quiet(control: ControlPlane) -> None:
    """The control plane closed and its start-time gather (which polls rank 0's store) ended: a
    c10d store call after rank 0's store is gone prints native stack frames."""
    control.close()
    control.gather(1.0)


def _not_joined(env: RankEnv, exc: BaseException) -> RuntimeFailure:
    return RuntimeFailure(f"rank {env.rank} on {socket.gethostname()} could not join the process group at "
                          f"{env.master_addr}:{env.master_port}: {first_line(exc)} (check MASTER_ADDR, "
                          f"the firewall and GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME or --iface)")


def first_line(exc: BaseException) -> str:
    """An exception's first line of text (its type's name when it has none)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def local_addr(master_addr: str) -> str | None:
    """This rank's address towards MASTER_ADDR (the one its peers see), to name a lost peer later."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_addr, 9))  # picks the route; nothing is sent
            return s.getsockname()[0]
    except OSError:
        return None
