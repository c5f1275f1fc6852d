"""The stop guard: a rank asked to stop (SIGINT / SIGTERM) stops within seconds, whatever the
network does, even while its main thread is blocked in a call the network does not give back.

Python runs a signal's handler in the main thread only, between two bytecodes, so a main thread
blocked in a collective on a dead link or a read of rank 0's store never runs it. StopGuard reads
the signal's number from the wakeup fd on a thread of its own and leaves with the signal's code
STOP_GRACE_S later unless Python's handler let the signal by. The control plane installs it
(harness/control.py ControlPlane.on).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from typing import Protocol

STOP_GRACE_S = 5.0  # a rank asked to stop whose main thread has not moved for this long leaves by itself
_STOP_TICK_S = 0.25
STOP_CODES = {int(signal.SIGINT): ("SIGINT", 130), int(signal.SIGTERM): ("SIGTERM", 143)}


class Guarded(Protocol):
    """What the guard says of the rank it stops (harness/control.py's ControlPlane)."""

    rank: int
    host: str

    @property
    def blocked_in(self) -> str:
        """What the rank's main thread was last known to be doing (a point, or what follows one)."""


class StopGuard:
    """A rank asked to stop stops within seconds, whatever the network does. Python runs a signal's
    handler in the main thread only, between two bytecodes: a main thread blocked in a call the
    network does not give back (a collective on a dead link, a read of rank 0's store) never gets
    there. The C-level handler still writes the signal's number to the wakeup fd, read here on a
    thread of its own, and the SIGINT / SIGTERM handlers are wrapped so that this thread learns
    whether Python's handler ran and what it decided: not run STOP_GRACE_S after the signal (the
    main thread is stuck), or run and raised (the rank is stopping) but the plane still not closed
    STOP_GRACE_S later (its teardown is stuck): the rank says so and leaves with the signal's code. A
    handler that let the signal by (a rank reporting a failure ignores a launcher's SIGTERM on
    purpose, core/signals.py stop_once) is obeyed."""

    def __init__(self, plane: Guarded, read_fd: int, write_fd: int, previous: int) -> None:
        self.plane, self._read, self._write, self._previous = plane, read_fd, write_fd, previous
        self._ended = threading.Event()
        self._restored = False
        self.tick = 0  # this thread's looks so far
        self.asked: int | None = None  # the stop signal being waited on
        self.since = 0  # the look before the one that read it: a handler run from then on is for it
        self.still = 0.0  # seconds since then without the rank stopping
        self.handled = -1  # the look during which Python's handler last ran (the wrapper says)
        self.raised = False  # whether that run raised (the rank is stopping) or let the signal by
        self._handlers: dict[int, object] = {}
        for sig in STOP_CODES:
            handler = signal.getsignal(sig)
            if callable(handler):
                self._handlers[sig] = handler
                signal.signal(sig, self._wrap(handler))
        threading.Thread(target=self._run, name="commbench-stop-guard", daemon=True).start()

    @classmethod
    def install(cls, plane: Guarded) -> StopGuard | None:
        """On the main thread, when no wakeup fd is set yet (nothing else's is replaced); else None."""
        if threading.current_thread() is not threading.main_thread():
            return None
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous != -1:
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return None
        return cls(plane, read_fd, write_fd, previous)

    def _wrap(self, handler):
        def guarded(signum, frame):
            self.handled, self.raised = self.tick, True
            handler(signum, frame)
            self.raised = False  # it returned: the signal was let by on purpose

        return guarded

    def _run(self) -> None:
        while not self._ended.is_set():
            self.tick += 1
            ready, _, _ = select.select([self._read], [], [], _STOP_TICK_S)
            code = self.step(os.read(self._read, 64) if ready else b"", 0.0 if ready else _STOP_TICK_S)
            if code is not None and not self._ended.is_set():
                self.leave(code)
        if self._restored:  # the wakeup fd is no longer the pipe: nothing writes to it any more
            os.close(self._write)
            os.close(self._read)

    def step(self, signals: bytes, waited: float) -> int | None:
        """One look: the signals that arrived and the seconds since the last look. The signal's exit
        code once STOP_GRACE_S passed after it without Python's handler letting it by."""
        if self.asked is None:
            self.asked = next((b for b in signals if b in STOP_CODES), None)
            self.since, self.still = self.tick - 1, 0.0
            return None
        if self.handled >= self.since and not self.raised:
            self.asked = None  # the handler let it by: the rank goes on (and a later signal is looked at anew)
            return None
        self.still += waited
        return STOP_CODES[self.asked][1] if self.still >= STOP_GRACE_S else None

    def leave(self, code: int) -> None:
        plane = self.plane
        name = STOP_CODES[self.asked or int(signal.SIGTERM)][0]
        print(f"commbench: rank {plane.rank} on {plane.host}: asked to stop ({name}) {self.still:.0f} s ago and "
              f"still blocked in {plane.blocked_in} (a call into the backend or rank 0's store that the network "
              "does not give back); leaving without it (every finished row is already written)",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(code)

    def close(self) -> None:
        """Stop watching; on the main thread put the previous handlers and wakeup fd back (the thread
        then closes the pipe; off the main thread the pipe stays open, the signal handler may still
        write to it)."""
        if threading.current_thread() is threading.main_thread():
            for sig, handler in self._handlers.items():
                if getattr(signal.getsignal(sig), "__qualname__", "").endswith("_wrap.<locals>.guarded"):
                    signal.signal(sig, handler)  # type: ignore[arg-type]
            signal.set_wakeup_fd(self._previous)
            self._restored = True
        self._ended.set()
        try:
            os.write(self._write, b"\0")  # wakes the thread's select
        except OSError:
            pass
