"""The unit tier runs in process (README, Development: the tiers): no test starts a process, neither
the CLI (`python -m commbench`: tests/conftest.py's `cli` runs it in this process) nor a rank, a
shell script or a stand-in binary. tests/unit/conftest.py wraps each test's set-up, call and
tear-down in `refused()`: every way of starting a process (subprocess, multiprocessing, os.fork,
os.posix_spawn, os.system) raises ProcessStart there instead, and a test that started one fails
even where the code under test caught the error. A test that needs real processes belongs in
tests/integration."""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

MOVE = ("a unit test starts no process (tests/unit/inprocess.py): use the `cli` fixture, "
        "or move the test to tests/integration")


class ProcessStart(RuntimeError):
    """A process was about to start inside a unit test."""


# The recorders of the guards now open, innermost last: a start is refused and told to the innermost.
_open: list[list[str]] = []


def _argv(name: str, args: tuple[Any, ...]) -> str:
    if name == "fork_exec" and args:  # fork_exec(args, executable_list, ...): the child's argv first
        return " ".join(os.fsdecode(a) for a in args[0] or [])
    if name in ("posix_spawn", "posix_spawnp") and len(args) > 1:
        return " ".join(os.fsdecode(a) for a in args[1])
    return f"{name}({', '.join(map(repr, args))})"


def _refusing(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def start(*args: Any, **kw: Any) -> Any:
        if not _open:
            return real(*args, **kw)
        what = _argv(name, args)
        _open[-1].append(what)
        raise ProcessStart(f"{MOVE}; it started: {what}")

    return start


# Every door to a new process: subprocess (its own reference to fork_exec, and posix_spawn when it
# takes that path), multiprocessing (fork_exec for spawn and forkserver, os.fork for fork), pty
# (os.forkpty) and os.system.
_DOORS: list[tuple[Any, str]] = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"),
                                 (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system")]
for _module, _name in _DOORS:
    if getattr(_module, _name, None) is not None:
        setattr(_module, _name, _refusing(_name.lstrip("_"), getattr(_module, _name)))


@contextlib.contextmanager
def refused() -> Iterator[list[str]]:
    """Within: starting a process raises ProcessStart; the list gets what each start would have run."""
    started: list[str] = []
    _open.append(started)
    try:
        yield started
    finally:
        _open.remove(started)
