"""Running a workload: on the ranks a launcher started (torchrun, srun, mpirun, lab run), or on
local ranks this process spawns and supervises."""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import NoReturn

from commbench.core import exithooks, ifaces
from commbench.core.errors import BadInput


def warn_socket_ifname(env) -> None:
    """Before running: one stderr line per NCCL/GLOO_SOCKET_IFNAME that matches no interface here
    (rank 0 under a launcher, or the local parent)."""
    if env is not None and env.rank != 0:
        return
    from commbench.net.netinfo import socket_ifname_warnings

    for line in socket_ifname_warnings():
        print(f"commbench: warning: {line} (see `commbench doctor`)", file=sys.stderr)


def check_iface(backend: str) -> None:
    """Before the process group, on every rank's own host: --iface, and under gloo GLOO_SOCKET_IFNAME,
    must name interfaces with an address here (gloo's exact names; NCCL's prefix rules under nccl);
    gloo would stop with its "enforce fail" (exit 3), NCCL with a bootstrap error. A wrong
    NCCL_SOCKET_IFNAME alone stays a warning (see `commbench doctor`)."""
    import socket

    import click

    from commbench.net.ncclrules import gloo_ifname_missing, has_address, socket_ifname_selects
    from commbench.net.netinfo import live_interfaces

    ctx = click.get_current_context(silent=True)
    flag = ctx.params.get("iface") if ctx is not None else None
    gloo = os.environ.get("GLOO_SOCKET_IFNAME")
    if flag:
        value, label, fix = flag, f"--iface {_shown(flag)}", "pass one of those to --iface, or drop --iface"
    elif gloo and backend == "gloo":
        value, label = gloo, f"GLOO_SOCKET_IFNAME={_shown(gloo)}"
        fix = "set GLOO_SOCKET_IFNAME to one of those, or unset it"
    else:
        return
    interfaces = live_interfaces()
    have = ", ".join(i["name"] for i in interfaces if has_address(i)) or "none"
    if backend == "nccl":  # only NCCL carries the traffic: its rules (prefixes, =exact, ^except)
        if socket_ifname_selects(value, interfaces) == []:
            raise BadInput(f"{label} matches no interface with an address on {socket.gethostname()} "
                           f"(have: {have}): {fix}")
        return
    missing = gloo_ifname_missing(value, interfaces)
    if missing:
        what = ("is not an interface" if missing == [value]
                else f"names {', '.join(map(_shown, missing))}, which is not an interface")
        raise BadInput(f"{label} {what} with an address on {socket.gethostname()} (have: {have}): {fix}")


def _iface_list(value: str | None) -> bool:
    return bool(value) and "," in str(value)


def _own_iface(value: str | None, backend: str, env, told: bool | None = True) -> None:
    """This rank's interface of an --iface list (core/ifaces.py: local rank i the i-th) in its own
    environment, before its process group: GLOO/NCCL_SOCKET_IFNAME (set to the whole list while
    the options were read), and with NCCL the HCA behind it. One name: as the options set it.
    `told`: whether the launcher named the local ranks (None: ask its environment)."""
    if not _iface_list(value):
        return
    from commbench.net.netinfo import SYSFS, rdma_ports

    told = ifaces.local_ranks_told(os.environ) if told is None else told
    chosen = ifaces.for_rank(str(value), env.local_rank, env.local_world_size, told, env.launcher)
    ports = rdma_ports(SYSFS) if backend == "nccl" else []
    os.environ.update(ifaces.rank_environ(chosen, backend, ports, os.environ))


def _on_own_iface(target, value: str, backend: str, env) -> int:
    """A spawned local rank: its interface of the --iface list, then the rank."""
    _own_iface(value, backend, env)
    return target(env)


def _shown(text: str) -> str:
    """A user's text in a one-line message: as it is, or quoted when it would not print as itself."""
    return text if text.isprintable() and text.strip() == text else repr(text)


def _bind_given() -> bool:
    """--bind typed on the command line (an external launcher's own binding wins otherwise)."""
    import click
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("bind") if ctx is not None else None
    return source not in (None, ParameterSource.DEFAULT)


def _gpu_affinity(nranks: int) -> list:
    """Per local rank, the CPUs of its GPU's NUMA node from `nvidia-smi topo -m` (doctor's reader);
    None where unknown, so that --bind auto says it falls back to cores."""
    from commbench.core import binding
    from commbench.net.netinfo import parse_nvidia_smi_list, parse_topo_matrix, run_command

    topo = run_command(["nvidia-smi", "topo", "-m"])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    listing = run_command(["nvidia-smi", "-L"]) if visible and not visible.replace(",", "").isdigit() else None
    found = binding.gpu_cpus(parse_topo_matrix(topo) if topo else None, nranks, visible,
                             parse_nvidia_smi_list(listing) if listing else None)
    return found if found is not None else [None] * nranks


