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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from commbench.core import exithooks, streams
from commbench.core.binding import pinned
from commbench.core.signals import Terminated, ignore_signals_until_exit, stop_once, stopping
from commbench.core.errors import EXIT_RUNTIME, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, BadInput


@dataclass(frozen=True)
class RankEnv:
    launcher: str  # local | torchrun | slurm | mpi
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _int(environ: Mapping[str, str], name: str) -> int:
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


def detect(environ: Mapping[str, str] | None = None, *, resolve: bool | None = None) -> RankEnv | None:
    """The launcher that started this process, or None when commbench runs on its own.

    An environment that contradicts itself (a rank outside the world, more tasks than Slurm's
    nodes hold, a port that is not a port, a MASTER_ADDR that does not resolve) is BadInput here, at
    once, instead of torch's connect timeout: see check_rank_env. MASTER_ADDR is looked up when this
    process's own environment is read (`resolve` defaults to `environ is None`)."""
    env = os.environ if environ is None else environ
    found = _from_launcher(env)
    if found is not None:
        check_rank_env(*found, env, resolve=environ is None if resolve is None else resolve)
        return found[0]
    return None


@dataclass(frozen=True)
class _Source:
    """Where a RankEnv's fields came from, as `NAME=value` labels for the messages; None where a
    default filled the field in (nothing to contradict)."""
    rank: str | None  # always set where a launcher was found
    world: str | None
    local: str | None
    local_world: str | None
    addr: str | None
    port: str | None
    fix: str


_TORCHRUN_FIX = ("fix the launcher's environment (torchrun sets these from --nnodes and --nproc-per-node), "
                 "or unset RANK, WORLD_SIZE and MASTER_ADDR to let commbench spawn its own ranks")
_SLURM_FIX = "fix the job's environment (srun sets these from -n/--ntasks, -N/--nodes and --ntasks-per-node)"
_MPI_FIX = "fix mpirun's environment (mpirun sets these from -n/-np and its host list)"


def _label(env: Mapping[str, str], name: str) -> str | None:
    """`NAME=value` for a message; a value that would not print as itself on one line is quoted."""
    if name not in env:
        return None
    value = str(env[name])
    return f"{name}={value}" if value and value.isprintable() and value.strip() == value else f"{name}={value!r}"


# Each launcher's marks, read by detect() (which takes its ranks from them) and by started_by()
# (which only asks whether a launcher started this process).
_MPI_VARS = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


def _torchrun_marked(env: Mapping[str, str]) -> bool:
    return "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env)


def _srun_step(env: Mapping[str, str]) -> bool:
    # Inside an sbatch script SLURM_PROCID is set too; only srun steps (SLURM_STEP_ID) hold ranks.
    return "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_NTASKS" in env


def started_by(environ: Mapping[str, str] | None = None) -> str | None:
    """The launcher that started this process, by its marks alone: nothing is checked or looked up,
    and more marks count than detect() takes ranks from (torchrun's agent variables LOCAL_RANK and
    GROUP_RANK, a Slurm batch script, mpirun's PMIX_RANK and OMPI_COMM_WORLD_*). A launcher hands its
    ranks a pseudo-terminal or a log, never a person's terminal, so the live bar stays off
    (core/progress.py). OMPI_MCA_* are a user's settings, not a launcher's mark."""
    env = os.environ if environ is None else environ
    if _torchrun_marked(env) or "LOCAL_RANK" in env or "GROUP_RANK" in env:
        return env.get("COMMBENCH_LAUNCHER", "torchrun")
    if "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_JOB_ID" in env):
        return "slurm"
    if ("PMIX_RANK" in env or any(rank in env for rank, *_ in _MPI_VARS)
            or any(name.startswith("OMPI_COMM_WORLD_") for name in env)):
        return "mpi"
    return None


