"""A child process in its own process group, its output read line by line off pipes: the pieces
`commbench nccl-tests run` streams an nccl-tests binary with. Argv lists only, never a shell; a
group is killed whole, so nothing the binary started is left behind."""

from __future__ import annotations

import collections
import os
import queue
import re
import signal
import subprocess
import sys
import threading

from commbench.core.errors import RuntimeFailure


def kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds; nothing left behind."""
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


def read_lines(stream, sink: "queue.Queue[bytes | None]") -> None:
    """Every line of `stream` into `sink` (a thread's body), then None: the stream is closed."""
    try:
        for chunk in iter(stream.readline, b""):
            sink.put(chunk)
    except (OSError, ValueError):
        pass
    finally:
        sink.put(None)


def supports_json(binary: str, timeout: float = 15.0) -> bool:
    """nccl-tests >= 2.17.3 lists -J (--output_file) in its usage text."""
    try:
        proc = subprocess.Popen([binary, "-h"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, 0.5)
        return False
    finally:
        kill_group(proc, 0)
    text = out.decode("utf-8", errors="replace")
    return bool(re.search(r"-J,\s*--output_file|--output_file\s*<file>.*json", text))


class Streamed:
    """A started process group: its stdout lines queue up in `lines` for the caller (None once
    stdout is closed) while a thread echoes its stderr, copies it to the log and keeps its last
    lines in `tail` (shown when the binary fails)."""

    def __init__(self, argv: list[str], log) -> None:
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise RuntimeFailure(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        self.log = log
        self.lines: "queue.Queue[bytes | None]" = queue.Queue()
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.err_done = threading.Event()
        self._log_lock = threading.Lock()
        threads = [threading.Thread(target=read_lines, args=(self.proc.stdout, self.lines), daemon=True),
                   threading.Thread(target=self._pump_stderr, daemon=True)]
        for t in threads:
            t.start()

    def to_log(self, text: str) -> None:
        """Both pipes share the log; a line written after close_log() is dropped."""
        with self._log_lock:
            if self.log is not None and not self.log.closed:
                self.log.write(text)

    def close_log(self) -> None:
        if self.log is not None:
            with self._log_lock:
                self.log.close()

    def _pump_stderr(self) -> None:
        try:
            for chunk in iter(self.proc.stderr.readline, b""):
                text = chunk.decode("utf-8", errors="replace")
                self.tail.append(text.rstrip("\n"))
                sys.stderr.write(text)
                sys.stderr.flush()
                self.to_log(text)
        except (OSError, ValueError):
            pass
        finally:
            self.err_done.set()
