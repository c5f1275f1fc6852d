"""Where the ranks come from: torchrun, Slurm (srun), Open MPI / PMI, or commbench itself.

`detect()` reads the launcher's environment. With no launcher, `spawn_local()` starts
`nproc` rank processes on this machine and supervises them: a rank that dies takes the
others down within a grace period, and Ctrl-C / SIGTERM reach every rank so that rank 0 can
stop at the current point with its results file complete.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Callable

from commbench.core.signals import Terminated, sigterm_raises
from commbench.core.errors import EXIT_OK, EXIT_RUNTIME, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, BadInput


@dataclass(frozen=True)
class RankEnv:
    launcher: str  # local | torchrun | slurm | mpi
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _int(environ: dict, name: str) -> int:
    if name not in environ:
        raise BadInput(f"{name} is not set although other launcher variables are: fix the launcher's environment")
    try:
        return int(environ[name])
    except ValueError:
        raise BadInput(f"{name}={environ[name]!r} is not a number: fix the launcher's environment") from None


def _slurm_tasks_on_node(value: str, node_id: int) -> int:
    """Tasks on node `node_id` from Slurm's compressed list, e.g. '2(x3),1' -> [2, 2, 2, 1].

    Walked, not expanded: '2(x99999999999)' must not build a list of that many nodes."""
    runs: list[tuple[int, int]] = []
    for part in filter(None, (value or "").split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return 1
        runs.append((int(m.group(1)), int(m.group(2) or 1)))
    start = 0
    for tasks, repeat in runs:
        if 0 <= node_id < start + repeat:
            return tasks
        start += repeat
    return runs[0][0] if runs else 1


def detect(environ: dict | None = None) -> RankEnv | None:
    """The launcher that started this process, or None when commbench runs on its own."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env):
        world = _int(env, "WORLD_SIZE")
        # `commbench lab run` sets the torchrun variables and names itself
        return RankEnv(env.get("COMMBENCH_LAUNCHER", "torchrun"), _int(env, "RANK"), world, _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
                       _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world,
                       env.get("MASTER_ADDR", "127.0.0.1"), _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500)
    # Inside an sbatch script SLURM_PROCID is set too; only srun steps (SLURM_STEP_ID) hold ranks.
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_NTASKS" in env:
        import hostlist

        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
        try:
            hosts = hostlist.expand_hostlist(nodelist) if nodelist else []
        except hostlist.BadHostlist:
            raise BadInput(f"SLURM_JOB_NODELIST={nodelist!r} is not a Slurm host list: fix the job's environment") from None
        master = env.get("MASTER_ADDR") or (hosts[0] if hosts else "127.0.0.1")
        job = env.get("SLURM_JOB_ID", "0")
        port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500 + (int(job) % 10000 if job.isdigit() else 0)
        return RankEnv("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), _int(env, "SLURM_LOCALID"),
                       _slurm_tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", ""),
                                            _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0),
                       master, port)
    for rank_var, size_var, local_var, local_size_var in (
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ):
        if rank_var in env and size_var in env:
            if "MASTER_ADDR" not in env:
                raise BadInput("started by mpirun but MASTER_ADDR is not set: pass -x MASTER_ADDR=<first host> "
                               "(and optionally -x MASTER_PORT) to mpirun")
            return RankEnv("mpi", _int(env, rank_var), _int(env, size_var),
                           _int(env, local_var) if local_var in env else 0,
                           _int(env, local_size_var) if local_size_var in env else 1,
                           env["MASTER_ADDR"], _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500)
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_stopping = False  # set in a rank by the first SIGINT or SIGTERM


def _stop_once(signum, frame):
    """A rank's handler for SIGINT and SIGTERM: the first one stops the rank; later ones are ignored.

    A terminal's Ctrl-C (or Slurm's SIGTERM) reaches every process of the group, and the supervisor
    then forwards SIGINT to the ranks as well; a second signal must not interrupt the rank while it
    reports the rows it kept and leaves the process group.
    """
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def install_rank_signal_handlers() -> None:
    """Make SIGINT / SIGTERM stop a rank once, cleanly (see _stop_once)."""
    signal.signal(signal.SIGINT, _stop_once)
    signal.signal(signal.SIGTERM, _stop_once)


