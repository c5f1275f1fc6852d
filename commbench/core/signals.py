"""SIGINT and SIGTERM as exceptions, so that `finally` blocks keep what was measured (Slurm preemption,
scancel, a job's time limit, a terminal's Ctrl-C, the local supervisor stopping its ranks).

A process that stops must stop once: a terminal's Ctrl-C reaches every process of the group, a
supervisor forwards it again, Slurm repeats SIGTERM, and people press Ctrl-C twice. `stop_once()`
makes the first SIGINT / SIGTERM raise and every later one a no-op; `ignore_signals_until_exit()`
makes the rest of the process's life (its last message, the interpreter's shutdown) immune to both.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM; a BaseException so that `except Exception` lets it by."""


def raise_terminated(signum: int, frame: FrameType | None) -> None:
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


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_stopping = False  # set by the first SIGINT / SIGTERM under stop_once(), or by stopping()


def _first_signal_stops(signum: int, frame: FrameType | None) -> None:
    """The handler of stop_once(): the flag is set before the raise, so a signal that arrives while
    this one is handled (or the exception is being caught) finds it set and changes nothing."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def stop_once() -> None:
    """From now on (in this process) the first SIGINT raises KeyboardInterrupt and the first SIGTERM
    raises Terminated; later ones are ignored. One-way on purpose: putting the previous handlers back
    would open a window for a second signal on the way out. Off the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _first_signal_stops)


def stopping() -> None:
    """The process is stopping (a failure, a first signal, the end of the run): under stop_once() a
    SIGINT / SIGTERM from now on is ignored, e.g. a launcher's SIGTERM while a rank reports the rows
    it kept."""
    global _stopping
    _stopping = True


def ignore_signals_until_exit() -> None:
    """The process ends next with a code it has decided: SIGINT and SIGTERM are ignored for the rest
    of its life, also during the interpreter's shutdown (which puts Python-level handlers back to the
    defaults, so a late signal would kill the process instead of letting it exit with its code).

    The signals are blocked while the dispositions change, so that none is caught by Python's C
    handler and then found without a Python handler ("Signal 2 ignored due to race condition");
    SIG_IGN discards what is pending, and the mask is put back for any process started later."""
    stopping()
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
