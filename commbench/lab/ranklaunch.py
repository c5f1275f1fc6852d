"""`lab run -- CMD`: one rank per lab host (`--ranks-per-host N`: N), rendezvous on the first host.

Each rank gets the torchrun-style variables commbench's launcher detection reads (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, ...) plus GLOO_SOCKET_IFNAME /
NCCL_SOCKET_IFNAME so that the traffic goes over the lab link (eth0; `--iface eth0,eth1` of a
commbench command puts local rank i on the i-th rail instead, core/ifaces.py), and runs under the
host's own hostname. With N ranks a host they are numbered block-wise, as Slurm's block
distribution and torchrun number them: host 1 holds ranks 0..N-1, host 2 ranks N..2N-1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from commbench.core import launch
from commbench.lab import nsexec
from commbench.core.errors import BadInput
from commbench.core.signals import Terminated, ignore_signals_until_exit, stop_once, stopping
from commbench.lab.state import NS_IFACE, LabState, hosts_file

LAB_PORT = 29400


MAX_RANKS_PER_HOST = 64


def rank_env(state: LabState, rank: int, port: int = LAB_PORT, per_host: int = 1) -> dict[str, str]:
    """Rank `rank`'s environment, `per_host` ranks on each host, numbered block-wise."""
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(len(state.nodes) * per_host),
        "LOCAL_RANK": str(rank % per_host), "LOCAL_WORLD_SIZE": str(per_host),
        "GROUP_RANK": str(rank // per_host), "MASTER_ADDR": state.nodes[0].addr, "MASTER_PORT": str(port),
        "GLOO_SOCKET_IFNAME": NS_IFACE, "NCCL_SOCKET_IFNAME": NS_IFACE,
        "COMMBENCH_LAUNCHER": "lab",
        # every rank's host, so that rank 0 can name one that never joined (harness/arrival.py): it
        # takes this list before the lab's hosts file, whose r-th host holds rank r only at one a host
        "COMMBENCH_RANK_HOSTS": ",".join(n.name for n in state.nodes for _ in range(per_host)),
    })
    return env


def check_ranks_per_host(per_host: int) -> None:
    if not 1 <= per_host <= MAX_RANKS_PER_HOST:
        raise BadInput(f"--ranks-per-host {per_host} is outside 1..{MAX_RANKS_PER_HOST}: e.g. --ranks-per-host 2")


def exec_on(state: LabState, node: str, argv: list[str]) -> int:
    if not argv:
        raise BadInput("lab exec needs a command after --: e.g. commbench lab exec cbnode1 -- ip addr")
    n = state.node(node)
    try:
        proc = nsexec.popen(argv, n.name, hostname=n.name, hosts_file=hosts_file(state))
    except FileNotFoundError:
        raise BadInput(f"command not found: {argv[0]}") from None
    return wait_all([proc])


# ssh's options that take a value (`ssh -o X=Y host cmd`): Open MPI's rsh launcher passes none to an
# agent that is not ssh, but a user's `--mca plm_rsh_agent "commbench lab rsh -x"` may.
_SSH_VALUE_OPTIONS = set("bcDEeFIiJLlmOopQRSWw")


def rsh_target(args: list[str]) -> tuple[str, list[str]]:
    """`[ssh options] HOST COMMAND...` -> (HOST, COMMAND words), as ssh reads its arguments."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        flag = args[i]
        i += 2 if len(flag) == 2 and flag[1] in _SSH_VALUE_OPTIONS else 1
    if i < len(args) and args[i] == "--":
        i += 1
    if i >= len(args):
        raise BadInput("lab rsh needs a host and a command: e.g. commbench lab rsh cbnode2 hostname "
                       "(mpirun calls it so with --mca plm_rsh_agent 'commbench lab rsh')")
    if i + 1 >= len(args):
        raise BadInput(f"lab rsh {args[i]}: no command to run there (a login shell is not offered): "
                       f"e.g. commbench lab rsh {args[i]} hostname")
    return args[i], args[i + 1:]


def rsh(state: LabState, args: list[str]) -> int:
    """`lab rsh HOST COMMAND...`: ssh's part for a launcher (Open MPI's plm_rsh_agent): this process
    becomes the command inside HOST (its netns, hostname and hosts file), stdin, stdout, stderr,
    signals and exit code its own. As sshd does, the words are joined and given to a shell: mpirun
    writes its remote command for one (quoted values, `;` inside orte_hnp_uri, `VAR=x; export VAR`)."""
    host, words = rsh_target(args)
    n = state.node(host)
    try:
        nsexec.enter(n.name, hostname=n.name, hosts_file=hosts_file(state))
    except OSError as exc:
        raise BadInput(f"lab rsh {host}: cannot enter the host ({exc.strerror}): run it as root, "
                       "from a process with one thread") from None
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv("/bin/sh", ["sh", "-c", " ".join(words)])
    return 127  # not reached: execv replaces this process or raises


def check_port(port: int) -> None:
    """`lab run --port`: the rendezvous port on the first host, by the launchers' one rule (1..65535)."""
    launch.check_port(port, f"--port {port}", f"--port {LAB_PORT}")