def ignore_further_signals() -> None:
    """The rank has already stopped (a failure, or a first signal): a launcher's SIGTERM now (torchrun
    stops the survivors of a lost rank at once) must not cut short its report of the rows it kept."""
    global _stopping
    _stopping = True


def run_as_rank(target: Callable[[RankEnv], int], env: RankEnv) -> int:
    """Run one rank in this process (torchrun, srun, mpirun, lab run started it)."""
    install_rank_signal_handlers()
    try:
        return target(env)
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except Terminated:
        return EXIT_SIGTERM
    finally:
        # The rank is done and exits with its own code: the interpreter's shutdown puts the default
        # handlers back, which would turn a late SIGTERM into a kill by signal instead of that code.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _child(rank: int, world: int, port: int, target: Callable[[RankEnv], int], quiet_others: bool) -> None:
    if rank != 0 and quiet_others:
        sys.stdout = open(os.devnull, "w")
    code = run_as_rank(target, RankEnv("local", rank, world, rank, world, "127.0.0.1", port))
    sys.stdout.flush()
    os._exit(code)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def spawn_local(nproc: int, target: Callable[[RankEnv], int], grace: float = 15.0,
                echo: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> int:
    """Run `target` in `nproc` fresh processes (ranks 0..nproc-1) and return the run's exit code.

    rank 0's code wins when every rank ends on its own; a rank killed or failing makes it 3.
    """
    port = free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_child, args=(r, nproc, port, target, True), name=f"commbench-rank{r}")
             for r in range(nproc)]
    for p in procs:
        p.start()

    failed_at = interrupted = None
    try:
        with sigterm_raises():
            failed_at, interrupted = _supervise(procs, grace, echo)
    finally:
        _stop(procs, signal.SIGKILL, 0)

    if interrupted is not None:
        return interrupted
    if failed_at is None:  # every rank ended between two polls: name the cause now
        _report_failure(procs, echo, "")
    return _run_code([p.exitcode for p in procs])


def _supervise(procs, grace: float, echo: Callable[[str], None]) -> tuple[float | None, int | None]:
    """Poll the ranks until all end; a failed rank stops the rest after `grace` seconds, Ctrl-C or
    SIGTERM forwards SIGINT to every rank. Returns (when a failure was seen, the signal's exit code)."""
    failed_at: float | None = None
    while any(p.is_alive() for p in procs):
        try:
            if failed_at is None and any(p.exitcode not in (None, 0, 1) for p in procs):
                failed_at = time.monotonic()
                _report_failure(procs, echo, "; stopping the other ranks")
            if failed_at is not None and time.monotonic() - failed_at > grace:
                _stop(procs, signal.SIGTERM, 5.0)
                break
            time.sleep(0.05)
        except (KeyboardInterrupt, Terminated) as exc:
            _stop(procs, signal.SIGINT, grace)
            return failed_at, EXIT_SIGINT if isinstance(exc, KeyboardInterrupt) else EXIT_SIGTERM
    return failed_at, None


def _run_code(codes: list[int | None]) -> int:
    """The run's exit code from the ranks': a killed or failed rank makes it 3, else bad input 2,
    else a signal's code, else rank 0's."""
    if any(c is not None and c < 0 for c in codes) or EXIT_RUNTIME in codes:
        return EXIT_RUNTIME
    if EXIT_USAGE in codes:
        return EXIT_USAGE
    for special in (EXIT_SIGINT, EXIT_SIGTERM):
        if special in codes:
            return special
    return codes[0] if codes[0] is not None else EXIT_RUNTIME


def _report_failure(procs, echo: Callable[[str], None], then: str) -> None:
    """Name the rank whose end explains a failed run: one killed by a signal first (the others then
    fail in their collectives), else one that reported a runtime failure."""
    failed = [(r, p) for r, p in enumerate(procs)
              if p.exitcode is not None and (p.exitcode < 0 or p.exitcode == EXIT_RUNTIME)]
    if not failed:
        return
    r, p = min(failed, key=lambda rp: rp[1].exitcode >= 0)
    how = _signal_name(p.exitcode) if p.exitcode < 0 else f"exit code {p.exitcode}"
    echo(f"commbench: rank {r} (pid {p.pid}) ended with {how}{then}")


def _stop(procs, sig: int, wait: float) -> None:
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
