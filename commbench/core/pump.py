"""Another program's output, read as it comes, under one wall-clock deadline and one bound: the one
way commbench runs a child and reads what it prints (an nccl-tests binary and its `-h`, and
ibv_devinfo, nvidia-smi, perfquery for the network facts). Argv lists only, never a shell.

- The child runs in its own session, so in a process group of its own: `Child.stop` kills the
  group whole (SIGTERM, SIGKILL after a grace), and nothing it started is left behind. A SIGTERM
  to commbench while it waits out that grace is held (`sigterm_while_stopping`), not a hard death.
- Both pipes are read in chunks on the calling thread (no reader threads, no queue) and split into
  lines; a chunk is read only once every line of the last one was handed on, and a line longer
  than `line_cap` is cut there (with a mark saying so) and the rest of it dropped. Memory holds one
  chunk and one line per pipe, whatever the child prints.
- The deadline (`time.monotonic()`) is looked at before every line handed on, so it holds however
  much and however fast the child prints.
- `limit` bounds the bytes read in all (`capture`); `Capped` bounds what is written on (a log, the
  terminal) and says once, on a line of its own, that the output was cut there.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable, Iterator
from typing import Any

OUT, ERR = 1, 2  # which pipe a line came from
READ_SIZE = 64 * 1024
LINE_CAP = 64 * 1024  # the longest line handed on; the rest of a longer one is dropped
OUTPUT_CAP = 32 * 1024 * 1024  # what a log, or the terminal, gets of one child's output
DRAIN_SECONDS = 1.0  # what is still in the pipes after a stop: read for this long at most
DRAIN_BYTES = 1024 * 1024  # ... and this much at most
TICK = 0.2
LINGER = 2.0  # the child ended but something it left holds its pipes: stop reading after this


def kill_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds (straight SIGKILL when 0)."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid  # the leader is gone (reaped); its group may still have members
    for sig in ((signal.SIGTERM, signal.SIGKILL) if grace > 0 else (signal.SIGKILL,)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        if sig == signal.SIGTERM:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@contextlib.contextmanager
def sigterm_held() -> Iterator[list[int]]:
    """Inside the block SIGTERM is noted in the list it yields instead of acted on (main thread
    only: elsewhere the block runs unchanged); the previous handler is put back after it."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class Capped:
    """`write` (a log's, the terminal's) for at most `cap` bytes of UTF-8 text, then one line saying
    that the output was cut there, then nothing more (`dropped` counts what was not written)."""

    def __init__(self, write: Callable[[str], None], cap: int = OUTPUT_CAP) -> None:
        self.write, self.cap = write, cap
        self.used = self.dropped = 0
        self.cut = False
        self._line_open = False  # the last text written did not end its line

    def __call__(self, text: str) -> None:
        if self.cut:
            self.dropped += len(text)
            return
        n = len(text.encode("utf-8", errors="replace"))
        if self.used + n <= self.cap:
            self.used += n
            self._line_open = bool(text) and not text.endswith("\n")
            self.write(text)
            return
        self.cut, self.dropped = True, len(text)
        self.write(("\n" if self._line_open else "") +
                   f"[commbench: output cut here, after {self.cap // (1024 * 1024)} MiB; the rest is not kept]\n")


