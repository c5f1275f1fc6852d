"""stdout whose reader may go away (`commbench compare a b | head -3`, `commbench sweep | head`).

A closed pipe is the reader's choice, not a failure of the command: what a command measured or
decided (a run's points, compare's and gate's verdict in the exit code) must not be lost to it.
Without this, the first write raises BrokenPipeError and click ends the command with exit 1,
which a CI job reads as compare's "a regression".

`guard()` (called once by the entry point) makes sys.stdout a `GuardedStdout`: the first write
that finds the reader gone points file descriptor 1 at /dev/null (so that no later write, nor the
interpreter's final flush, fails again) and the command goes on with its exit code. A rank
process that was started fresh (spawn) has a plain stdout again; the live table catches
BrokenPipeError itself and calls `silence` (harness/console.py)."""

from __future__ import annotations

import os
import sys


def silence(stream) -> None:
    """Point `stream`'s file descriptor at /dev/null: later writes and the final flush succeed."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a file descriptor: nothing to keep writing to
        pass


class GuardedStdout:
    """A text stream that forwards to `stream` until its reader is gone, then writes nowhere."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        silence(self._stream)
        try:  # what the buffer still holds now goes to /dev/null, not to the closed pipe
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):  # fileno, isatty, encoding, buffer: the stream's own
        return getattr(self._stream, name)


def guard() -> GuardedStdout:
    """Make sys.stdout a GuardedStdout (once; a second call keeps the first guard)."""
    if not isinstance(sys.stdout, GuardedStdout):
        sys.stdout = GuardedStdout(sys.stdout)
    return sys.stdout


def reader_gone(stream=None) -> bool:
    """Whether `stream` (sys.stdout by default) is a guard whose reader went away."""
    return bool(getattr(sys.stdout if stream is None else stream, "reader_gone", False))