def bind_plan(mode: str, backend: str, nranks: int, say: bool = True) -> list | None:
    """Each local rank's CPUs under --bind `mode` (None: the scheduler's); notes on stderr."""
    from commbench.core import binding

    gpu = _gpu_affinity(nranks) if mode == "auto" and backend == "nccl" else None
    # a test points this at a tree without NUMA nodes; sysfs otherwise
    node_root = os.environ.get("COMMBENCH_TEST_NODE_ROOT") or binding.NODE_ROOT
    nodes = binding.numa_nodes(node_root) if mode == "numa" else None
    cpus, notes = binding.plan(mode, nranks, binding.allowed_cpus(), nodes=nodes, gpu_cpus=gpu)
    for note in notes if say else ():
        print(f"commbench: {note}", file=sys.stderr)
    return cpus


def _rebind_rank(workload, env) -> None:
    """Under torchrun/srun/mpirun: this rank onto its share of the node, only when --bind was given
    (srun --cpu-bind and mpirun --bind-to have placed it otherwise). Torch is loaded by now, so its
    intra-op pool is resized to the new set."""
    import torch

    from commbench.core import binding

    if not _bind_given():
        return
    cpus = bind_plan(workload.plan.bind, workload.plan.backend, env.local_world_size, say=env.local_rank == 0)
    if cpus is not None:
        binding.apply(cpus[env.local_rank])
        torch.set_num_threads(len(cpus[env.local_rank]))


def launcher_checked(command):
    """`command`, refusing a launcher environment that contradicts itself before anything else, so
    before its workload imports torch: the refusal takes 0.3 s instead of 3 s. launch_workload reads
    the environment again when it starts the ranks."""
    @functools.wraps(command)
    def checked(*args, **kwargs):
        from commbench.core import launch

        launch.detect()
        return command(*args, **kwargs)
    return checked


def launch_workload(workload, nproc: int | None) -> NoReturn:
    """Run `workload` on the ranks a launcher started, or spawn `nproc` local ranks; then end the
    process with the run's exit code."""
    import torch

    from commbench.core import launch
    from commbench.core import results
    from commbench.harness.runner import rank_main

    env = launch.detect()  # a launcher environment that contradicts itself is refused here
    check_iface(workload.plan.backend)
    if env is not None:
        if nproc is not None:
            raise BadInput(f"--nproc is for local runs, but {env.launcher} started {env.world_size} ranks: "
                           "drop --nproc or set the rank count in the launcher")
        _own_iface(workload.plan.iface, workload.plan.backend, env, told=None)
    warn_socket_ifname(env)
    if env is not None:
        workload.validate(env.world_size)
        _rebind_rank(workload, env)
        _end_now(launch.run_as_rank(functools.partial(rank_main, workload), env))

    backend = workload.plan.backend
    if nproc is None:
        nproc = torch.cuda.device_count() if backend == "nccl" else 2
    workload.validate(nproc)
    target = functools.partial(rank_main, workload)
    if _iface_list(workload.plan.iface):
        ifaces.check(workload.plan.iface, nproc, True, f"--nproc {nproc}")
        target = functools.partial(_on_own_iface, target, workload.plan.iface, backend)
    device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", 0)
    workload.prepare(backend, device, launch.RankEnv("local", 0, nproc, 0, nproc, "127.0.0.1", 0))
    results.check_writable(results.resolve_out(workload.plan.out, workload.plan.run_id))
    cpus = bind_plan(workload.plan.bind, backend, nproc)
    # gloo ranks fork from here, where torch is imported; NCCL's start fresh (CUDA is per process)
    fork = backend == "gloo" and not getattr(workload, "fresh_ranks", False)
    _end_now(launch.spawn_local(nproc, target, cpus=cpus, fork=fork))


def _end_now(code: int) -> NoReturn:
    """End the process with `code` once the workload is over, skipping the interpreter's shutdown.
    Everything is written and closed by now, and that shutdown costs: with torch loaded it takes
    0.5-0.8 s a process (measured: `import torch` alone exits in 1.65 s, 1.10 s by os._exit), paid
    by every rank and by the local parent; after a failure on a sick fabric the backend's threads
    may stay blocked on dead sockets, and the shutdown would wait for them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said there
            pass
    logging.shutdown()
    exithooks.exit_now(code)