def _from_launcher(env: Mapping[str, str]) -> tuple[RankEnv, _Source] | None:
    if _torchrun_marked(env):
        world = _int(env, "WORLD_SIZE")
        # `commbench lab run` sets the torchrun variables and names itself
        found = RankEnv(env.get("COMMBENCH_LAUNCHER", "torchrun"), _int(env, "RANK"), world,
                        _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
                        _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world,
                        env.get("MASTER_ADDR", "127.0.0.1"),
                        _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500)
        return found, _Source(_label(env, "RANK"), _label(env, "WORLD_SIZE"), _label(env, "LOCAL_RANK"),
                              _label(env, "LOCAL_WORLD_SIZE") or _label(env, "WORLD_SIZE"), _label(env, "MASTER_ADDR"),
                              _label(env, "MASTER_PORT"), _TORCHRUN_FIX)
    if _srun_step(env):
        return _from_slurm(env)
    for rank_var, size_var, local_var, local_size_var in _MPI_VARS:
        if rank_var in env and size_var in env:
            if "MASTER_ADDR" not in env:
                raise BadInput("started by mpirun but MASTER_ADDR is not set: pass -x MASTER_ADDR=<first host> "
                               "(and optionally -x MASTER_PORT) to mpirun")
            found = RankEnv("mpi", _int(env, rank_var), _int(env, size_var),
                            _int(env, local_var) if local_var in env else 0,
                            _int(env, local_size_var) if local_size_var in env else 1,
                            env["MASTER_ADDR"], _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500)
            both = local_var in env and local_size_var in env  # a default on one side contradicts nothing
            return found, _Source(_label(env, rank_var), _label(env, size_var),
                                  _label(env, local_var) if both else None,
                                  _label(env, local_size_var) if both else None, _label(env, "MASTER_ADDR"),
                                  _label(env, "MASTER_PORT"), _MPI_FIX)
    return None


def _from_slurm(env: Mapping[str, str]) -> tuple[RankEnv, _Source]:
    import hostlist

    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
    try:
        hosts = hostlist.expand_hostlist(nodelist) if nodelist else []
    except hostlist.BadHostlist:
        raise BadInput(f"SLURM_JOB_NODELIST={nodelist!r} is not a Slurm host list: fix the job's environment") from None
    master = env.get("MASTER_ADDR") or (hosts[0] if hosts else "127.0.0.1")
    job = env.get("SLURM_JOB_ID", "0")
    port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 29500 + (int(job) % 10000 if job.isdigit() else 0)
    per_node_var = "SLURM_STEP_TASKS_PER_NODE" if env.get("SLURM_STEP_TASKS_PER_NODE") else "SLURM_TASKS_PER_NODE"
    node_id = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
    on_node = _slurm_tasks_on_node(env.get(per_node_var, ""), node_id)
    found = RankEnv("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), _int(env, "SLURM_LOCALID"),
                    on_node, master, port)
    counted = bool(re.fullmatch(r"\d+(\(x\d+\))?(,\d+(\(x\d+\))?)*", env.get(per_node_var, "")))
    addr = _label(env, "MASTER_ADDR") if env.get("MASTER_ADDR") else (
        f"MASTER_ADDR={master} (the first host of "
        f"{'SLURM_STEP_NODELIST' if env.get('SLURM_STEP_NODELIST') else 'SLURM_JOB_NODELIST'})"
        if hosts else None)
    return found, _Source(_label(env, "SLURM_PROCID"), _label(env, "SLURM_NTASKS"), _label(env, "SLURM_LOCALID"),
                          f"{per_node_var}={env[per_node_var]} ({on_node} on node {node_id})" if counted else None,
                          addr, _label(env, "MASTER_PORT"), _SLURM_FIX)


def check_port(port: int, label: str, example: str) -> None:
    """The one rule for a rendezvous port (MASTER_PORT, `lab run --port`): 1..65535. 0 asks the
    kernel for any free port, a different one on every host, so the ranks would never meet."""
    if port == 0:
        raise BadInput(f"{label} asks for any free port, a different one on every host, so the ranks would never "
                       f"meet: give a fixed port from 1 to 65535, e.g. {example}")
    if not 1 <= port <= 65535:
        raise BadInput(f"{label} is not a TCP port: give one from 1 to 65535, e.g. {example}")


def check_rank_env(found: RankEnv, source: _Source, env: Mapping[str, str], resolve: bool = False) -> None:
    """Refuse a launcher environment that contradicts itself, naming the variables, their values and
    the fix; torch would wait its connect timeout for ranks that cannot exist, or a port or host that
    cannot be reached."""
    fix = source.fix
    if found.world_size < 1:
        raise BadInput(f"{source.world} must be at least 1: {fix}")
    if not 0 <= found.rank < found.world_size:
        raise BadInput(f"{source.rank} is not a rank of {source.world} (ranks are 0..{found.world_size - 1}): {fix}")
    if source.local_world is not None:
        if found.local_world_size < 1:
            raise BadInput(f"{source.local_world} must be at least 1: {fix}")
        if found.local_world_size > found.world_size:
            raise BadInput(f"{source.local_world} is more than {source.world} ranks in all: {fix}")
        if source.local is not None and not 0 <= found.local_rank < found.local_world_size:
            raise BadInput(f"{source.local} is not a local rank of {source.local_world} "
                           f"(local ranks are 0..{found.local_world_size - 1}): {fix}")
    if found.launcher == "slurm":
        _check_slurm_counts(env)
    if source.port is not None:
        check_port(found.master_port, source.port, "MASTER_PORT=29500")
    if source.addr is not None:
        _check_master_addr(found.master_addr, source.addr, resolve)


