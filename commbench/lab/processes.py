"""Daemons the lab starts (munge, slurmctld, slurmd): recorded with their start time so that
`lab down` stops exactly those processes, never a later process that reused a pid.

What still runs inside the lab's hosts (a `lab run`'s ranks) is named and stopped by `lab down`
before the network goes. A process runs inside a lab host when its network namespace is one of the
lab's (the same device and inode as /run/netns/<host>, as `ip netns identify` tells them); nothing
else is signalled. A recorded daemon is the lab's only while its pid, its start time and its
program (the entry's name: munged, slurmctld, slurmd) all match; anything else is never signalled."""

from __future__ import annotations

import os
import sys
import time

import psutil

from commbench.core.safetext import escaped
from commbench.lab.nsexec import NETNS_DIR
from commbench.lab.state import save_state

HOST_STOP_S = 10.0  # `lab down`: how long what runs on the hosts gets, together, after SIGTERM


def record(state, name: str, pid: int) -> None:
    state.daemons.append({"name": name, "pid": pid, "start": psutil.Process(pid).create_time()})
    save_state(state)


def running(entry: dict) -> psutil.Process | None:
    """The recorded daemon's process if it still runs (same pid, start time and program), else None."""
    try:
        pid, start, program = entry["pid"], float(entry["start"]), str(entry["name"]).split(" ")[0]
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or pid == os.getpid() or not program:
            return None
        proc = psutil.Process(pid)
        if abs(proc.create_time() - start) >= 0.01 or not _runs(proc, program):
            return None
        return proc
    except (psutil.Error, KeyError, TypeError, ValueError, OverflowError):
        return None


def _runs(proc: psutil.Process, program: str) -> bool:
    """The process runs `program`: its executable's or argv[0]'s file name, or its (15-character) name."""
    names = {proc.name()}
    try:
        cmdline = proc.cmdline()
        names.add(os.path.basename(cmdline[0]) if cmdline else "")
        names.add(os.path.basename(proc.exe()))
    except psutil.Error:
        pass
    return program in names or (len(program) > 15 and program[:15] in names)


def terminate(procs: list[psutil.Process], grace_s: float, kill_wait_s: float) -> list[psutil.Process]:
    """SIGTERM to all of `procs` at once, SIGKILL to those still running `grace_s` later (waited for
    at most `kill_wait_s`); the ones that had to be killed."""
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    alive = _wait_exited(procs, grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    _wait_exited(alive, kill_wait_s)
    return alive


def stop_recorded(state, timeout: float = 10.0) -> list[str]:
    procs = [(e["name"], p) for e in reversed(state.daemons) if (p := running(e)) is not None]
    terminate([p for _, p in procs], timeout, timeout)
    return [f"process {name} (pid {p.pid})" for name, p in procs]


def _exited(proc: psutil.Process) -> bool:
    """Gone, or a zombie: the daemons outlive the CLI that started them, so their parent is init,
    which may reap them late (or, in some containers, never)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _wait_exited(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited; return those still running after `timeout`."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not _exited(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _exited(p)]
    return alive


def on_hosts(state) -> list[tuple[str, psutil.Process]]:
    """(host, process) for every process inside one of the lab's hosts (not this process)."""
    spaces = {}
    for n in state.nodes:
        try:
            st = os.stat(NETNS_DIR / n.name)
        except OSError:
            continue
        spaces[(st.st_dev, st.st_ino)] = n.name
    found = []
    for proc in psutil.process_iter():
        try:
            st = os.stat(f"/proc/{proc.pid}/ns/net")
        except OSError:
            continue
        host = spaces.get((st.st_dev, st.st_ino))
        if host is not None and proc.pid != os.getpid():
            found.append((host, proc))
    return found


def _command(proc: psutil.Process) -> str:
    try:
        words = proc.cmdline() or [proc.name()]
    except psutil.Error:
        return "?"
    line = escaped(" ".join(words))
    return line if len(line) <= 120 else line[:117] + "..."


def _launcher(procs: list[psutil.Process]) -> str:
    """`, started by `commbench lab run` (pid N)` when the processes' parent is a `lab run`."""
    for proc in procs:
        try:
            parent = proc.parent()
            words = parent.cmdline() if parent is not None else []
        except psutil.Error:
            continue
        if "lab" in words and "run" in words[words.index("lab"):]:
            return f", started by `commbench lab run` (pid {parent.pid})"
    return ""


def stop_on_hosts(state) -> list[str]:
    """`lab down` under a running `lab run` (or anything else inside the lab's hosts): one line on
    stderr naming what it cuts and where, SIGTERM to all at once (a rank keeps its finished rows and
    leaves), SIGKILL to those still running HOST_STOP_S later, named; what was stopped, for the
    closing line. Done while the network is still up, so the ranks leave as they would on scancel."""
    found = on_hosts(state)
    if not found:
        return []
    commands: dict[str, list[str]] = {}
    for host, proc in found:
        hosts = commands.setdefault(_command(proc), [])
        if host not in hosts:
            hosts.append(host)
    what = "; ".join(f"`{cmd}` on {', '.join(hosts)}" for cmd, hosts in commands.items())
    print(f"commbench: lab down: cutting what still runs on the lab's hosts: {what}"
          f"{_launcher([p for _, p in found])}; SIGTERM now, SIGKILL after {HOST_STOP_S:g} s",
          file=sys.stderr, flush=True)
    alive = terminate([p for _, p in found], HOST_STOP_S, 5.0)
    if alive:
        where = {p.pid: h for h, p in found}
        print("commbench: lab down: killed " + ", ".join(f"pid {p.pid} on {where[p.pid]}" for p in alive)
              + f" (still running {HOST_STOP_S:g} s after SIGTERM)", file=sys.stderr, flush=True)
    return [f"process {_command(p).split(' ')[0]} on {h} (pid {p.pid})" for h, p in found]
