"""Daemons the lab starts (munge, slurmctld, slurmd): recorded with their start time so that
`lab down` stops exactly those processes, never a later process that reused a pid."""

from __future__ import annotations

import time

import psutil

from commbench.lab.state import save_state


def record(state, name: str, pid: int) -> None:
    state.daemons.append({"name": name, "pid": pid, "start": psutil.Process(pid).create_time()})
    save_state(state)


def running(entry: dict) -> psutil.Process | None:
    """The recorded daemon's process if it still runs (same pid and start time), else None."""
    try:
        proc = psutil.Process(entry["pid"])
        return proc if abs(proc.create_time() - entry["start"]) < 0.01 else None
    except psutil.Error:
        return None


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
