"""What must still run when a process ends by os._exit: commbench's ranks and launcher skip the
interpreter's shutdown (cli/launcher.py _end_now says why), so atexit handlers never run there.
A module that needs its end registers here (integrations/capture.py writes a rank's trace part),
and the places that call os._exit run these first."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn

_HOOKS: list[Callable[[], object]] = []


def register(hook: Callable[[], object]) -> None:
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def run() -> None:
    """Every hook once, in order; one that fails does not keep the process from ending."""
    for hook in list(_HOOKS):
        try:
            hook()
        except Exception:  # noqa: BLE001 - the process is ending: its exit code matters more
            pass


def exit_now(code: int) -> NoReturn:
    run()
    os._exit(code)