class Child:
    """A started child in a process group of its own, its output as lines (`lines`), under a
    deadline (`timed_out`) and an optional bound on the bytes read (`over_limit`).

    stderr: "pipe" (its own lines, tagged ERR), "stdout" (merged into stdout) or "null".
    Raises OSError when the program cannot be started."""

    def __init__(self, argv: list[str], *, deadline: float | None = None, stderr: str = "pipe",
                 line_cap: int = LINE_CAP, limit: int | None = None) -> None:
        err = {"pipe": subprocess.PIPE, "stdout": subprocess.STDOUT, "null": subprocess.DEVNULL}[stderr]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                     start_new_session=True)
        self.deadline, self.line_cap, self.limit = deadline, line_cap, limit
        self.timed_out = self.over_limit = self.sigterm_while_stopping = False
        self.bytes_read = 0
        self._sel = selectors.DefaultSelector()
        self._pipes = {}
        self._bufs: dict[int, bytearray] = {}
        self._skipping: dict[int, bool] = {}
        self._ready: collections.deque[tuple[int, bytes]] = collections.deque()
        self._exited_at: float | None = None
        for kind, pipe in ((OUT, self.proc.stdout), (ERR, self.proc.stderr)):
            if pipe is not None:
                self._pipes[kind] = pipe
                self._sel.register(pipe.fileno(), selectors.EVENT_READ, kind)
                self._bufs[kind], self._skipping[kind] = bytearray(), False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(OUT or ERR, a line with its newline; the very last may lack it) as the child prints
        them, until its pipes close (or it ended LINGER s ago and something it left holds them), the
        deadline passes (`timed_out`) or more than `limit` bytes were read (`over_limit`)."""
        while True:
            while self._ready:
                if self._past_deadline():
                    return
                yield self._ready.popleft()
            if not self._sel.get_map() or self.over_limit or self._past_deadline() or self._lingered():
                return
            wait = TICK if self.deadline is None else max(0.0, min(TICK, self.deadline - time.monotonic()))
            self._read(wait)

    def drain(self) -> Iterator[tuple[int, bytes]]:
        """After `stop`: the lines still in the pipes, for DRAIN_SECONDS and DRAIN_BYTES at most."""
        end, budget = time.monotonic() + DRAIN_SECONDS, self.bytes_read + DRAIN_BYTES
        while True:
            while self._ready:
                yield self._ready.popleft()
            left = end - time.monotonic()
            if not self._sel.get_map() or left <= 0 or self.bytes_read > budget:
                return
            self._read(min(TICK, left))

    def wait(self) -> bool:
        """Wait for the child to end, until the deadline: False (and `timed_out`) if it did not."""
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            return False
        return True

    def stop(self, grace: float) -> None:
        """Kill the whole group (SIGTERM, SIGKILL after `grace`; SIGKILL at once when 0), also
        what the child left behind after it ended; a SIGTERM meanwhile is noted, not obeyed."""
        with sigterm_held() as got:
            kill_group(self.proc, grace)
        self.sigterm_while_stopping = self.sigterm_while_stopping or bool(got)

    def close(self) -> None:
        self._sel.close()
        for pipe in self._pipes.values():
            with contextlib.suppress(OSError):
                pipe.close()

    def _past_deadline(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.timed_out = True
        return self.timed_out

    def _lingered(self) -> bool:
        if self.proc.poll() is None:
            return False
        if self._exited_at is None:
            self._exited_at = time.monotonic()
        return time.monotonic() - self._exited_at > LINGER

    def _read(self, timeout: float) -> None:
        for key, _ in self._sel.select(timeout):
            kind = key.data
            try:
                chunk = os.read(key.fd, READ_SIZE)
            except OSError:
                chunk = b""
            if not chunk:  # closed: its last line, even without a newline
                self._sel.unregister(key.fd)
                if self._bufs[kind]:
                    self._ready.append((kind, bytes(self._bufs[kind])))
                self._bufs[kind].clear()
                continue
            if self.limit is not None and self.bytes_read + len(chunk) > self.limit:
                chunk, self.over_limit = chunk[:self.limit - self.bytes_read], True
            self.bytes_read += len(chunk)
            self._split(kind, chunk)

    def _split(self, kind: int, chunk: bytes) -> None:
        """`chunk` into whole lines on `_ready`; the unfinished rest waits in the pipe's buffer."""
        buf, start = self._bufs[kind], 0
        if self._skipping[kind]:  # inside a line already cut: drop up to its newline
            nl = chunk.find(b"\n")
            if nl < 0:
                return
            self._skipping[kind], start = False, nl + 1
        while (nl := chunk.find(b"\n", start)) >= 0:
            line = bytes(buf) + chunk[start:nl + 1]
            buf.clear()
            self._ready.append((kind, line if len(line) <= self.line_cap + 1 else self._cut(line)))
            start = nl + 1
        rest = chunk[start:]
        if len(buf) + len(rest) > self.line_cap:
            self._ready.append((kind, self._cut(bytes(buf) + rest)))
            buf.clear()
            self._skipping[kind] = True
        else:
            buf += rest

    def _cut(self, line: bytes) -> bytes:
        return line[:self.line_cap] + b" [commbench: line cut at %d KiB; the rest of it is dropped]\n" % (
            self.line_cap // 1024)


@dataclass
class Captured:
    """What `capture` got: at most `limit` bytes of output, and how the child ended."""

    out: bytes
    returncode: int | None
    timed_out: bool
    over_limit: bool

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.over_limit


def capture(argv: list[str], *, timeout: float, limit: int, stderr: str = "null",
            grace: float = 1.0) -> Captured | None:
    """Run `argv` to its end within `timeout` seconds, keeping at most `limit` bytes of what it
    prints (past that it is stopped: `over_limit`). None when it cannot be started."""
    try:
        child = Child(argv, deadline=time.monotonic() + timeout, stderr=stderr, line_cap=limit, limit=limit)
    except OSError:
        return None
    parts: list[bytes] = []
    ended = False
    try:
        parts.extend(line for _, line in child.lines())
        ended = not (child.timed_out or child.over_limit) and child.wait()
    finally:
        child.stop(0 if ended else grace)
        child.close()
    return Captured(b"".join(parts), child.proc.returncode, child.timed_out, child.over_limit)
