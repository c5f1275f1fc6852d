"""stdout and stderr whose reader may go away (`commbench compare a b | head -3`,
`commbench sweep 2>&1 | head`).

A closed pipe is the reader's choice, not a failure of the command: what a command measured or
decided (a run's points, compare's and gate's verdict in the exit code) must not be lost to it.
Without this, the first write raises BrokenPipeError: click ends the command with exit 1 (which a
CI job reads as compare's "a regression"), and a run's rank 0 dies with the rest of its points.

`guard()` (called by the entry point and by every local rank as it starts) makes sys.stdout and
sys.stderr `GuardedStream`s: the first write that finds the reader gone points the stream's file
descriptor at /dev/null (so that no later write, nor the interpreter's final flush, fails again)
and the command goes on with its exit code. The live table tells the user once that its reader
left (harness/console.py), on stderr where that still has one."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def silence(stream: TextIO) -> None:
    """Point `stream`'s file descriptor at /dev/null: later writes and the final flush succeed."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a file descriptor: nothing to keep writing to
        pass


class GuardedStream:
    """A text stream that forwards to `stream` until its reader is gone, then writes nowhere."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return int(self._stream.write(text))
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

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer: the stream's own
        return getattr(self._stream, name)


def guard() -> None:
    """Make sys.stdout and sys.stderr GuardedStreams (a stream guarded already keeps its guard)."""
    if sys.stdout is not None and not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr)


def reader_gone(stream: object = None) -> bool:
    """Whether `stream` (sys.stdout by default) is a guard whose reader went away."""
    return bool(getattr(sys.stdout if stream is None else stream, "reader_gone", False))