def run_everywhere(state: LabState, argv: list[str], port: int = LAB_PORT, per_host: int = 1,
                   linger: float | None = None) -> int:
    """`argv` as `per_host` ranks on every lab host (block-wise: host 1 ranks 0..per_host-1); a rank
    still running `linger` seconds (LINGER_AFTER_RANK0_S) after rank 0 ended is killed and named."""
    check_port(port)
    check_ranks_per_host(per_host)
    if not argv:
        raise BadInput("lab run needs a command after --: e.g. commbench lab run -- commbench sweep")
    hosts = [node for node in state.nodes for _ in range(per_host)]  # index = rank
    procs = []
    try:
        for rank, node in enumerate(hosts):
            procs.append(nsexec.popen(argv, node.name, hostname=node.name, hosts_file=hosts_file(state),
                                     env=rank_env(state, rank, port, per_host)))
    except FileNotFoundError:
        for p in procs:
            p.kill()
        raise BadInput(f"command not found: {argv[0]}") from None
    return wait_all(procs, [f"rank {r} on {node.name}" for r, node in enumerate(hosts)],
                     LINGER_AFTER_RANK0_S if linger is None else linger)


STOP_WAIT_S = 10.0  # after a forwarded Ctrl-C / SIGTERM: how long every rank gets, together, before SIGKILL
WAITING_NOTE_S = 1.0  # ranks still running this long after the signal are named on stderr
LINGER_AFTER_RANK0_S = 10.0  # a rank cut off by a dead link may never return from its backend (`lab run --linger`)


def wait_all(procs: list[subprocess.Popen], names: list[str] | None = None,
              linger: float = LINGER_AFTER_RANK0_S) -> int:
    """Wait for every rank; forward Ctrl-C / SIGTERM; rank 0's code unless one failed worse. A rank
    still running LINGER_AFTER_RANK0_S after rank 0 ended (blocked on a dead link, as torchrun's
    agent would see it) is killed and named; rank 0's code stands, since its rows are complete."""
    killed: list[int] = []
    try:
        try:
            stop_once()  # the first Ctrl-C / SIGTERM is forwarded; later ones change nothing
            while any(p.poll() is None for p in procs):
                if procs[0].poll() is not None:
                    killed = _stop_lingering(procs, linger)
                    break
                time.sleep(0.05)
        finally:
            stopping()
    except (KeyboardInterrupt, Terminated) as exc:
        return _forward(procs, exc, names or [f"rank {r}" for r in range(len(procs))])
    finally:
        ignore_signals_until_exit()  # the run is over: its code stands, whatever arrives now
    codes = [p.returncode for p in procs]
    if any(c < 0 for r, c in enumerate(codes) if r not in killed):
        return 3
    if killed and codes[0] == 0:
        return 3
    return codes[0] if codes[0] != 0 else max(c for r, c in enumerate(codes) if r not in killed)


def _forward(procs: list[subprocess.Popen], exc: BaseException, names: list[str]) -> int:
    """Send the signal that stopped `lab run` to every rank still running at once, let them report
    what they kept under one shared deadline (STOP_WAIT_S), naming on stderr whom it waits for, then
    kill (with whatever they started) those still running, naming them; the signal's exit code."""
    sig, code = (signal.SIGINT, 130) if isinstance(exc, KeyboardInterrupt) else (signal.SIGTERM, 143)
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    start = time.monotonic()
    noted = False
    while any(p.poll() is None for p in procs) and time.monotonic() - start < STOP_WAIT_S:
        if not noted and time.monotonic() - start >= WAITING_NOTE_S:
            noted = True
            print(f"commbench: lab run: {sig.name} sent to every rank; waiting up to {STOP_WAIT_S:g} s for "
                  f"{_names(procs, names)}", file=sys.stderr, flush=True)
        time.sleep(0.05)
    left = [r for r, p in enumerate(procs) if p.poll() is None]
    for r in left:
        _kill_tree(procs[r])
    if left:
        print(f"commbench: lab run: killed {', '.join(names[r] for r in left)} (still running {STOP_WAIT_S:g} s "
              f"after {sig.name}: stopped, or blocked where no signal is handled)", file=sys.stderr, flush=True)
    return code


def _names(procs: list[subprocess.Popen], names: list[str]) -> str:
    return ", ".join(names[r] for r, p in enumerate(procs) if p.poll() is None)


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a rank and whatever it started (a wrapper's children would outlive it)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    proc.kill()
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    proc.wait()


def _stop_lingering(procs: list[subprocess.Popen], linger: float = LINGER_AFTER_RANK0_S) -> list[int]:
    """Rank 0 has ended: wait for the others, then kill those still running; their ranks."""
    end = time.monotonic() + linger
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.1)
    killed = [r for r, p in enumerate(procs) if p.poll() is None]
    for r in killed:
        print(f"commbench: lab run: rank {r} still running {linger:g} s after rank 0 ended "
              "(blocked on a dead link?): killed", file=sys.stderr, flush=True)
        procs[r].kill()
        procs[r].wait()
    return killed
