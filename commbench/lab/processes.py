"""Daemons the lab starts (munge, slurmctld, slurmd): recorded with their start time so that
`lab down` stops exactly those processes, never a later process that reused a pid.

A recorded process is the lab's only while its pid, its start time and its program (the entry's name:
munged, slurmctld, slurmd) all match; anything else is never signalled."""

from __future__ import annotations

import os
import time

import psutil

from commbench.lab.state import save_state


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


def stop_recorded(state, timeout: float = 10.0) -> list[str]:
    procs = [(e["name"], p) for e in reversed(state.daemons) if (p := running(e)) is not None]
    for _, p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    alive = _wait_exited([p for _, p in procs], timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    _wait_exited(alive, timeout)
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
