"""An nccl-tests binary as `commbench nccl-tests run` streams it, on core/pump.py: its process group
under the run's deadline, its stdout lines for the parser, its stderr echoed, both copied to the
log, each of those bounded; and its `-h` probe, inside the same deadline and bound. Argv lists
only, never a shell; a group is killed whole, so nothing the binary started is left behind."""

from __future__ import annotations

import collections
import re
import sys
import time
from collections.abc import Callable, Iterator

from commbench.core.errors import RuntimeFailure
from commbench.core.pump import ERR, OUTPUT_CAP, Capped, Child, capture

HELP_TIMEOUT = 15.0  # the most the -h probe may take (less when the run's deadline is nearer)
HELP_CAP = 1024 * 1024  # the most of its usage text read
TAIL_LINES, TAIL_CHARS = 20, 1000  # stderr's last lines kept for the failure report, each cut here


def supports_json(binary: str, deadline: float | None = None) -> bool:
    """nccl-tests >= 2.17.3 lists -J (--output_file) in its usage text. The probe ends by the run's
    deadline (and HELP_TIMEOUT) and reads at most HELP_CAP bytes; a probe cut short says no."""
    timeout = HELP_TIMEOUT if deadline is None else min(HELP_TIMEOUT, deadline - time.monotonic())
    if timeout <= 0:
        return False
    got = capture([binary, "-h"], timeout=timeout, limit=HELP_CAP, stderr="stdout", grace=0.5)
    if got is None or got.timed_out:
        return False
    return bool(re.search(r"-J,\s*--output_file|--output_file\s*<file>.*json", got.text))


def _stderr_write(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


class Streamed:
    """A started binary: its stdout lines for the caller (`stdout_lines`), its stderr echoed and
    its last lines kept in `tail` (shown when it fails), both copied to the log. The log, the echo
    of stdout and the echo of stderr each keep at most OUTPUT_CAP bytes, then say once where they
    were cut."""

    def __init__(self, argv: list[str], log, deadline: float | None, echo: Callable[[str], None]) -> None:
        try:
            self.child = Child(argv, deadline=deadline)
        except OSError as exc:
            raise RuntimeFailure(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        self.log, self.log_failed = log, False
        self.to_log = Capped(self._write_log, OUTPUT_CAP)
        self.echo_out = Capped(echo, OUTPUT_CAP)
        self.echo_err = Capped(_stderr_write, OUTPUT_CAP)
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    @property
    def proc(self):
        return self.child.proc

    def stdout_lines(self, drain: bool = False) -> Iterator[str]:
        """stdout's lines as they come (until the end or the deadline); with `drain`, after the
        group was stopped, what was still in the pipes. stderr's lines are handled on the way."""
        for kind, chunk in (self.child.drain() if drain else self.child.lines()):
            text = chunk.decode("utf-8", errors="replace")
            self.to_log(text)
            if kind == ERR:
                line = text.rstrip("\n")
                self.tail.append(line if len(line) <= TAIL_CHARS else line[:TAIL_CHARS] + " ...")
                self.echo_err(text)
                continue
            self.echo_out(text)
            yield text

    def _write_log(self, text: str) -> None:
        if self.log is None or self.log.closed or self.log_failed:
            return
        try:
            self.log.write(text)
        except OSError:  # a full disk: the log stops there, the run (and its results) go on
            self.log_failed = True

    def close(self) -> None:
        self.child.close()
        if self.log is not None:
            try:
                self.log.close()
            except OSError:  # the buffered rest could not be written: the log ends earlier
                pass
