"""SIGTERM as an exception, so that `finally` blocks keep what was measured (Slurm preemption,
scancel, a job's time limit, the local supervisor stopping its ranks)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM; a BaseException so that `except Exception` lets it by."""


def raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Inside the block SIGTERM raises Terminated; the previous handler is put back after it,
    unless the block installed another one of its own. Off the main thread (where Python cannot
    install handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is raise_terminated:
            signal.signal(signal.SIGTERM, previous)