def _check_slurm_counts(env: Mapping[str, str]) -> None:
    """Slurm's node and task counts against each other, where the variables are plain numbers."""
    counts = {n: int(env[n]) for n in ("SLURM_NTASKS", "SLURM_NNODES", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE")
              if re.fullmatch(r"\d+", str(env.get(n, "")).strip())}
    nodes, per_node = counts.get("SLURM_NNODES"), counts.get("SLURM_NTASKS_PER_NODE")
    if nodes is not None and "SLURM_NODEID" in counts and counts["SLURM_NODEID"] >= nodes:
        raise BadInput(f"SLURM_NODEID={counts['SLURM_NODEID']} is not a node of SLURM_NNODES={nodes} "
                       f"(nodes are 0..{nodes - 1}): {_SLURM_FIX}")
    if nodes is not None and per_node is not None and counts.get("SLURM_NTASKS", 0) > nodes * per_node:
        raise BadInput(f"SLURM_NTASKS={counts['SLURM_NTASKS']} is more than SLURM_NNODES={nodes} x "
                       f"SLURM_NTASKS_PER_NODE={per_node} = {nodes * per_node} tasks: {_SLURM_FIX}")


RESOLVE_WAIT_S = 10.0  # a resolver that does not answer by then is not held against MASTER_ADDR


def _check_master_addr(addr: str, label: str, resolve: bool) -> None:
    if not addr.strip():
        raise BadInput(f"{label.split('=')[0]} is empty: set MASTER_ADDR to the first host's name or address")
    if not resolve:
        return
    answer: list[str | None] = []

    def look_up() -> None:
        try:
            socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
            answer.append(None)
        except (OSError, UnicodeError, ValueError) as exc:
            answer.append(getattr(exc, "strerror", None) or str(exc))

    worker = threading.Thread(target=look_up, name="commbench-resolve", daemon=True)
    worker.start()
    worker.join(RESOLVE_WAIT_S)
    if answer and answer[0] is not None:
        raise BadInput(f"{label} does not resolve on {socket.gethostname()} ({answer[0]}): set MASTER_ADDR to "
                       "the first host's name or address")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install_rank_signal_handlers() -> None:
    """Make SIGINT / SIGTERM stop a rank once, cleanly: a terminal's Ctrl-C (or Slurm's SIGTERM)
    reaches every process of the group, and the supervisor then forwards SIGINT to the ranks as
    well; a second signal must not interrupt the rank while it reports the rows it kept and leaves
    the process group (core/signals.py stop_once)."""
    stop_once()


def ignore_further_signals() -> None:
    """The rank has already stopped (a failure, or a first signal): a launcher's SIGTERM now (torchrun
    stops the survivors of a lost rank at once) must not cut short its report of the rows it kept."""
    stopping()


def run_as_rank(target: Callable[[RankEnv], int], env: RankEnv) -> int:
    """Run one rank in this process (torchrun, srun, mpirun, lab run, spawn_local started it).

    The first SIGINT / SIGTERM becomes 130 / 143 wherever it lands, also in the `finally` blocks on
    the way out; later ones change nothing."""
    try:
        install_rank_signal_handlers()
        try:
            return target(env)
        finally:
            stopping()  # the rank is done: a signal from now on cannot change its code
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except Terminated:
        return EXIT_SIGTERM
    finally:
        # The rank exits with its own code next: the interpreter's shutdown puts the default handlers
        # back, which would turn a late SIGTERM into a kill by signal instead of that code.
        ignore_signals_until_exit()


def _child(rank: int, world: int, port: int, target: Callable[[RankEnv], int], quiet_others: bool) -> None:
    code = EXIT_SIGINT  # a Ctrl-C before the rank's handlers are in place
    streams.guard()  # a spawned rank's own streams: a reader that leaves must not end the rank
    try:
        if rank != 0 and quiet_others:
            sys.stdout = open(os.devnull, "w")
        code = run_as_rank(target, RankEnv("local", rank, world, rank, world, "127.0.0.1", port))
    except KeyboardInterrupt:
        pass
    except Terminated:  # a forked rank starts with the supervisor's handlers until run_as_rank sets its own
        code = EXIT_SIGTERM
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    exithooks.exit_now(code)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def spawn_local(nproc: int, target: Callable[[RankEnv], int], grace: float = 15.0,
                echo: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
                cpus: list[set[int]] | None = None, fork: bool = False) -> int:
    """Run `target` in `nproc` fresh processes (ranks 0..nproc-1) and return the run's exit code.

    cpus: per rank the CPUs it starts on (core/binding.py plan); None leaves them to the scheduler.
    fork: start the ranks as forks of this process, which has imported torch already (2 s less a
    run on 2 cores); only where nothing has touched CUDA or started threads (fork_safe).

    rank 0's code wins when every rank ends on its own; a rank killed or failing makes it 3. The
    first Ctrl-C / SIGTERM is forwarded to every rank (130 / 143); this process is ending when this
    returns, so from then on it ignores both (a second Ctrl-C must not interrupt its exit).
    """
    port = free_port()
    ctx = mp.get_context("fork") if fork and fork_safe() else mp.get_context("spawn")
    procs = [ctx.Process(target=_child, args=(r, nproc, port, target, True), name=f"commbench-rank{r}")
             for r in range(nproc)]
    failed_at = interrupted = None
    try:
        try:
            stop_once()  # the first Ctrl-C / SIGTERM stops the run; later ones change nothing
            for r, p in enumerate(procs):
                with pinned(cpus[r] if cpus else None):  # inherited from the first instruction on
                    p.start()
            failed_at = _supervise(procs, grace, echo)
        finally:
            stopping()
    except (KeyboardInterrupt, Terminated) as exc:
        interrupted = EXIT_SIGINT if isinstance(exc, KeyboardInterrupt) else EXIT_SIGTERM
        _stop(procs, signal.SIGINT, grace)  # every rank stops at its point and reports what it kept
    finally:
        _stop(procs, signal.SIGKILL, 0)
        ignore_signals_until_exit()  # the run is over: its code stands, whatever arrives now

    if interrupted is not None:
        return interrupted
    if failed_at is None:  # every rank ended between two polls: name the cause now
        _report_failure(procs, echo, "")
    return _run_code([p.exitcode for p in procs])


def fork_safe() -> bool:
    """Whether a fork of this process makes a sound rank: one thread (a fork copies a lock another
    thread holds, held forever) and CUDA not initialised (a forked child cannot use it)."""
    if threading.active_count() > 1:
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def _supervise(procs: Sequence[Any], grace: float, echo: Callable[[str], None]) -> float | None:
    """Poll the ranks until all end; a failed rank stops the rest after `grace` seconds. Returns
    when a failure was seen. Ctrl-C or SIGTERM raise out of it (spawn_local forwards SIGINT)."""
    failed_at: float | None = None
    while any(p.is_alive() for p in procs):
        if failed_at is None and any(p.exitcode not in (None, 0, 1) for p in procs):
            failed_at = time.monotonic()
            _report_failure(procs, echo, "; stopping the other ranks")
        if failed_at is not None and time.monotonic() - failed_at > grace:
            _stop(procs, signal.SIGTERM, 5.0)
            break
        time.sleep(0.05)
    return failed_at


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


def _report_failure(procs: Sequence[Any], echo: Callable[[str], None], then: str) -> None:
    """Name the rank whose end explains a failed run: one killed by a signal first (the others then
    fail in their collectives), else one that reported a runtime failure."""
    failed = [(r, p) for r, p in enumerate(procs)
              if p.exitcode is not None and (p.exitcode < 0 or p.exitcode == EXIT_RUNTIME)]
    if not failed:
        return
    r, p = min(failed, key=lambda rp: rp[1].exitcode >= 0)
    how = _signal_name(p.exitcode) if p.exitcode < 0 else f"exit code {p.exitcode}"
    echo(f"commbench: rank {r} (pid {p.pid}) ended with {how}{then}")


def _stop(procs: Sequence[Any], sig: int, wait: float) -> None:
    procs = [p for p in procs if p.pid is not None]  # a signal may have come before all were started
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
