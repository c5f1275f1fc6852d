"""Daemons the lab starts (munge, slurmctld, slurmd): recorded with their start time so that
`lab down` stops exactly those processes, never a later process that reused a pid."""

from __future__ import annotations

import psutil


def record(state, name: str, pid: int) -> None:
    from commbench.lab import save_state

    state.daemons.append({"name": name, "pid": pid, "start": psutil.Process(pid).create_time()})
    save_state(state)


def _ours(entry: dict) -> psutil.Process | None:
    try:
        proc = psutil.Process(entry["pid"])
        return proc if abs(proc.create_time() - entry["start"]) < 0.01 else None
    except psutil.Error:
        return None


def stop_recorded(state, timeout: float = 10.0) -> list[str]:
    procs = [(e["name"], p) for e in reversed(state.daemons) if (p := _ours(e)) is not None]
    for _, p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs([p for _, p in procs], timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout)
    return [f"process {name} (pid {p.pid})" for name, p in procs]
